package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RecoveryUpgrade says whether a node's recovery system is upgraded as well.
// +kubebuilder:validation:Enum=AfterSoak;Never
type RecoveryUpgrade string

// The recovery upgrade policies.
const (
	// RecoveryUpgradeAfterSoak upgrades each node's recovery system to the image once every
	// node has booted it and soaked: Kairos's docs say to upgrade the recovery partition only
	// after the new active system is checked.
	RecoveryUpgradeAfterSoak RecoveryUpgrade = "AfterSoak"
	// RecoveryUpgradeNever leaves the recovery systems as they are.
	RecoveryUpgradeNever RecoveryUpgrade = "Never"
)

// OSNodeHold is a node an OS version policy leaves alone, and why.
type OSNodeHold struct {
	// node is the node's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`

	// reason says why it is held, for the people who read the policy.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason"`
}

// OSRepairKind is what a repair policy does to its node.
// +kubebuilder:validation:Enum=Restage;Rollback;AssessmentReset;SelectBootEntry
type OSRepairKind string

const (
	// OSRepairRestage repairs a fallback: the node booted its passive slot after its staged
	// image failed; the image it booted (the last good one) is staged again on its active slot
	// (a RecoveryRestage, which the agent refuses on a node that did not fall back).
	OSRepairRestage OSRepairKind = "Restage"
	// OSRepairRollback rolls back a boot whose post-boot health timed out: the node booted its
	// active slot with an image whose health never went green; the image of its last healthy
	// boot is staged on its active slot again (an OSUpgradeStage), proven by the next boot.
	OSRepairRollback OSRepairKind = "Rollback"
	// OSRepairAssessmentReset clears the stale boot-assessment flags that would make the node's
	// next boot fall back at once (kairos#4303): a BootAssessmentReset, under the agent's
	// checkpoint, in place of the stage; then the reboot proves it: the node boots the image it
	// runs (spec.image) from its active slot again, its boot counted good.
	OSRepairAssessmentReset OSRepairKind = "AssessmentReset"
	// OSRepairSelectBootEntry boots the node once into another entry (spec.repairs.entry): a
	// SelectBootEntry in place of the stage, then the reboot, proven when the node boots that
	// entry with spec.image. One boot only: GRUB clears the selection as it boots it, and the
	// node's next boot boots its default entry again.
	OSRepairSelectBootEntry OSRepairKind = "SelectBootEntry"
)

// OSNodeRepair names the node a repair policy changes, the boot it repairs, and how.
//
// +kubebuilder:validation:XValidation:rule="has(self.entry) == (has(self.kind) && self.kind == 'SelectBootEntry')",message="entry is set exactly when kind is SelectBootEntry",fieldPath=".entry"
type OSNodeRepair struct {
	// node is the node repaired.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// bootID is the boot repaired: the one that fell back (the BootRecoveryPolicy's
	// status.nodes[].lastFallback.bootID) for a Restage, the one whose post-boot health timed
	// out (status.nodes[].postBootHealth.bootID) for a Rollback, the node's boot when the
	// repair was made (its agent's status.os.bootID) for an AssessmentReset or a
	// SelectBootEntry: a node that booted again since is not repaired.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`
	// kind is what the repair does: Restage (the default), Rollback, AssessmentReset or
	// SelectBootEntry.
	// +optional
	// +kubebuilder:default=Restage
	Kind OSRepairKind `json:"kind,omitempty"`
	// entry is the boot entry a SelectBootEntry boots once: Active or Passive. (The agent can
	// select Recovery too, but a repair does not: a node in its recovery system runs none of
	// the cluster's work, and its step could neither soak it nor give its VMs back.)
	// +optional
	// +kubebuilder:validation:XValidation:rule="self in ['Active', 'Passive']",message="must be Active or Passive: a repair does not boot a node into its recovery system"
	Entry KairosBootEntry `json:"entry,omitempty"`
}

// IsRollback reports whether the repair is a rollback.
func (r *OSNodeRepair) IsRollback() bool { return r != nil && r.Kind == OSRepairRollback }

// IsRestage reports whether the repair restages a fallback's image (the default kind).
func (r *OSNodeRepair) IsRestage() bool {
	return r != nil && (r.Kind == "" || r.Kind == OSRepairRestage)
}

// KeepsImage reports whether the repair stages no image: an AssessmentReset or a
// SelectBootEntry, whose spec.image is the image the node is to boot, as it is.
func (r *OSNodeRepair) KeepsImage() bool {
	return r != nil && (r.Kind == OSRepairAssessmentReset || r.Kind == OSRepairSelectBootEntry)
}

// IsAssessmentReset reports whether the repair clears its node's stale boot-assessment flags.
func (r *OSNodeRepair) IsAssessmentReset() bool { return r != nil && r.Kind == OSRepairAssessmentReset }

