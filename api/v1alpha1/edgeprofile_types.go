package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Topology is the shape of the site.
// +kubebuilder:validation:Enum=SingleNode;TwoNodeTiebreaker;ThreeNode
type Topology string

// The topologies.
const (
	// TopologySingleNode: one node, no replication.
	TopologySingleNode Topology = "SingleNode"
	// TopologyTwoNodeTiebreaker: two data nodes and a diskless tiebreaker for quorum.
	TopologyTwoNodeTiebreaker Topology = "TwoNodeTiebreaker"
	// TopologyThreeNode: three data nodes.
	TopologyThreeNode Topology = "ThreeNode"
)

// StorageBackendKind is a storage system Nodewright knows the capabilities of.
// +kubebuilder:validation:Enum=LINSTOR;TopoLVM;Longhorn;CephRBD;GenericCSI
type StorageBackendKind string

// The storage backends.
const (
	StorageLINSTOR    StorageBackendKind = "LINSTOR"
	StorageTopoLVM    StorageBackendKind = "TopoLVM"
	StorageLonghorn   StorageBackendKind = "Longhorn"
	StorageCephRBD    StorageBackendKind = "CephRBD"
	StorageGenericCSI StorageBackendKind = "GenericCSI"
)

// HostOSKind is an operating system Nodewright knows the host operations of.
// +kubebuilder:validation:Enum=Kairos;SystemdNetworkd;Talos
type HostOSKind string

// The host operating systems.
const (
	// HostOSKairos: an immutable Kairos image; persistent config under /oem.
	HostOSKairos HostOSKind = "Kairos"
	// HostOSSystemdNetworkd: a general Linux (e.g. Ubuntu) configured with systemd-networkd.
	HostOSSystemdNetworkd HostOSKind = "SystemdNetworkd"
	// HostOSTalos: an API-only OS; no shell host operations.
	HostOSTalos HostOSKind = "Talos"
)

// ProfileStorage says which storage system the site runs.
type ProfileStorage struct {
	// backend is the storage system.
	// +required
	Backend StorageBackendKind `json:"backend"`

	// storageClassName is the site's default StorageClass for VM volumes.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName string `json:"storageClassName,omitempty"`

	// notReadyTaints are the keys of the taints that keep workloads off a node whose storage
	// is not ready yet: a ReplicationUpgrade removes them from the nodes that joined once
	// their replicas are synchronised and verified (and puts them back on a rollback).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=316
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	NotReadyTaints []string `json:"notReadyTaints,omitempty"`

	// linstor is how Nodewright reaches the site's LINSTOR controller, when backend is
	// LINSTOR; the operator's own settings (the chart's linstor values) apply where it is
	// silent.
	// +optional
	LINSTOR *ProfileLINSTOR `json:"linstor,omitempty"`
}

// LINSTORSatellites says who registers the LINSTOR satellites of nodes that join.
// +kubebuilder:validation:Enum=Piraeus;Nodewright
type LINSTORSatellites string

// The satellite registrars.
const (
	// SatellitesPiraeus: the Piraeus operator registers a satellite for every node (from its
	// LinstorSatellite); Nodewright waits for them.
	SatellitesPiraeus LINSTORSatellites = "Piraeus"
	// SatellitesNodewright: LINSTOR runs without Piraeus; Nodewright registers the joining
	// nodes' satellites itself, at the nodes' InternalIP.
	SatellitesNodewright LINSTORSatellites = "Nodewright"
)

// OnNoQuorum is what DRBD does with I/O on a resource that lost quorum.
// +kubebuilder:validation:Enum=suspend-io;io-error
type OnNoQuorum string

// The policies.
const (
	OnNoQuorumSuspendIO OnNoQuorum = "suspend-io"
	OnNoQuorumIOError   OnNoQuorum = "io-error"
)

