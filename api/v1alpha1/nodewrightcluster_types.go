package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodewrightClusterName is the only name a NodewrightCluster may have.
const NodewrightClusterName = "nodewright"

// ClusterPhase is the cluster's rolled-up lifecycle phase.
// +kubebuilder:validation:Enum=Bootstrap;SingleNode;Upgrading;MultiNode;Degraded;Recovering;Unknown
type ClusterPhase string

// The cluster phases. Each legacy state maps to one of the first six; Unknown means the
// legacy state could not be read or understood, and a condition says why.
const (
	ClusterBootstrap  ClusterPhase = "Bootstrap"
	ClusterSingleNode ClusterPhase = "SingleNode"
	ClusterUpgrading  ClusterPhase = "Upgrading"
	ClusterMultiNode  ClusterPhase = "MultiNode"
	ClusterDegraded   ClusterPhase = "Degraded"
	ClusterRecovering ClusterPhase = "Recovering"
	ClusterUnknown    ClusterPhase = "Unknown"
)

// LegacyState is one of the 21 states of the legacy DaemonSet's state machine.
// +kubebuilder:validation:Enum=INIT;NETWORK_CONFIGURING;STORAGE_BOOTSTRAPPING;SINGLE_NODE_READY;PEER_DETECTED;PEER_NETWORK_CONFIGURING;PEER_STORAGE_JOINING;REPLICA_PLACEMENT;DRBD_CONNECTING;DRBD_SYNCING;DRBD_VERIFYING;QUORUM_CONFIGURING;TAINTS_RELEASING;MULTI_NODE_READY;PEER_LOST;DRBD_DEGRADED;SPLIT_BRAIN;FAILED;BOOT_RECOVERY;RECOVERING;RESYNCING
type LegacyState string

// ManagementMode says who decides about the cluster's nodes: the legacy DaemonSet, which
// Nodewright observes (Observe), or Nodewright, through its node agents (Managed).
// +kubebuilder:validation:Enum=Observe;Managed
type ManagementMode string

// The management modes.
const (
	// ManagementObserve: the legacy DaemonSet decides; Nodewright reads its ConfigMap and
	// refuses the workflows that change nodes (BondModeFlipPlan, ReplicationUpgrade).
	ManagementObserve ManagementMode = "Observe"
	// ManagementManaged: the agents report the nodes, the legacy DaemonSet has no pods, and
	// Nodewright's workflows may change nodes.
	ManagementManaged ManagementMode = "Managed"
)

// NodewrightClusterSpec says where the legacy DaemonSet keeps its state and how to judge it.
type NodewrightClusterSpec struct {
	// management says who decides about the nodes. Observe (the default): the legacy
	// DaemonSet does, and Nodewright only observes its ConfigMap. Managed: Nodewright's
	// agents report the nodes and its workflows may change them; the switch is accepted only
	// while every Node's agent reports (its heartbeat Lease renewed within
	// heartbeatStaleAfter) and the legacy DaemonSet is gone or has no pods, and
	// status.management says when it took effect. Back to Observe is always allowed.
	// +optional
	// +kubebuilder:default=Observe
	Management ManagementMode `json:"management,omitempty"`

	// legacy names the ConfigMap, DaemonSet and Event component of the legacy node-init
	// DaemonSet. Nodewright only reads them.
	// +required
	Legacy LegacySource `json:"legacy"`

	// heartbeatStaleAfter is how old a node's heartbeat may be before the node counts as
	// stale. In SingleNode or MultiNode, one stale node makes the cluster Degraded.
	// Between 1s and 1h.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))",message="must be between 1s and 1h"
	HeartbeatStaleAfter metav1.Duration `json:"heartbeatStaleAfter,omitzero"`

	// profileRef names the EdgeProfile that describes this site, if any.
	// +optional
	ProfileRef *ProfileReference `json:"profileRef,omitempty"`
}

