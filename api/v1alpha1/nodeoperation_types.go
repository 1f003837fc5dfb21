package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeOperationType names the one typed operation a NodeOperation asks for.
// +kubebuilder:validation:Enum=SetBondMode;CommitCheckpoint;DRBDPauseSync;DRBDResumeSync;DRBDAdjust;DRBDVerify;OSUpgradeStage;Reboot;OSUpgradeRecovery;BootAssessmentReset;SelectBootEntry;RecoveryRestage
type NodeOperationType string

// The operations an agent performs. There is no other: no command, no path, no script.
const (
	// OperationSetBondMode changes the mode of the node's bond under a local checkpoint: the
	// agent records the previous configuration, changes the runtime and the persistent
	// configuration, probes, and restores the previous configuration by itself unless the
	// change is committed within the checkpoint's timeout.
	OperationSetBondMode NodeOperationType = "SetBondMode"
	// OperationCommitCheckpoint keeps a checked bond change: its checkpoint is dropped.
	OperationCommitCheckpoint NodeOperationType = "CommitCheckpoint"
	// OperationDRBDPauseSync pauses the resynchronisation of a DRBD resource towards a peer.
	OperationDRBDPauseSync NodeOperationType = "DRBDPauseSync"
	// OperationDRBDResumeSync resumes it.
	OperationDRBDResumeSync NodeOperationType = "DRBDResumeSync"
	// OperationDRBDAdjust makes a DRBD resource's kernel state match its configuration files
	// (which the agent never edits: LINSTOR writes them).
	OperationDRBDAdjust NodeOperationType = "DRBDAdjust"
	// OperationDRBDVerify runs DRBD's online verification of a resource and reports what is
	// out of sync.
	OperationDRBDVerify NodeOperationType = "DRBDVerify"
	// OperationOSUpgradeStage writes a Kairos image to the node's active slot, the running
	// one kept as the passive fallback: the agent clears stale boot-assessment flags first,
	// records the boot it runs, then runs kairos-agent upgrade with the image by digest. The
	// node runs the image only after a Reboot.
	OperationOSUpgradeStage NodeOperationType = "OSUpgradeStage"
	// OperationReboot reboots the node. The agent records its boot ID first and reports the
	// operation Succeeded from the next boot, once the boot ID changed.
	OperationReboot NodeOperationType = "Reboot"
	// OperationOSUpgradeRecovery writes a Kairos image to the node's recovery system
	// (kairos-agent upgrade --recovery).
	OperationOSUpgradeRecovery NodeOperationType = "OSUpgradeRecovery"
	// OperationBootAssessmentReset clears a Kairos node's stale boot-assessment flags
	// (boot_assessment_tentative and enable_boot_assessment, never enable_boot_assessment_always,
	// a person's setting) under a checkpoint: the agent records the block's variables first,
	// reads the block back after the edit, and writes the previous values back when the edit
	// failed or did not hold (RolledBack).
	OperationBootAssessmentReset NodeOperationType = "BootAssessmentReset"
	// OperationSelectBootEntry makes a Kairos node's next boot, and that one only, boot the
	// entry named (next_entry in the OEM partition's grubenv, which GRUB clears as it boots
	// it); the boot after is the default again.
	OperationSelectBootEntry NodeOperationType = "SelectBootEntry"
	// OperationRecoveryRestage stages again the image a Kairos node booted after it fell back
	// (the last good image), as an OSUpgradeStage does: the agent refuses unless the node
	// fell back and the image is the one it runs.
	OperationRecoveryRestage NodeOperationType = "RecoveryRestage"
)

// OSImageOperation names a Kairos image, pinned by digest.
type OSImageOperation struct {
	// image is the OCI image, REPOSITORY:TAG@sha256:DIGEST; the agent pulls it by digest.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*:[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}@sha256:[a-f0-9]{64}$')",message="must be REPOSITORY:TAG@sha256:<64 hex digits>"
	Image string `json:"image"`
}