// IsBootSelection reports whether the repair boots its node once into an entry.
func (r *OSNodeRepair) IsBootSelection() bool { return r != nil && r.Kind == OSRepairSelectBootEntry }

// BootEntry is the entry the repaired node's next boot must boot: the one a SelectBootEntry
// selects, else Active.
func (r *OSNodeRepair) BootEntry() KairosBootEntry {
	if r != nil && r.Kind == OSRepairSelectBootEntry {
		return r.Entry
	}
	return KairosBootActive
}

// OSVersionPolicySpec says which Kairos image the nodes run, and how carefully they move to it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.repairs) || (!has(self.hold) && (!has(self.upgradeRecovery) || self.upgradeRecovery == 'Never'))",message="a repair (spec.repairs) changes its node's active image alone: it takes no hold or upgradeRecovery",fieldPath=".repairs"
// +kubebuilder:validation:XValidation:rule="!has(self.repairs) || (has(self.approval) && self.approval == 'Manual')",message="a repair (spec.repairs) waits for a person's approval: spec.approval must be Manual",fieldPath=".approval"
type OSVersionPolicySpec struct {
	// image is the Kairos OCI image every selected node runs, pinned by digest and named with
	// its tag: REPOSITORY:TAG@sha256:DIGEST. The node stages it by digest; once booted, its
	// /etc/kairos-release must name REPOSITORY:TAG (KAIROS_IMAGE_REPO).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('@sha256:[a-f0-9]{64}$')",message="must be pinned by digest: REPOSITORY:TAG@sha256:<64 hex digits>"
	// +kubebuilder:validation:XValidation:rule="self.split('@')[0].matches('^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*:[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$')",message="must name the image's repository and tag before the digest (REPOSITORY:TAG@sha256:...): the booted node's /etc/kairos-release names the image by them"
	Image string `json:"image"`

	// nodeSelector selects the nodes the policy upgrades; every node when empty.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// repairs, when set, makes the policy the repair of one node's boot, on that node alone
	// (when spec.nodeSelector, if any, selects it), proven by the next boot. It waits for a
	// person's approval (spec.approval Manual). Four kinds:
	//   - Restage, of a fallback: it stages again the image the node booted when it fell back
	//     (the last good one, named here by digest). The BootRecoveryPolicy's pin of the node
	//     (for that boot) neither holds the node from this policy nor holds its steps; once it
	//     succeeds, the BootRecoveryPolicy counts the fallback acknowledged by the person who
	//     approved it.
	//   - Rollback, of a boot whose post-boot health timed out: it stages the image of the
	//     node's last healthy boot (named here by digest) on the node's active slot, which it
	//     must have booted.
	//   - AssessmentReset, of a boot whose stale boot-assessment flags would make the next boot
	//     fall back: it clears them (no image is staged; spec.image is the one the node runs
	//     from its active slot) and reboots the node into it.
	//   - SelectBootEntry: it boots the node once into entry (Active or Passive; spec.image is
	//     the image that entry holds); the boot after is the default entry's again.
	// +optional
	Repairs *OSNodeRepair `json:"repairs,omitempty"`

	// nodeOrder is the order in which the selected nodes are upgraded, one at a time. Nodes
	// the list does not name follow in the default order: tiebreakers, secondaries, the
	// primary last.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	NodeOrder []string `json:"nodeOrder,omitempty"`

	// hold lists nodes the policy leaves alone, each with a reason.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=16
	Hold []OSNodeHold `json:"hold,omitempty"`

	// soak is how long a node's health gates must stay green after it booted the image before
	// the next node starts. Between 10s and 24h.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="must be between 10s and 24h"
	Soak metav1.Duration `json:"soak,omitzero"`

	// rebootTimeout is how long a node may take from its reboot to its agent reporting the new
	// boot. Between 30s and 2h.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('30s') && duration(self) <= duration('2h'))",message="must be between 30s and 2h"
	RebootTimeout metav1.Duration `json:"rebootTimeout,omitzero"`

	// vmProtection is what happens to a node's VMs while it is upgraded: LiveMigrate moves
	// each to another node before the node is drained and back to it after its soak (it needs
	// a second node and ReadWriteMany volumes); Stop stops them and starts them again after the
	// soak; None does nothing for them: the drain evicts their launcher pods (their
	// evictionStrategy decides what happens) and what is left goes down with the reboot.
	// +optional
	// +kubebuilder:default=LiveMigrate
	VMProtection VMProtection `json:"vmProtection,omitempty"`

	// upgradeRecovery says whether each node's recovery system is upgraded too, once every
	// node booted the image and soaked.
	// +optional
	// +kubebuilder:default=Never
	UpgradeRecovery RecoveryUpgrade `json:"upgradeRecovery,omitempty"`

	// approval says whether each node's upgrade waits for a person to approve it.
	// +optional
	// +kubebuilder:default=Automatic
	Approval Approval `json:"approval,omitempty"`

	// maintenanceWindow, when set, is when a node's upgrade may start.
	// +optional
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`
}

// NodeOSPhase is where one node stands in an OS version policy.
// +kubebuilder:validation:Enum=Pending;Draining;Staged;Rebooting;Verifying;Soaking;Done;FellBack;Failed
type NodeOSPhase string

// The node phases of an OS version policy.
const (
	// NodeOSPending: the node's upgrade has not started.
	NodeOSPending NodeOSPhase = "Pending"
	// NodeOSDraining: the node is being cordoned and drained.
	NodeOSDraining NodeOSPhase = "Draining"
	// NodeOSStaged: the image is written to the node's active slot and waits for its reboot.
	NodeOSStaged NodeOSPhase = "Staged"
	// NodeOSRebooting: the node was asked to reboot and has not reported its new boot yet.
	NodeOSRebooting NodeOSPhase = "Rebooting"
	// NodeOSVerifying: the node reported a new boot, which is being checked.
	NodeOSVerifying NodeOSPhase = "Verifying"
	// NodeOSSoaking: the node proved it booted the image; its health gates must stay green
	// for spec.soak.
	NodeOSSoaking NodeOSPhase = "Soaking"
	// NodeOSDone: booted, soaked, uncordoned, its VMs back.
	NodeOSDone NodeOSPhase = "Done"
	// NodeOSFellBack: the node's boot of the image failed and GRUB booted the previous one
	// (the passive slot, with upgrade_failure): the policy stopped, and the image is not tried
	// on the node again until a person acknowledges it.
	NodeOSFellBack NodeOSPhase = "FellBack"
	// NodeOSFailed: the node's upgrade failed otherwise (it did not come back, its health did
	// not hold); the evidence says what it last reported.
	NodeOSFailed NodeOSPhase = "Failed"
)

// OSUpgradePart is one part of a node's step in an OS version policy: Cordon, ProtectVMs,
// Drain, Stage, Reboot, Verify, Soak, Uncordon and RestoreVMs, in order. The record is the
// step's memory of where it is: written in the same status patch as the step's own state, it
// is read back after a restart.
type OSUpgradePart struct {
	// name of the part.
	// +required
	// +kubebuilder:validation:Enum=Cordon;ProtectVMs;Drain;Stage;Reboot;Verify;Soak;Uncordon;RestoreVMs
	Name string `json:"name"`

	// state of the part: Running while it is under way, then Succeeded, Skipped or Failed.
	// +required
	State StepState `json:"state"`

	// startedAt is when the part began: its time limits count from it.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// finishedAt is when the part ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// message says what the part did, waits for, or why it failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// NodeOSUpgrade is one node's part in an OS version policy: what its agent reports of its
// boot, where its upgrade stands, and the evidence.
type NodeOSUpgrade struct {
	// name of the node.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// position of the node in the policy's order, from 1: its step is named after it (Node1).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Position int32 `json:"position"`

	// phase is where the node's upgrade stands.
	// +required
	Phase NodeOSPhase `json:"phase"`

	// target is the image the node is upgraded to (spec.image).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Target string `json:"target,omitempty"`

	// bootedImage is the image the node runs, as its /etc/kairos-release names it
	// (KAIROS_IMAGE_REPO), in its agent's last report.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	BootedImage string `json:"bootedImage,omitempty"`

	// bootedVersion is the Kairos version it runs (KAIROS_VERSION).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	BootedVersion string `json:"bootedVersion,omitempty"`

	// bootEntry is the boot slot it runs from: Active, Passive (the fallback) or Recovery.
	// +optional
	BootEntry KairosBootEntry `json:"bootEntry,omitempty"`

	// bootID is the kernel's boot ID in its agent's last report.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`

	// previousBootID is the boot ID the node ran when the image was staged: the reboot must
	// change it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PreviousBootID string `json:"previousBootID,omitempty"`

	// previousImage is the image the node ran when the image was staged.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	PreviousImage string `json:"previousImage,omitempty"`

	// drbdResources is how many DRBD resources the node's agent reported at the Preflight: after
	// its boot, the node is healthy only once it reports as many again, connected and UpToDate.
	// +optional
	// +kubebuilder:validation:Minimum=0
	DRBDResources int32 `json:"drbdResources,omitempty"`

	// cordon says what the policy did with the node's scheduling.
	// +optional
	Cordon NodeCordon `json:"cordon,omitempty"`

	// drained lists what the drain evicted from the node (namespace/name), at most 32.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=317
	Drained []string `json:"drained,omitempty"`

	// verifiedAt is when the node was proven to run the image.
	// +optional
	VerifiedAt *metav1.Time `json:"verifiedAt,omitempty"`

	// healthyAt is when the node's health gates were first all green after its boot: its soak
	// counts from it, and ends it if a gate turns red before spec.soak has passed.
	// +optional
	HealthyAt *metav1.Time `json:"healthyAt,omitempty"`

	// evidence says what proved the node booted the image, or what it reported instead.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Evidence string `json:"evidence,omitempty"`

	// part is the part of the node's step under way, or the last one that ran.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Part string `json:"part,omitempty"`

	// parts records each part the node's step began, in order.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=12
	Parts []OSUpgradePart `json:"parts,omitempty"`
}

