package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReplicationUpgradeSpec says which nodes join the storage cluster and how many replicas
// each volume ends with.
type ReplicationUpgradeSpec struct {
	// peerNodes are the nodes that join the single storage node, in the order they join.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	PeerNodes []string `json:"peerNodes"`

	// replicaCount is the number of data replicas each volume has at the end.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=3
	ReplicaCount int32 `json:"replicaCount,omitempty"`

	// tiebreakerNode holds no data but gives DRBD a quorum vote; one of peerNodes or empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TiebreakerNode string `json:"tiebreakerNode,omitempty"`

	// syncTimeout is how long the initial DRBD synchronisation may take before the upgrade
	// is rolled back. Between 1m and 48h.
	// +optional
	// +kubebuilder:default="6h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('48h'))",message="must be between 1m and 48h"
	SyncTimeout metav1.Duration `json:"syncTimeout,omitzero"`

	// approval says whether each step that changes a node waits for a person to approve it.
	// +optional
	// +kubebuilder:default=Automatic
	Approval Approval `json:"approval,omitempty"`

	// maintenanceWindow, when set, is when a step that changes a node may start.
	// +optional
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`
}

// ReplicationUpgradeStatus is the upgrade's progress and evidence.
type ReplicationUpgradeStatus struct {
	WorkflowStatus `json:",inline"`
}

// ReplicationUpgrade turns a single-node storage cluster into a replicated one: peers join,
// replicas are placed, DRBD synchronises and is verified, quorum is configured and the
// taints are released, each stage gated, with rollback. The spec cannot change once the
// upgrade has started.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=rupg;replup,categories=nodewright
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicaCount`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.steps[?(@.state=="Running")].name`,description="The step now running"
// +kubebuilder:printcolumn:name="Waiting",type=string,JSONPath=`.status.steps[?(@.state=="Waiting")].name`,description="The step a gate holds"
// +kubebuilder:printcolumn:name="Held By",type=string,JSONPath=`.status.conditions[?(@.type=="Held")].reason`,description="The gate that holds the next step, or GatesOpen"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(self.spec.tiebreakerNode) || self.spec.tiebreakerNode in self.spec.peerNodes",message="tiebreakerNode must be one of peerNodes",fieldPath=".spec.tiebreakerNode"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.tiebreakerNode) || self.spec.replicaCount <= size(self.spec.peerNodes)",message="replicaCount counts the data nodes: with a tiebreaker it can be at most the number of peerNodes",fieldPath=".spec.replicaCount"
// +kubebuilder:validation:XValidation:rule="has(self.spec.tiebreakerNode) || self.spec.replicaCount <= size(self.spec.peerNodes) + 1",message="replicaCount cannot exceed the number of data nodes (the existing node plus peerNodes)",fieldPath=".spec.replicaCount"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec",message="spec cannot change once the upgrade has started",fieldPath=".spec"
type ReplicationUpgrade struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which nodes join and how many replicas each volume ends with.
	// +required
	Spec ReplicationUpgradeSpec `json:"spec"`

	// status is the upgrade's progress and evidence.
	// +optional
	Status ReplicationUpgradeStatus `json:"status,omitempty"`
}

// ReplicationUpgradeList is a list of ReplicationUpgrade.
//
// +kubebuilder:object:root=true
type ReplicationUpgradeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ReplicationUpgrade `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ReplicationUpgrade{}, &ReplicationUpgradeList{})
}