// RebootOperation reboots the node.
type RebootOperation struct {
	// reason says why, in the agent's log and the node's journal.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// BootAssessmentResetOperation clears a Kairos node's stale boot-assessment flags. It has no
// parameter: the flags it clears are fixed (boot_assessment_tentative, enable_boot_assessment).
type BootAssessmentResetOperation struct{}

// SelectBootEntryOperation names the entry a Kairos node boots once, at its next boot.
type SelectBootEntryOperation struct {
	// entry is the boot entry of the next boot: Active, Passive (the fallback) or Recovery.
	// +required
	// +kubebuilder:validation:XValidation:rule="self in ['Active', 'Passive', 'Recovery']",message="must be Active, Passive or Recovery"
	Entry KairosBootEntry `json:"entry"`
}

// SetBondModeOperation is a bond mode change under a checkpoint.
type SetBondModeOperation struct {
	// bond is the bond interface to change.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`
	Bond string `json:"bond"`

	// mode is the bond mode to set.
	// +required
	Mode BondMode `json:"mode"`

	// checkpointTimeout is how long the change may wait for its commit before the agent
	// restores the previous configuration by itself. Between 10s and 10m.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('10m'))",message="must be between 10s and 10m"
	CheckpointTimeout metav1.Duration `json:"checkpointTimeout,omitzero"`

	// probes are what must answer after the change for it to count as working.
	// +optional
	Probes BondProbes `json:"probes,omitzero"`
}

// BondProbes are the checks an agent runs after a bond change, and again after restoring
// the previous configuration.
type BondProbes struct {
	// peers are the storage addresses of the other nodes; each must answer. At most 16 (8
	// before a flip could change 16 nodes: each of a node's 15 peers is probed).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="must be an IPv4 or IPv6 address"
	Peers []string `json:"peers,omitempty"`

	// apiServer: the API server must answer.
	// +optional
	// +kubebuilder:default=true
	APIServer *bool `json:"apiServer,omitempty"`

	// drbdConnections: every DRBD connection of the node must be Connected again.
	// +optional
	// +kubebuilder:default=true
	DRBDConnections *bool `json:"drbdConnections,omitempty"`
}

// CommitCheckpointOperation keeps the checked change of a bond.
type CommitCheckpointOperation struct {
	// bond is the bond whose pending checkpoint is committed.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`
	Bond string `json:"bond"`

	// operation, when set, names the SetBondMode operation whose change is committed: a
	// commit meant for one change never keeps another the operator has not checked.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Operation string `json:"operation,omitempty"`
}

// DRBDResourceOperation names a DRBD resource.
type DRBDResourceOperation struct {
	// resource is the DRBD resource's name, as LINSTOR names it (pvc-...).
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,47}$`
	// +kubebuilder:validation:XValidation:rule="self != 'all' && !self.startsWith('minor-')",message="must name one resource: drbdadm reads 'all' as every resource and 'minor-N' as a device"
	Resource string `json:"resource"`
}

// DRBDPeerOperation names a DRBD resource and one of its peers.
type DRBDPeerOperation struct {
	// resource is the DRBD resource's name.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,47}$`
	// +kubebuilder:validation:XValidation:rule="self != 'all' && !self.startsWith('minor-')",message="must name one resource: drbdadm reads 'all' as every resource and 'minor-N' as a device"
	Resource string `json:"resource"`

	// peer is the node (the DRBD connection's peer host name) towards which the
	// resynchronisation is paused or resumed.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Peer string `json:"peer"`
}

