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

// Reporter is who reports a node's storage, network and host OS in its NodewrightAgentStatus.
// +kubebuilder:validation:Enum=Agent;Legacy
type Reporter string

// The reporters.
const (
	// ReporterAgent: Nodewright's agent on the node reads them from the host itself.
	ReporterAgent Reporter = "Agent"
	// ReporterLegacy: the legacy DaemonSet's ConfigMap says them, read by the operator.
	ReporterLegacy Reporter = "Legacy"
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

	// resourceStatuses are the resources one by one, as `drbdsetup status` shows them on the
	// node, in the order of their names: at most 256, the counts above covering them all. Only
	// the agent reports them; the legacy DaemonSet reports the counts alone.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	ResourceStatuses []DRBDResourceStatus `json:"resourceStatuses,omitempty"`
}

// The bounds of the lists in DRBDStatus: what the agent reports beyond them is left out.
const (
	MaxDRBDResourceStatuses = 256
	MaxDRBDVolumes          = 16
	// MaxDRBDPeers is DRBD's own bound: 32 nodes in a resource.
	MaxDRBDPeers = 31
)

// DRBDResourceStatus is one DRBD resource as the node sees it.
type DRBDResourceStatus struct {
	// name of the resource (LINSTOR names them after the volume, pvc-...).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`

	// role of this node in the resource: Primary, Secondary or Unknown.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Role string `json:"role,omitempty"`

	// suspended is true while I/O on the resource is suspended.
	// +optional
	Suspended bool `json:"suspended,omitempty"`

	// volumes are the resource's volumes on this node, with the state of the local disk.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Volumes []DRBDVolumeStatus `json:"volumes,omitempty"`

	// peers are this node's connections to the resource's other nodes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=31
	Peers []DRBDPeerStatus `json:"peers,omitempty"`
}

// DRBDVolumeStatus is one volume of a resource on this node.
type DRBDVolumeStatus struct {
	// volume is the volume's number in the resource.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Volume int32 `json:"volume"`

	// diskState is the local disk's state: UpToDate, Inconsistent, Outdated, Diskless...
	// +required
	// +kubebuilder:validation:MaxLength=32
	DiskState string `json:"diskState"`

	// client is true when the volume is diskless on purpose (a DRBD client, or a tiebreaker
	// LINSTOR adds for quorum).
	// +optional
	Client bool `json:"client,omitempty"`

	// noQuorum is true while DRBD says the device has lost quorum (quorum:no): it refuses or
	// suspends I/O, as the resource's on-no-quorum says. Absent while it has quorum, or when
	// quorum is not configured.
	// +optional
	NoQuorum bool `json:"noQuorum,omitempty"`
}

// DRBDPeerStatus is this node's connection to one peer of a resource.
type DRBDPeerStatus struct {
	// name is the connection's name: the peer's host name in the resource file.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// connectionState is Connected, Connecting, StandAlone, Disconnecting...
	// +required
	// +kubebuilder:validation:MaxLength=32
	ConnectionState string `json:"connectionState"`

	// role is the peer's role: Primary, Secondary, or Unknown while not connected.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Role string `json:"role,omitempty"`

	// volumes are the resource's volumes as seen over this connection.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Volumes []DRBDPeerVolumeStatus `json:"volumes,omitempty"`
}

// DRBDPeerVolumeStatus is one volume as seen over one connection.
type DRBDPeerVolumeStatus struct {
	// volume is the volume's number in the resource.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	Volume int32 `json:"volume"`

	// replicationState is Established when in sync, SyncSource or SyncTarget during a
	// resynchronisation, PausedSyncS or PausedSyncT while it is paused, VerifyS or VerifyT
	// during an online verify, Off while not connected.
	// +required
	// +kubebuilder:validation:MaxLength=32
	ReplicationState string `json:"replicationState"`

	// peerDiskState is the peer's disk as this node knows it (DUnknown while not connected).
	// +required
	// +kubebuilder:validation:MaxLength=32
	PeerDiskState string `json:"peerDiskState"`

	// peerClient is true when the peer is diskless on purpose.
	// +optional
	PeerClient bool `json:"peerClient,omitempty"`

	// outOfSyncKiB is how much of the volume this node knows to differ from the peer.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OutOfSyncKiB int64 `json:"outOfSyncKiB,omitempty"`

	// resyncDonePercent is the progress of a running resynchronisation or online verify, in
	// whole percent (rounded down); absent when none runs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ResyncDonePercent *int32 `json:"resyncDonePercent,omitempty"`
}