// ProfileLINSTOR is the site's LINSTOR controller and its policies.
type ProfileLINSTOR struct {
	// url is the LINSTOR controller's base URL the site means: Piraeus' is
	// https://linstor-controller.piraeus-datastore.svc:3371 with API TLS,
	// http://linstor-controller.piraeus-datastore.svc:3370 without. Nothing connects to it:
	// the LINSTOR gate forwards to the chart's linstor.url, and a ReplicationUpgrade's
	// Preflight fails when this names another.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^https?://[^/?#@ ]+:[0-9]+/?$`
	URL string `json:"url,omitempty"`

	// clientSecretRef names the kubernetes.io/tls Secret with the client certificate LINSTOR
	// authenticates Nodewright by (tls.crt, tls.key, and the controller's CA in ca.crt), as
	// Piraeus' linstor-client-tls is. Only the LINSTOR gate reads it, the one the chart's
	// linstor.clientSecret names; a ReplicationUpgrade's Preflight fails when this names
	// another.
	// +optional
	ClientSecretRef *NamespacedObjectReference `json:"clientSecretRef,omitempty"`

	// satellites says who registers the joining nodes' satellites.
	// +optional
	// +kubebuilder:default=Piraeus
	Satellites LINSTORSatellites `json:"satellites,omitempty"`

	// onNoQuorum is DRBD's policy for a resource that lost quorum, set when quorum is.
	// +optional
	// +kubebuilder:default=suspend-io
	OnNoQuorum OnNoQuorum `json:"onNoQuorum,omitempty"`

	// storagePool is the storage pool new replicas are placed in on the joining nodes; by
	// default the pool of the same name as the original replica's.
	// +optional
	// +kubebuilder:validation:MaxLength=48
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_-]*$`
	StoragePool string `json:"storagePool,omitempty"`
}

// ProfileNetwork names the site's storage network.
type ProfileNetwork struct {
	// bondInterface is the bond that carries storage traffic.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`
	BondInterface string `json:"bondInterface"`

	// bondMode is the bond's intended mode.
	// +required
	BondMode BondMode `json:"bondMode"`

	// allowedBondModes are the other bond modes the switch ports of the site are set up to
	// carry: a BondModeFlipPlan may move the bond only to bondMode or one of these. The switch
	// must match the nodes' mode, so list a mode only once the switch accepts it on every
	// storage port (802.3ad needs LACP there; balance-rr and balance-xor a static link
	// aggregation).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=7
	AllowedBondModes []BondMode `json:"allowedBondModes,omitempty"`

	// memberInterfaces are the bond's ports.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`
	MemberInterfaces []string `json:"memberInterfaces,omitempty"`

	// storageVLAN is the VLAN id of the storage network, if tagged.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4094
	StorageVLAN *int32 `json:"storageVLAN,omitempty"`
}

// ProfileThresholds are the site's tunable limits.
type ProfileThresholds struct {
	// heartbeatStaleAfter is how old a node heartbeat may be before the node is stale.
	// Between 1s and 1h.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))",message="must be between 1s and 1h"
	HeartbeatStaleAfter metav1.Duration `json:"heartbeatStaleAfter,omitzero"`

	// drbdSyncTimeout is how long a DRBD resynchronisation may take before it is reported
	// as stuck. Between 1m and 48h.
	// +optional
	// +kubebuilder:default="6h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('48h'))",message="must be between 1m and 48h"
	DRBDSyncTimeout metav1.Duration `json:"drbdSyncTimeout,omitzero"`
}

// EdgeProfileSpec is the site definition. Its canonical encoding is what the signature covers.
type EdgeProfileSpec struct {
	// version of the profile, as semantic version (e.g. 1.4.0). Any change to the spec must
	// come with a new version.
	// +required
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`
	Version string `json:"version"`

	// topology is the shape of the site.
	// +required
	Topology Topology `json:"topology"`

	// storage is the site's storage system.
	// +required
	Storage ProfileStorage `json:"storage"`

	// os is the nodes' operating system.
	// +required
	OS HostOSKind `json:"os"`

	// network names the storage network.
	// +required
	Network ProfileNetwork `json:"network"`

	// osImages are the OS images (Kairos) the nodes' agents may stage: a repository
	// (quay.io/kairos/ubuntu: any image in it), or one image pinned by digest
	// (REPOSITORY:TAG@sha256:DIGEST). An agent refuses to stage, or to write to the recovery
	// system, an image the profile in force does not list, whoever asks: so that a compromised
	// operator cannot have a node boot an image of its choosing. Empty: none may be staged.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*(:[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}@sha256:[a-f0-9]{64})?$`
	OSImages []string `json:"osImages,omitempty"`

	// legacy names the legacy DaemonSet's objects at this site.
	// +optional
	Legacy *LegacySource `json:"legacy,omitempty"`

	// thresholds are the site's tunable limits.
	// +optional
	// +kubebuilder:default={}
	Thresholds ProfileThresholds `json:"thresholds,omitzero"`
}

// EdgeProfileStatus says whether the profile's signature was verified.
type EdgeProfileStatus struct {
	// observedGeneration is the metadata.generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: SignatureVerified.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EdgeProfile defines a site: its topology, storage backend, operating system, network and
// legacy object names, and thresholds. It is a versioned artifact signed with a detached
// signature over the canonical encoding of its spec (compatible with cosign sign-blob), so
// adding a site means adding a profile, not changing code.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=edgep;nwprofile,categories=nodewright
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Topology",type=string,JSONPath=`.spec.topology`
// +kubebuilder:printcolumn:name="Storage",type=string,JSONPath=`.spec.storage.backend`
// +kubebuilder:printcolumn:name="OS",type=string,JSONPath=`.spec.os`
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=`.status.conditions[?(@.type=="SignatureVerified")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec || self.spec.version != oldSelf.spec.version",message="a changed profile needs a new spec.version",fieldPath=".spec.version"
type EdgeProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the site definition.
	// +required
	Spec EdgeProfileSpec `json:"spec"`

	// signature is the detached signature over the canonical encoding of spec, base64
	// encoded as cosign sign-blob prints it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Signature []byte `json:"signature,omitempty"`

	// status says whether the signature was verified.
	// +optional
	Status EdgeProfileStatus `json:"status,omitempty"`
}

// EdgeProfileList is a list of EdgeProfile.
//
// +kubebuilder:object:root=true
type EdgeProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeProfile `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EdgeProfile{}, &EdgeProfileList{})
}