// NodeOperationSpec is one typed operation for one node's agent: the type, and the one member
// of the union that type names. It cannot change once created.
//
// +kubebuilder:validation:XValidation:rule="has(self.setBondMode) == (self.type == 'SetBondMode')",message="setBondMode is set exactly when type is SetBondMode",fieldPath=".setBondMode"
// +kubebuilder:validation:XValidation:rule="has(self.commitCheckpoint) == (self.type == 'CommitCheckpoint')",message="commitCheckpoint is set exactly when type is CommitCheckpoint",fieldPath=".commitCheckpoint"
// +kubebuilder:validation:XValidation:rule="has(self.drbdPauseSync) == (self.type == 'DRBDPauseSync')",message="drbdPauseSync is set exactly when type is DRBDPauseSync",fieldPath=".drbdPauseSync"
// +kubebuilder:validation:XValidation:rule="has(self.drbdResumeSync) == (self.type == 'DRBDResumeSync')",message="drbdResumeSync is set exactly when type is DRBDResumeSync",fieldPath=".drbdResumeSync"
// +kubebuilder:validation:XValidation:rule="has(self.drbdAdjust) == (self.type == 'DRBDAdjust')",message="drbdAdjust is set exactly when type is DRBDAdjust",fieldPath=".drbdAdjust"
// +kubebuilder:validation:XValidation:rule="has(self.drbdVerify) == (self.type == 'DRBDVerify')",message="drbdVerify is set exactly when type is DRBDVerify",fieldPath=".drbdVerify"
// +kubebuilder:validation:XValidation:rule="has(self.osUpgradeStage) == (self.type == 'OSUpgradeStage')",message="osUpgradeStage is set exactly when type is OSUpgradeStage",fieldPath=".osUpgradeStage"
// +kubebuilder:validation:XValidation:rule="has(self.reboot) == (self.type == 'Reboot')",message="reboot is set exactly when type is Reboot",fieldPath=".reboot"
// +kubebuilder:validation:XValidation:rule="has(self.osUpgradeRecovery) == (self.type == 'OSUpgradeRecovery')",message="osUpgradeRecovery is set exactly when type is OSUpgradeRecovery",fieldPath=".osUpgradeRecovery"
// +kubebuilder:validation:XValidation:rule="has(self.bootAssessmentReset) == (self.type == 'BootAssessmentReset')",message="bootAssessmentReset is set exactly when type is BootAssessmentReset",fieldPath=".bootAssessmentReset"
// +kubebuilder:validation:XValidation:rule="has(self.selectBootEntry) == (self.type == 'SelectBootEntry')",message="selectBootEntry is set exactly when type is SelectBootEntry",fieldPath=".selectBootEntry"
// +kubebuilder:validation:XValidation:rule="has(self.recoveryRestage) == (self.type == 'RecoveryRestage')",message="recoveryRestage is set exactly when type is RecoveryRestage",fieldPath=".recoveryRestage"
type NodeOperationSpec struct {
	// nodeName is the node whose agent performs the operation; an agent lists and watches
	// only its own node's operations (a field selector on spec.nodeName).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	NodeName string `json:"nodeName"`

	// type is the operation; the member of the same name holds its parameters.
	// +required
	Type NodeOperationType `json:"type"`

	// deadline is when the operation must have finished; an agent that has not started it
	// by then reports it Failed (DeadlineExceeded) without starting it.
	// +required
	Deadline metav1.Time `json:"deadline"`

	// setBondMode holds the parameters of a SetBondMode operation.
	// +optional
	SetBondMode *SetBondModeOperation `json:"setBondMode,omitempty"`
	// commitCheckpoint holds the parameters of a CommitCheckpoint operation.
	// +optional
	CommitCheckpoint *CommitCheckpointOperation `json:"commitCheckpoint,omitempty"`
	// drbdPauseSync holds the parameters of a DRBDPauseSync operation.
	// +optional
	DRBDPauseSync *DRBDPeerOperation `json:"drbdPauseSync,omitempty"`
	// drbdResumeSync holds the parameters of a DRBDResumeSync operation.
	// +optional
	DRBDResumeSync *DRBDPeerOperation `json:"drbdResumeSync,omitempty"`
	// drbdAdjust holds the parameters of a DRBDAdjust operation.
	// +optional
	DRBDAdjust *DRBDResourceOperation `json:"drbdAdjust,omitempty"`
	// drbdVerify holds the parameters of a DRBDVerify operation.
	// +optional
	DRBDVerify *DRBDResourceOperation `json:"drbdVerify,omitempty"`
	// osUpgradeStage holds the parameters of an OSUpgradeStage operation.
	// +optional
	OSUpgradeStage *OSImageOperation `json:"osUpgradeStage,omitempty"`
	// reboot holds the parameters of a Reboot operation.
	// +optional
	Reboot *RebootOperation `json:"reboot,omitempty"`
	// osUpgradeRecovery holds the parameters of an OSUpgradeRecovery operation.
	// +optional
	OSUpgradeRecovery *OSImageOperation `json:"osUpgradeRecovery,omitempty"`
	// bootAssessmentReset holds the parameters of a BootAssessmentReset operation: none.
	// +optional
	BootAssessmentReset *BootAssessmentResetOperation `json:"bootAssessmentReset,omitempty"`
	// selectBootEntry holds the parameters of a SelectBootEntry operation.
	// +optional
	SelectBootEntry *SelectBootEntryOperation `json:"selectBootEntry,omitempty"`
	// recoveryRestage holds the parameters of a RecoveryRestage operation: the image the node
	// booted after its fallback, pinned by digest.
	// +optional
	RecoveryRestage *OSImageOperation `json:"recoveryRestage,omitempty"`
}