// NodeNetworkStatus is a node's observed network configuration.
type NodeNetworkStatus struct {
	// bondMode is the mode of the node's storage bond.
	// +optional
	BondMode BondMode `json:"bondMode,omitempty"`

	// bond is the storage bond as the agent observed it on the host: its interface, mode and
	// member links. The legacy DaemonSet reports bondMode alone.
	// +optional
	Bond *BondObservation `json:"bond,omitempty"`
}

// KairosBootEntry is the boot entry a Kairos node runs from.
// +kubebuilder:validation:Enum=Active;Passive;Recovery;AutoReset;LiveCD
type KairosBootEntry string

// The Kairos boot entries.
const (
	// KairosBootActive: the active image, the one upgrades install and boot by default.
	KairosBootActive KairosBootEntry = "Active"
	// KairosBootPassive: the previous image, the fallback after a failed upgrade.
	KairosBootPassive KairosBootEntry = "Passive"
	// KairosBootRecovery: the recovery system.
	KairosBootRecovery KairosBootEntry = "Recovery"
	// KairosBootAutoReset: the boot that resets the node to its factory state.
	KairosBootAutoReset KairosBootEntry = "AutoReset"
	// KairosBootLiveCD: the installation medium, not an installed system.
	KairosBootLiveCD KairosBootEntry = "LiveCD"
)

// The bounds of the host OS's strings: longer values are cut.
const (
	MaxOSNameLength       = 128
	MaxOSPrettyNameLength = 256
)

// HostOSStatus is the node's operating system as the agent read it on the host.
type HostOSStatus struct {
	// kind is the operating system as an EdgeProfile names it (spec.os).
	// +optional
	Kind HostOSKind `json:"kind,omitempty"`

	// name is the OS's name (NAME in /etc/os-release), e.g. "Ubuntu".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name,omitempty"`

	// version is the OS's version (VERSION_ID in /etc/os-release), e.g. "24.04".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version,omitempty"`

	// prettyName is the OS's name and version for people (PRETTY_NAME in /etc/os-release).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	PrettyName string `json:"prettyName,omitempty"`

	// bootID is the kernel's boot ID (/proc/sys/kernel/random/boot_id): it changes at every
	// boot.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`

	// kairos is what a Kairos node says of its image and boot; absent on other OSes.
	// +optional
	Kairos *KairosStatus `json:"kairos,omitempty"`

	// systemdUnits are the states of the systemd units the BootRecoveryPolicy names
	// (spec.postBootHealth.systemdUnits), as the host's `systemctl show` says them, in the
	// policy's order; absent when it names none, or when the agent could not read them (its
	// HostObserved condition says why).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	SystemdUnits []SystemdUnitStatus `json:"systemdUnits,omitempty"`
}

// SystemdUnitStatus is one systemd unit's state, as `systemctl show` says it.
type SystemdUnitStatus struct {
	// name is the unit as the policy names it (systemctl's Id is the unit it resolves to,
	// which differs for an alias).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Name string `json:"name"`
	// loadState is LoadState: loaded, not-found, masked, error...
	// +optional
	// +kubebuilder:validation:MaxLength=32
	LoadState string `json:"loadState,omitempty"`
	// activeState is ActiveState: active, reloading, inactive, failed, activating,
	// deactivating, maintenance, refreshing.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	ActiveState string `json:"activeState,omitempty"`
	// subState is SubState, the unit type's own state: running, exited, dead, mounted...
	// +optional
	// +kubebuilder:validation:MaxLength=32
	SubState string `json:"subState,omitempty"`
}