// ProfileReference names an EdgeProfile.
type ProfileReference struct {
	// name of the EdgeProfile.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NodeCounts counts the nodes: in Observe those the legacy DaemonSet manages, in Managed the
// cluster's Nodes.
type NodeCounts struct {
	// ready counts the nodes whose heartbeat is fresh (in Managed, their agent's Lease).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Ready int32 `json:"ready,omitempty"`

	// total counts the nodes the DaemonSet manages (in Managed, the cluster's Nodes).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Total int32 `json:"total,omitempty"`
}

// WarningSource says where a recent warning came from.
// +kubebuilder:validation:Enum=Event;Transition;Observation
type WarningSource string

// The warning sources.
const (
	// WarningFromEvent: a Warning Event the legacy DaemonSet emitted.
	WarningFromEvent WarningSource = "Event"
	// WarningFromTransition: a transition the legacy state machine does not allow, or a
	// generation jump that means transitions were missed.
	WarningFromTransition WarningSource = "Transition"
	// WarningFromObservation: something Nodewright noticed while reading the legacy state.
	WarningFromObservation WarningSource = "Observation"
)

// ClusterWarning is one recent warning about the cluster.
type ClusterWarning struct {
	// time the warning was raised.
	// +required
	Time metav1.Time `json:"time"`

	// source of the warning.
	// +required
	Source WarningSource `json:"source"`

	// reason is a CamelCase word for the kind of warning.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9]*$`
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`

	// message says what happened, for a person.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// ActiveProfile identifies the EdgeProfile in force.
type ActiveProfile struct {
	// name of the EdgeProfile.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// version is the profile's spec.version. A profile with a lower version is not applied.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
	// digest is "sha256:" and the hex SHA-256 of the canonical encoding of the profile's
	// spec, the bytes its signature covers.
	// +required
	// +kubebuilder:validation:MaxLength=80
	Digest string `json:"digest"`
	// keyID identifies the trusted public key that verified the signature.
	// +optional
	// +kubebuilder:validation:MaxLength=80
	KeyID string `json:"keyID,omitempty"`
}

// NodewrightClusterStatus is the cluster's health as observed.
type NodewrightClusterStatus struct {
	// phase is the rolled-up lifecycle phase.
	// +optional
	Phase ClusterPhase `json:"phase,omitempty"`

	// legacyState is the legacy DaemonSet's current state; empty when the state could not be
	// read or is not one of the 21 (the StateRecognized condition says what was found).
	// +optional
	LegacyState LegacyState `json:"legacyState,omitempty"`

	// legacyStateSince is when the legacy DaemonSet entered legacyState.
	// +optional
	LegacyStateSince *metav1.Time `json:"legacyStateSince,omitempty"`

	// legacyGeneration is the legacy state machine's transition counter.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LegacyGeneration int64 `json:"legacyGeneration,omitempty"`

	// nodes counts the managed nodes and those with a fresh heartbeat.
	// +optional
	Nodes NodeCounts `json:"nodes,omitempty"`

	// recentWarnings are the newest warnings, newest last, at most 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	RecentWarnings []ClusterWarning `json:"recentWarnings,omitempty"`

	// profile is the EdgeProfile in force: the one spec.profileRef names, once its signature
	// verified. The legacy names and thresholds come from it.
	// +optional
	Profile *ActiveProfile `json:"profile,omitempty"`

	// management is the mode in effect: Managed once the handover spec.management asked
	// for was checked and took effect, Observe otherwise. The ManagementApplied condition
	// says why.
	// +optional
	Management ManagementMode `json:"management,omitempty"`

	// operatorVersion is the version of the Nodewright operator that wrote this status: its
	// chart's app version, the operator Deployment's app.kubernetes.io/version label. A
	// fleet hub reads it here, from the object it watches, rather than asking the member for
	// the Deployment.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	OperatorVersion string `json:"operatorVersion,omitempty"`

	// observedGeneration is the metadata.generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: ManagementApplied and HeartbeatsFresh; in Observe also Observed,
	// StateRecognized and DaemonSetAvailable (the legacy objects); ProfileApplied (when
	// spec.profileRef is set).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodewrightCluster is the cluster-level health rollup of an edge storage cluster: in Observe,
// the legacy DaemonSet's state machine, heartbeats and Events, observed read-only; in
// Managed, the node agents' heartbeats. It is a singleton named "nodewright".
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nwc,categories=nodewright
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Management",type=string,JSONPath=`.status.management`,description="The management mode in effect: Observe (the legacy DaemonSet decides) or Managed"
// +kubebuilder:printcolumn:name="Legacy State",type=string,JSONPath=`.status.legacyState`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.nodes.ready`,description="Nodes with a fresh heartbeat"
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes.total`,description="Nodes the legacy DaemonSet manages (Observe) or the cluster's Nodes (Managed)"
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.status.profile.version`,description="Version of the EdgeProfile in force",priority=1
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.status.operatorVersion`,description="Version of the Nodewright operator that wrote the status",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'nodewright'",message="NodewrightCluster is a singleton: metadata.name must be 'nodewright'"
type NodewrightCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says where the legacy state is and how to judge it.
	// +required
	Spec NodewrightClusterSpec `json:"spec"`

	// status is the cluster's health as observed.
	// +optional
	Status NodewrightClusterStatus `json:"status,omitempty"`
}

// NodewrightClusterList is a list of NodewrightCluster.
//
// +kubebuilder:object:root=true
type NodewrightClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodewrightCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodewrightCluster{}, &NodewrightClusterList{})
}