// NodeOperationPhase is where an operation stands.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;RolledBack
type NodeOperationPhase string

// The operation phases.
const (
	// OperationPending: created; the agent has not started it.
	OperationPending NodeOperationPhase = "Pending"
	// OperationRunning: the agent is performing it.
	OperationRunning NodeOperationPhase = "Running"
	// OperationSucceeded: done and checked; the result says what was observed after.
	OperationSucceeded NodeOperationPhase = "Succeeded"
	// OperationFailed: not done, or done and not working, and not undone; the error says why.
	OperationFailed NodeOperationPhase = "Failed"
	// OperationRolledBack: done, found not working (or not committed in time), and undone by
	// the agent: the node is as it was before.
	OperationRolledBack NodeOperationPhase = "RolledBack"
)

// BondMember is one link of a bond as the agent observed it.
type BondMember struct {
	// +required
	// +kubebuilder:validation:MaxLength=15
	Name string `json:"name"`
	// up: the link is up (carrier).
	// +required
	Up bool `json:"up"`
}

// BondObservation is a bond as the agent observed it.
type BondObservation struct {
	// +required
	// +kubebuilder:validation:MaxLength=15
	Interface string `json:"interface"`
	// +optional
	Mode BondMode `json:"mode,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Members []BondMember `json:"members,omitempty"`
	// addresses are the bond's own IP addresses (global scope, without prefix length): where
	// its peers reach it on the storage network, and what a flip's probes of it aim at.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=45
	Addresses []string `json:"addresses,omitempty"`
}

// ProbeResult is one probe after a change.
type ProbeResult struct {
	// target is what was probed: an address, "api-server", or "drbd:<resource>:<peer>".
	// +required
	// +kubebuilder:validation:MaxLength=128
	Target string `json:"target"`
	// ok: it answered.
	// +required
	OK bool `json:"ok"`
	// message says what the probe saw.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message,omitempty"`
}

// NodeOperationResult is what the agent observed after the operation.
type NodeOperationResult struct {
	// bond is the bond after a SetBondMode or CommitCheckpoint (after the rollback, when it
	// was rolled back).
	// +optional
	Bond *BondObservation `json:"bond,omitempty"`
	// previousMode is the bond's mode before a SetBondMode: what a rollback restores.
	// +optional
	PreviousMode BondMode `json:"previousMode,omitempty"`
	// checkpointExpires is when an uncommitted bond change is rolled back by the agent.
	// +optional
	CheckpointExpires *metav1.Time `json:"checkpointExpires,omitempty"`
	// changedAt is when the agent made the bond change that waits for its commit, to the
	// microsecond: the operator confirms the change from its peers' reports read after it.
	// +optional
	ChangedAt *metav1.MicroTime `json:"changedAt,omitempty"`
	// probes are the probes after the change (after the rollback, when it was rolled back).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Probes []ProbeResult `json:"probes,omitempty"`
	// outOfSyncKiB is what a DRBDVerify found out of sync, in KiB.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OutOfSyncKiB *int64 `json:"outOfSyncKiB,omitempty"`
	// boot is the node's boot as the agent read it: before the change for an OSUpgradeStage,
	// a RecoveryRestage, a BootAssessmentReset or a SelectBootEntry (what it ran when it made
	// the change), after it for a Reboot (the new boot).
	// +optional
	Boot *BootObservation `json:"boot,omitempty"`
	// previousBootID is the boot ID a Reboot left.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PreviousBootID string `json:"previousBootID,omitempty"`
	// clearedAssessment lists the stale boot-assessment flags an OSUpgradeStage or a
	// RecoveryRestage cleared before staging (boot_assessment_tentative=yes left by an earlier
	// boot, say), or a BootAssessmentReset cleared, as NAME=VALUE (the value before).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=128
	ClearedAssessment []string `json:"clearedAssessment,omitempty"`
	// nextBootOnly is the entry a SelectBootEntry made the next boot boot: that boot only;
	// the boot after boots the default entry again.
	// +optional
	NextBootOnly KairosBootEntry `json:"nextBootOnly,omitempty"`
}

