package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeRole is a node's role in the storage cluster.
// +kubebuilder:validation:Enum=primary;secondary;tiebreaker
type NodeRole string

// The node roles, as the legacy DaemonSet writes them.
const (
	NodeRolePrimary    NodeRole = "primary"
	NodeRoleSecondary  NodeRole = "secondary"
	NodeRoleTiebreaker NodeRole = "tiebreaker"
)

// HeartbeatStatus says whether a node's agent is alive.
type HeartbeatStatus struct {
	// lastSeen is the heartbeat time recorded when the node's freshness last changed (it went
	// stale, or came back). It is deliberately not refreshed on every tick, so that a healthy
	// cluster causes no API writes; the live value is in the legacy ConfigMap.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`

	// stale is true when the heartbeat is older than the cluster's heartbeatStaleAfter (or
	// there is none).
	// +optional
	Stale bool `json:"stale,omitempty"`
}

// DRBDStatus is a node's DRBD replication health.
type DRBDStatus struct {
	// resources is the number of DRBD resources on the node.
	// +kubebuilder:validation:Minimum=0
	Resources int32 `json:"resources"`

	// connected is the number of resources connected to their peers.
	// +kubebuilder:validation:Minimum=0
	Connected int32 `json:"connected"`

	// upToDate is the number of resources whose local disk is UpToDate.
	// +kubebuilder:validation:Minimum=0
	UpToDate int32 `json:"upToDate"`

	// outOfSyncKiB is how much data still has to be synchronised, in KiB.
	// +kubebuilder:validation:Minimum=0
	OutOfSyncKiB int64 `json:"outOfSyncKiB"`
}

// NodeNetworkStatus is a node's observed network configuration.
type NodeNetworkStatus struct {
	// bondMode is the mode of the node's storage bond.
	// +optional
	BondMode BondMode `json:"bondMode,omitempty"`
}

// NodewrightAgentStatusStatus is one node's state as observed.
type NodewrightAgentStatusStatus struct {
	// role of the node in the storage cluster.
	// +optional
	Role NodeRole `json:"role,omitempty"`

	// heartbeat says whether the node's agent is alive.
	// +optional
	Heartbeat HeartbeatStatus `json:"heartbeat,omitempty"`

	// storage is the node's DRBD health; absent until reported.
	// +optional
	Storage *DRBDStatus `json:"storage,omitempty"`

	// network is the node's observed network configuration.
	// +optional
	Network NodeNetworkStatus `json:"network,omitempty"`

	// conditions: HeartbeatFresh, StorageHealthy.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodewrightAgentStatus is one node's observed state: role, heartbeat, DRBD health and bond
// mode. There is one per managed node, named after the node; Nodewright creates and deletes
// them as nodes come and go.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nwa,categories=nodewright
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.status.role`
// +kubebuilder:printcolumn:name="Stale",type=boolean,JSONPath=`.status.heartbeat.stale`,description="Heartbeat older than the threshold"
// +kubebuilder:printcolumn:name="Bond",type=string,JSONPath=`.status.network.bondMode`
// +kubebuilder:printcolumn:name="DRBD Up-to-date",type=integer,JSONPath=`.status.storage.upToDate`
// +kubebuilder:printcolumn:name="DRBD Resources",type=integer,JSONPath=`.status.storage.resources`
// +kubebuilder:printcolumn:name="Out-of-sync KiB",type=integer,JSONPath=`.status.storage.outOfSyncKiB`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodewrightAgentStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// status is the node's state as observed.
	// +optional
	Status NodewrightAgentStatusStatus `json:"status,omitempty"`
}

// NodewrightAgentStatusList is a list of NodewrightAgentStatus.
//
// +kubebuilder:object:root=true
type NodewrightAgentStatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodewrightAgentStatus `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodewrightAgentStatus{}, &NodewrightAgentStatusList{})
}