// KairosBootAssessment is Kairos's GRUB boot assessment, as its environment block
// (boot_assessment on the COS_STATE partition) holds it. Its fields are always sent, false
// too: with every flag cleared an omitempty struct is {}, which server-side apply (the agent's
// report) stores as null, and the API server then refuses the whole status (bootAssessment
// must be an object).
type KairosBootAssessment struct {
	// enabled: enable_boot_assessment=yes, set by an upgrade: the next boot is assessed.
	// +optional
	Enabled bool `json:"enabled"`
	// always: enable_boot_assessment_always=yes: every boot is assessed.
	// +optional
	Always bool `json:"always"`
	// tentative: boot_assessment_tentative=yes, set by GRUB when it starts an assessed boot
	// and cleared once the boot counts as good; left set, the next boot falls back.
	// +optional
	Tentative bool `json:"tentative"`
}

// WouldFallBack reports whether a node with these flags falls back at its next boot, as
// Kairos's GRUB configuration decides it: boot_assessment_tentative=yes (the last assessed boot
// never counted as good) with enable_boot_assessment or enable_boot_assessment_always yes
// (kairos#4303). False for nil.
func (a *KairosBootAssessment) WouldFallBack() bool {
	return a != nil && a.Tentative && (a.Enabled || a.Always)
}

// KairosBootCounting is the boot counter of a UKI (systemd-boot) Kairos node's boot entry, as
// systemd's Automatic Boot Assessment keeps it in the entry file's name, NAME+LEFT-DONE.conf,
// and the EFI variable LoaderBootCountPath names the file booted. Its fields are always sent,
// zero too (see KairosBootAssessment).
type KairosBootCounting struct {
	// triesLeft is how many more times systemd-boot tries the entry before it counts as bad.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TriesLeft int32 `json:"triesLeft"`
	// triesDone is how many times it was tried, this boot included, without counting as good.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TriesDone int32 `json:"triesDone"`
}

// KairosFallback is a boot that fell back from a staged image to the previous one.
type KairosFallback struct {
	// fromImage is the image the agent staged (REPOSITORY:TAG@sha256:DIGEST), which did not
	// boot.
	// +required
	// +kubebuilder:validation:MaxLength=512
	FromImage string `json:"fromImage"`
	// toImage is the image the node booted instead (KAIROS_IMAGE_REPO).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ToImage string `json:"toImage,omitempty"`
	// bootID is the boot that fell back.
	// +required
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`
	// seenAt is when the agent first saw it.
	// +required
	SeenAt metav1.Time `json:"seenAt"`
}

// KairosStatus is a Kairos node's image (/etc/kairos-release) and the boot entry it runs from.
type KairosStatus struct {
	// bootEntry is the boot entry in use; absent when the node does not say.
	// +optional
	BootEntry KairosBootEntry `json:"bootEntry,omitempty"`

	// image is the image the node booted as /etc/kairos-release names it (KAIROS_IMAGE_REPO):
	// REPOSITORY:TAG.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// upgradeFailure: this boot is the fallback after a failed boot of an upgrade (the
	// sentinel /run/cos/upgrade_failure, or upgrade_failure on the kernel's command line).
	// +optional
	UpgradeFailure bool `json:"upgradeFailure,omitempty"`

	// bootAssessment is GRUB's boot-assessment state; absent when the node has no
	// boot-assessment environment block.
	// +optional
	BootAssessment *KairosBootAssessment `json:"bootAssessment,omitempty"`

	// lastFallback is the last boot that fell back from an image this agent staged.
	// +optional
	LastFallback *KairosFallback `json:"lastFallback,omitempty"`

	// bootCounting is the boot counter of the systemd-boot entry booted on a UKI node
	// (LoaderBootCountPath); absent when the boot has no counter (a GRUB node, or an entry
	// already counted as good).
	// +optional
	BootCounting *KairosBootCounting `json:"bootCounting,omitempty"`

	// version is the Kairos version (KAIROS_VERSION), e.g. "v3.4.2".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version,omitempty"`

	// flavor is the distribution the image is built on (KAIROS_FLAVOR), e.g. "ubuntu".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Flavor string `json:"flavor,omitempty"`

	// flavorRelease is that distribution's release (KAIROS_FLAVOR_RELEASE), e.g. "24.04".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	FlavorRelease string `json:"flavorRelease,omitempty"`

	// variant is core or standard (KAIROS_VARIANT); standard images carry Kubernetes.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Variant string `json:"variant,omitempty"`

	// model is the hardware the image is for (KAIROS_MODEL), e.g. "generic".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`

	// softwareVersion is the Kubernetes distribution's version in a standard image
	// (KAIROS_SOFTWARE_VERSION), e.g. "v1.32.4+k3s1".
	// +optional
	// +kubebuilder:validation:MaxLength=128
	SoftwareVersion string `json:"softwareVersion,omitempty"`
}

