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

	// originalNode is the node whose replicas held every volume when the upgrade started:
	// its replicas are never deleted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OriginalNode string `json:"originalNode,omitempty"`

	// dataNodes are the joining nodes that get a diskful replica of every volume.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=253
	DataNodes []string `json:"dataNodes,omitempty"`

	// resourceDefinitions are the LINSTOR resource definitions (the volumes) the upgrade
	// replicates, as the Preflight found them on originalNode; a volume created later is not
	// the upgrade's (LINSTOR places it by its group's place count).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MaxLength=48
	ResourceDefinitions []string `json:"resourceDefinitions,omitempty"`

	// volumes counts the volumes through the stages.
	// +optional
	Volumes *ReplicationVolumeCounts `json:"volumes,omitempty"`

	// syncPercent is how far the initial synchronisation is over every new replica, in whole
	// percent (rounded down).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SyncPercent *int32 `json:"syncPercent,omitempty"`

	// syncing are the replicas still synchronising, the least done first: at most 16.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Syncing []ReplicaSync `json:"syncing,omitempty"`

	// progress is the running stage's progress for kubectl get: "placed 120/400".
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Progress string `json:"progress,omitempty"`

	// undo is what the upgrade changed outside its own replicas and what each was before,
	// recorded before the change: what a rollback puts back.
	// +optional
	Undo *ReplicationUndo `json:"undo,omitempty"`
}

// ReplicationVolumeCounts counts the upgrade's volumes (resource definitions) and replicas.
type ReplicationVolumeCounts struct {
	// total is the number of volumes the upgrade replicates.
	// +kubebuilder:validation:Minimum=0
	Total int32 `json:"total"`
	// replicas is the number of new replicas (diskful and tiebreakers) the upgrade places.
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`
	// placed is how many of them LINSTOR has.
	// +kubebuilder:validation:Minimum=0
	Placed int32 `json:"placed"`
	// upToDate is how many volumes have every replica UpToDate.
	// +kubebuilder:validation:Minimum=0
	UpToDate int32 `json:"upToDate"`
	// verified is how many volumes DRBD's online verify found identical on every replica.
	// +kubebuilder:validation:Minimum=0
	Verified int32 `json:"verified"`
}

// ReplicaSync is one new replica's initial synchronisation.
type ReplicaSync struct {
	// resource is the volume's resource definition.
	// +required
	// +kubebuilder:validation:MaxLength=48
	Resource string `json:"resource"`
	// node is where the replica is.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// percent is how far it is, in whole percent (rounded down).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent"`
}

// ReplicationUndo is what a rollback puts back.
type ReplicationUndo struct {
	// balanceResources is the controller property change that turns LINSTOR's balance task
	// back to what it was.
	// +optional
	BalanceResources *PropertyChange `json:"balanceResources,omitempty"`
	// balanceRestored is true once the upgrade turned the balance task back itself.
	// +optional
	BalanceRestored bool `json:"balanceRestored,omitempty"`

	// resourceGroups are the groups whose place count or properties the upgrade changed.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	ResourceGroups []ResourceGroupUndo `json:"resourceGroups,omitempty"`

	// taints are the taints the upgrade removed from the joining nodes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Taints []NodeTaint `json:"taints,omitempty"`
}

// PropertyChange is a change to a LINSTOR object's properties: keys set and keys deleted.
type PropertyChange struct {
	// set are the keys to set, with their values.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Set map[string]string `json:"set,omitempty"`
	// delete are the keys to delete.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	Delete []string `json:"delete,omitempty"`
}

// ResourceGroupUndo is how to put one resource group back.
type ResourceGroupUndo struct {
	// name of the resource group.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=48
	Name string `json:"name"`
	// placeCount is the place count it had (0: unset), recorded before the upgrade raised it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PlaceCount *int32 `json:"placeCount,omitempty"`
	// quorum is the property change that puts its quorum options back, recorded before the
	// upgrade set them.
	// +optional
	Quorum *PropertyChange `json:"quorum,omitempty"`
}

// NodeTaint is a taint on a node.
type NodeTaint struct {
	// node is the node's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// key, value and effect are the taint's.
	// +required
	// +kubebuilder:validation:MaxLength=316
	Key string `json:"key"`
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Value string `json:"value,omitempty"`
	// +required
	// +kubebuilder:validation:Enum=NoSchedule;PreferNoSchedule;NoExecute
	Effect string `json:"effect"`
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
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`,description="The running stage's progress"
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