// OSVersionPolicyStatus is the policy's progress and evidence.
type OSVersionPolicyStatus struct {
	WorkflowStatus `json:",inline"`

	// currentNode is the node whose step runs or waits, empty when none does.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CurrentNode string `json:"currentNode,omitempty"`

	// progress counts the nodes Done, of all: "2/3".
	// +optional
	// +kubebuilder:validation:MaxLength=8
	Progress string `json:"progress,omitempty"`

	// nodes lists each node the policy upgrades, in order.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Nodes []NodeOSUpgrade `json:"nodes,omitempty"`

	// held lists the selected nodes the policy leaves alone: spec.hold's, and those that fell
	// back from the image before and are not acknowledged.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=16
	Held []OSNodeHold `json:"held,omitempty"`
}

// AnnotationAcknowledgeFallback is set on an OSVersionPolicy to name the nodes (separated by
// commas) whose earlier fallback from the policy's image a person acknowledges: the policy may try the
// image on them again. Without it, a node whose agent reports a fallback from the image is
// held. The admission webhook stamps who set it in AnnotationAcknowledgedBy.
const AnnotationAcknowledgeFallback = "nodewright.spectrocloud.com/acknowledge-fallback"

// AnnotationAcknowledgedBy is stamped by the mutating admission webhook whenever
// AnnotationAcknowledgeFallback is set or changed: the user who set it. It cannot be set or
// changed otherwise; the audit trail names this user.
const AnnotationAcknowledgedBy = "nodewright.spectrocloud.com/acknowledged-by"