// AnnotationReportRequest is set on a NodewrightAgentStatus to ask the node's agent for a report
// read from the host after it saw the request: the agent reads its host at once and writes the
// value back in status.reportRequest with what it read, changed or not. The operator sets it to
// a value of its own (a workflow's operation's UID) when it must see a node after a change it
// made elsewhere, such as a peer's DRBD connections after a bond change (docs/agent.md).
const AnnotationReportRequest = "nodewright.spectrocloud.com/report-request"

// MaxReportRequest is the longest report request an agent answers.
const MaxReportRequest = 128

// NodewrightAgentStatusStatus is one node's state as observed. Two writers share it, each field
// with one owner (server-side apply field managers, docs/agent.md): the operator's bridge
// (nodewright-bridge) owns role, heartbeat and the HeartbeatFresh condition; whoever reporter
// names owns reporter, storage, network, os, reportRequest and the StorageHealthy and
// HostObserved conditions.
type NodewrightAgentStatusStatus struct {
	// reporter says who reports the node's storage, network and OS: Agent (Nodewright's agent
	// on the node, from the host) or Legacy (the legacy DaemonSet's ConfigMap).
	// +optional
	Reporter Reporter `json:"reporter,omitempty"`

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

	// os is the node's operating system; only the agent reports it.
	// +optional
	OS *HostOSStatus `json:"os,omitempty"`

	// reportRequest is the last report request (the annotation
	// nodewright.spectrocloud.com/report-request) the agent answered: what this status says was
	// read from the host after the agent saw that request.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ReportRequest string `json:"reportRequest,omitempty"`

	// conditions: HeartbeatFresh, StorageHealthy and, from the agent, HostObserved.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodewrightAgentStatus is one node's observed state: role, heartbeat, who reports it, DRBD
// health, the storage bond and the host OS. There is one per node, named after the node: the
// operator creates one for each node the legacy DaemonSet manages (and deletes it when the node
// leaves, unless the node's agent reports it), and an agent creates its own node's.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nwa,categories=nodewright
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.status.role`
// +kubebuilder:printcolumn:name="Reporter",type=string,JSONPath=`.status.reporter`,description="Who reports the node: its Agent, or the Legacy DaemonSet"
// +kubebuilder:printcolumn:name="Stale",type=boolean,JSONPath=`.status.heartbeat.stale`,description="Heartbeat older than the threshold"
// +kubebuilder:printcolumn:name="Bond",type=string,JSONPath=`.status.network.bondMode`
// +kubebuilder:printcolumn:name="DRBD Up-to-date",type=integer,JSONPath=`.status.storage.upToDate`
// +kubebuilder:printcolumn:name="DRBD Resources",type=integer,JSONPath=`.status.storage.resources`
// +kubebuilder:printcolumn:name="Out-of-sync KiB",type=integer,JSONPath=`.status.storage.outOfSyncKiB`,priority=1
// +kubebuilder:printcolumn:name="OS",type=string,JSONPath=`.status.os.prettyName`,priority=1
// +kubebuilder:printcolumn:name="Boot",type=string,JSONPath=`.status.os.kairos.bootEntry`,priority=1,description="The Kairos boot entry in use"
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