// BootObservation is a node's boot as its agent read it.
type BootObservation struct {
	// bootID is the kernel's boot ID (/proc/sys/kernel/random/boot_id).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`
	// image is the booted image as /etc/kairos-release names it (KAIROS_IMAGE_REPO).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// entry is the boot entry (slot) the node booted.
	// +optional
	Entry KairosBootEntry `json:"entry,omitempty"`
	// grubenv is the boot-assessment environment block's variables, as NAME=VALUE.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	GRUBEnv []string `json:"grubenv,omitempty"`
}

// OperationError says why an operation failed or was rolled back.
type OperationError struct {
	// reason is a CamelCase word a program can act on (DeadlineExceeded, ProbeFailed,
	// NotCommitted, BondNotFound, Unsupported, CommandFailed...).
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`
	// message says it for a person.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// NodeOperationStatus is what the agent reports of the operation. An operation that ended
// stays ended: its phase cannot change again, so no one can make the agent run it twice.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.phase) || !(oldSelf.phase in ['Succeeded', 'Failed', 'RolledBack']) || (has(self.phase) && self.phase == oldSelf.phase)",message="an operation that ended (Succeeded, Failed, RolledBack) cannot change phase again",fieldPath=".phase"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.phase) || oldSelf.phase == 'Pending' || (has(self.phase) && self.phase != 'Pending')",message="an operation that started cannot go back to Pending",fieldPath=".phase"
type NodeOperationStatus struct {
	// +optional
	Phase NodeOperationPhase `json:"phase,omitempty"`
	// startTime is when the agent started it.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when it reached Succeeded, Failed or RolledBack.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// result is what the agent observed after.
	// +optional
	Result *NodeOperationResult `json:"result,omitempty"`
	// error says why it failed or was rolled back.
	// +optional
	Error *OperationError `json:"error,omitempty"`
	// observedGeneration is the metadata.generation the agent acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// NodeOperation is one typed host operation the operator delegates to one node's agent, which
// performs it only on its own node and reports the outcome in the status. It lives in the
// agent's namespace, is owned by the workflow that asked for it, and cannot change once
// created. There is no free-form command anywhere.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=nwop,categories=nodewright
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.error.reason`,description="Why it failed or was rolled back"
// +kubebuilder:printcolumn:name="Deadline",type=date,JSONPath=`.spec.deadline`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec cannot change: create a new NodeOperation",fieldPath=".spec"
type NodeOperation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec NodeOperationSpec `json:"spec"`
	// +optional
	Status NodeOperationStatus `json:"status,omitempty"`
}

// NodeOperationList is a list of NodeOperation.
//
// +kubebuilder:object:root=true
type NodeOperationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeOperation `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodeOperation{}, &NodeOperationList{})
}

// Ended reports whether the operation has ended, and whether it Succeeded: Failed and
// RolledBack end it too.
func (o *NodeOperation) Ended() (ended, succeeded bool) {
	switch o.Status.Phase {
	case OperationSucceeded:
		return true, true
	case OperationFailed, OperationRolledBack:
		return true, false
	}
	return false, false
}

// Outcome says how the operation ended, for a message: its phase, and its error's reason and
// message when it has one ("Failed, NotAllowedByProfile: ...").
func (o *NodeOperation) Outcome() string {
	msg := string(o.Status.Phase)
	if e := o.Status.Error; e != nil {
		msg += ", " + e.Reason + ": " + e.Message
	}
	return msg
}

// PhaseText is the operation's phase for a message, "not taken yet" before an agent took it.
func (o *NodeOperation) PhaseText() string {
	if o.Status.Phase == "" {
		return "not taken yet"
	}
	return string(o.Status.Phase)
}