// OSVersionPolicy moves the selected Kairos nodes to one OS image, one node at a time: each
// node cordoned and drained, the image staged by its agent, the node rebooted, proven to have
// booted the image (a new boot ID, the image in /etc/kairos-release, the active slot with no
// upgrade_failure, the boot assessment cleared) and soaked with its storage healthy before the
// next one starts. A node that falls back stops the policy. The spec cannot change once the
// policy has started.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=osvp;osversion,categories=nodewright
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Repair",type=string,JSONPath=`.spec.repairs.kind`,priority=1,description="What a repair policy does to its one node: Restage, Rollback, AssessmentReset or SelectBootEntry"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.currentNode`,description="The node being upgraded, or waiting to be"
// +kubebuilder:printcolumn:name="Done",type=string,JSONPath=`.status.progress`,description="Nodes proven booted on the image and soaked, of all"
// +kubebuilder:printcolumn:name="Part",type=string,JSONPath=`.status.nodes[*].parts[?(@.state=="Running")].name`,description="The part of the running step under way"
// +kubebuilder:printcolumn:name="Fell Back",type=string,JSONPath=`.status.nodes[?(@.phase=="FellBack")].name`,description="The nodes whose boot of the image fell back"
// +kubebuilder:printcolumn:name="Held By",type=string,JSONPath=`.status.conditions[?(@.type=="Held")].reason`,description="The gate that holds the next step, or GatesOpen"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec",message="spec cannot change once the policy has started",fieldPath=".spec"
type OSVersionPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which image the nodes run and how carefully they move to it.
	// +required
	Spec OSVersionPolicySpec `json:"spec"`

	// status is the policy's progress and evidence.
	// +optional
	Status OSVersionPolicyStatus `json:"status,omitempty"`
}

// OSVersionPolicyList is a list of OSVersionPolicy.
//
// +kubebuilder:object:root=true
type OSVersionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OSVersionPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&OSVersionPolicy{}, &OSVersionPolicyList{})
}

// GetWorkflowStatus is the policy's shared workflow status.
func (p *OSVersionPolicy) GetWorkflowStatus() *WorkflowStatus { return &p.Status.WorkflowStatus }

// GetGates are the policy's approval policy and maintenance window.
func (p *OSVersionPolicy) GetGates() (Approval, *MaintenanceWindow) {
	return p.Spec.Approval, p.Spec.MaintenanceWindow
}
