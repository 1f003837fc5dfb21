package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BootRecoveryPolicyName is the only name a BootRecoveryPolicy may have: there is one per
// cluster.
const BootRecoveryPolicyName = "nodewright"

// MaxBootRecoveryNodes bounds status.nodes: more nodes than a small edge cluster has.
const MaxBootRecoveryNodes = 64

// FallbackRepair is what the policy does, beyond holding and alerting, about a node that fell
// back.
// +kubebuilder:validation:Enum=None;RestageWithApproval
type FallbackRepair string

const (
	// FallbackRepairNone: nothing; a person repairs the node.
	FallbackRepairNone FallbackRepair = "None"
	// FallbackRepairRestageWithApproval: the policy creates the repair, an OSVersionPolicy
	// (spec.repairs) that stages the image the node booted (the last good one) again on that
	// node, once a person approves it; its success acknowledges the fallback.
	FallbackRepairRestageWithApproval FallbackRepair = "RestageWithApproval"
)

// PostBootHealthTimeoutAction is what the policy does about a node whose post-boot health is
// not green within spec.postBootHealth.timeout.
// +kubebuilder:validation:Enum=Alert;RollbackWithApproval
type PostBootHealthTimeoutAction string

const (
	// PostBootHealthAlert: an Event, the PostBootHealthy condition False, a metric.
	PostBootHealthAlert PostBootHealthTimeoutAction = "Alert"
	// PostBootHealthRollbackWithApproval: the alert, and, when the node booted its active slot
	// with an image other than the one of its last healthy boot, the rollback: the policy
	// creates an OSVersionPolicy (spec.repairs kind Rollback) that stages that image again on
	// that node once a person approves it, proven by the next boot.
	PostBootHealthRollbackWithApproval PostBootHealthTimeoutAction = "RollbackWithApproval"
)

// SystemdUnitName is the name of a systemd unit, with its type's suffix: k3s.service,
// multi-user.target, var-lib-rancher.mount, a template's instance (getty@tty1.service), or a
// name with systemd's escapes (mnt-data\x2d1.mount). It is what systemctl takes, and what
// the node's agent passes it, checked again there. At most 255 characters, as systemd's
// unit_name_is_valid allows (UNIT_NAME_MAX, 256, counts the terminating NUL).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=255
// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[-A-Za-z0-9:_.\\]+(@[-A-Za-z0-9:_.\\]+)?[.](service|socket|target|device|mount|automount|swap|timer|path|slice|scope)$')`,message="must be a systemd unit name: letters, digits and :-_.\\ (an instance after one @), ending in a unit type's suffix such as .service, .target, .mount, .socket or .timer",messageExpression=`'must be a systemd unit name, not "' + self + '": letters, digits and :-_.\\ (an instance after one @), ending in a unit type\'s suffix such as .service, .target, .mount, .socket or .timer'`
type SystemdUnitName string

// MaxSystemdUnits bounds spec.postBootHealth.systemdUnits and the units an agent reports.
const MaxSystemdUnits = 16

// PostBootHealth is the health a node must reach after each boot, beyond what GRUB's boot
// assessment sees (it counts a boot good before k3s, LINSTOR or the network are up): its
// Node Ready, its agent reporting, every DRBD resource of the node Connected and UpToDate,
// its LINSTOR satellite ONLINE (when the operator has a LINSTOR gate), and the systemd units
// it names active.
type PostBootHealth struct {
	// timeout is how long after the operator first sees a boot its health may take to be
	// green. Between 1m and 2h.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('2h'))",message="must be between 1m and 2h"
	Timeout metav1.Duration `json:"timeout,omitzero"`

	// systemdUnits are systemd units every Kairos node must have active (ActiveState active,
	// as `systemctl show` says it on the node) for its boot to be green: k3s.service, say,
	// or a site's own workload's unit. Each node's agent reads them on its host with
	// systemctl and reports them in its NodewrightAgentStatus (status.os.systemdUnits); a unit
	// the agent does not report (it cannot read them, or is older) is red, as is one the node
	// does not have (LoadState not-found). At most 16, each a unit name with its type's
	// suffix (.service, .target, .mount, .socket, .timer...); none when absent.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	SystemdUnits []SystemdUnitName `json:"systemdUnits,omitempty"`
}

// FallbackActions is what the policy does when a node's boot fell back from a staged image to
// the previous one.
type FallbackActions struct {
	// holdUpgrades: every OSVersionPolicy holds the node, pinned to the image it booted, and
	// no OSVersionPolicy starts another node's step, until a person acknowledges the fallback.
	// +optional
	// +kubebuilder:default=true
	HoldUpgrades *bool `json:"holdUpgrades,omitempty"`

	// alert: a Warning Event, the FellBack condition True and the metric
	// nodewright_node_boot_fallback until it is acknowledged.
	// +optional
	// +kubebuilder:default=true
	Alert *bool `json:"alert,omitempty"`

	// repair is what is done about it beyond that.
	// +optional
	// +kubebuilder:default=None
	Repair FallbackRepair `json:"repair,omitempty"`
}

// RecoveryBootActions is what the policy does when a node boots its recovery system.
type RecoveryBootActions struct {
	// cordon: the node is cordoned while it runs its recovery system, and uncordoned by the
	// policy once it boots another entry (unless a person cordoned it too).
	// +optional
	// +kubebuilder:default=true
	Cordon *bool `json:"cordon,omitempty"`

	// alert: a Warning Event, the RecoveryBoot condition True and the metric
	// nodewright_node_recovery_boot while it runs there.
	// +optional
	// +kubebuilder:default=true
	Alert *bool `json:"alert,omitempty"`
}

// BootRecoveryPolicySpec says what the operator does about the boots of the cluster's Kairos
// nodes.
type BootRecoveryPolicySpec struct {
	// postBootHealth is the health every boot must reach, and how soon.
	// +optional
	PostBootHealth PostBootHealth `json:"postBootHealth,omitzero"`

	// onFallback is what is done when a node fell back from a staged image.
	// +optional
	OnFallback FallbackActions `json:"onFallback,omitzero"`

	// onRecoveryBoot is what is done when a node boots its recovery system.
	// +optional
	OnRecoveryBoot RecoveryBootActions `json:"onRecoveryBoot,omitzero"`

	// onPostBootHealthTimeout is what is done when a boot's health is not green in time.
	// +optional
	// +kubebuilder:default=Alert
	OnPostBootHealthTimeout PostBootHealthTimeoutAction `json:"onPostBootHealthTimeout,omitempty"`
}

// FallbackAcknowledgement is a person's acknowledgement of one fallback.
type FallbackAcknowledgement struct {
	// bootID is the boot that fell back, the one acknowledged.
	// +required
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`
	// by is who acknowledged it, as the admission webhook stamped them
	// (nodewright.spectrocloud.com/acknowledged-by).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	By string `json:"by,omitempty"`
	// at is when the operator recorded it.
	// +required
	At metav1.Time `json:"at"`
}

// BootRepairStatus is the repair of one boot: a fallback's, or a rollback of a boot whose
// post-boot health timed out.
type BootRepairStatus struct {
	// bootID is the boot repaired: the one that fell back, or whose health timed out.
	// +required
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`
	// policy is the OSVersionPolicy that repairs it; absent when none could be created.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Policy string `json:"policy,omitempty"`
	// image is the image it stages, by digest.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// phase is the policy's phase, as last read; Deleted when it was deleted before it ended.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase,omitempty"`
	// message says why no repair could be created, or how it ended.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// HealthyBoot is a boot whose post-boot health went green.
type HealthyBoot struct {
	// bootID is the boot.
	// +required
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`
	// image is the image it ran (KAIROS_IMAGE_REPO).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// at is when its health went green.
	// +required
	At metav1.Time `json:"at"`
}

// PostBootHealthStatus is one boot's post-boot health.
type PostBootHealthStatus struct {
	// bootID is the boot it is of.
	// +required
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID"`
	// deadline is when it must be green by: the boot first seen plus spec.postBootHealth.timeout.
	// +required
	Deadline metav1.Time `json:"deadline"`
	// passedAt is when every check was first green in this boot.
	// +optional
	PassedAt *metav1.Time `json:"passedAt,omitempty"`
	// timedOutAt is when the deadline passed with a check still red.
	// +optional
	TimedOutAt *metav1.Time `json:"timedOutAt,omitempty"`
	// failing says which checks are red, while it is not green.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Failing string `json:"failing,omitempty"`
}

// NodeBootRecord is what the policy knows of one node's boot, from its agent's report.
type NodeBootRecord struct {
	// name is the node's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// bootEntry is the boot entry (slot) the node runs: Active, Passive, Recovery...
	// +optional
	BootEntry KairosBootEntry `json:"bootEntry,omitempty"`

	// bootID is the node's boot ID.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`

	// bootSeenAt is when the policy first saw this boot.
	// +optional
	BootSeenAt *metav1.Time `json:"bootSeenAt,omitempty"`

	// image is the image the node booted (KAIROS_IMAGE_REPO of /etc/kairos-release).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// upgradeFailure: this boot is the fallback after a failed boot of an upgrade (the
	// sentinel /run/cos/upgrade_failure, or upgrade_failure on the kernel's command line).
	// +optional
	UpgradeFailure bool `json:"upgradeFailure,omitempty"`

	// bootAssessment is GRUB's boot-assessment flags (the grubenv block boot_assessment on
	// COS_STATE).
	// +optional
	BootAssessment *KairosBootAssessment `json:"bootAssessment,omitempty"`

	// bootCounting is, on a UKI (systemd-boot) node, the tries left and done of the boot entry
	// it booted, from the entry's name (NAME+LEFT-DONE.conf).
	// +optional
	BootCounting *KairosBootCounting `json:"bootCounting,omitempty"`

	// nextBootFallsBack says why the node's next boot would fall back at once (a stale
	// boot_assessment_tentative=yes with the assessment enabled): a workflow that reboots
	// the node refuses while it is set.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	NextBootFallsBack string `json:"nextBootFallsBack,omitempty"`

	// lastFallback is the last boot that fell back from a staged image: when, from which image,
	// to which, and its boot ID.
	// +optional
	LastFallback *KairosFallback `json:"lastFallback,omitempty"`

	// acknowledged is a person's acknowledgement of lastFallback; absent while it is not
	// acknowledged.
	// +optional
	Acknowledged *FallbackAcknowledgement `json:"acknowledged,omitempty"`

	// pinnedImage is the image OSVersionPolicies keep the node on while its fallback is not
	// acknowledged (spec.onFallback.holdUpgrades): the image it booted.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	PinnedImage string `json:"pinnedImage,omitempty"`

	// repair is the repair of lastFallback the policy created (spec.onFallback.repair), or why it
	// could not.
	// +optional
	Repair *BootRepairStatus `json:"repair,omitempty"`

	// lastHealthy is the node's last boot whose post-boot health went green: the image a
	// rollback (spec.onPostBootHealthTimeout RollbackWithApproval) stages again.
	// +optional
	LastHealthy *HealthyBoot `json:"lastHealthy,omitempty"`

	// rollback is the rollback of a boot whose post-boot health timed out the policy created
	// (spec.onPostBootHealthTimeout RollbackWithApproval), or why it could not.
	// +optional
	Rollback *BootRepairStatus `json:"rollback,omitempty"`

	// cordon is the policy's cordon of a node that booted its recovery system: Cordoned while
	// the policy holds it, WasCordoned when it was cordoned before, Uncordoned once the policy let it go.
	// +optional
	Cordon NodeCordon `json:"cordon,omitempty"`

	// postBootHealth is the current boot's post-boot health.
	// +optional
	PostBootHealth *PostBootHealthStatus `json:"postBootHealth,omitempty"`

	// drbdResources is how many DRBD resources the node's agent reported when its health was
	// last green: a boot that reports fewer has not brought them all back.
	// +optional
	// +kubebuilder:validation:Minimum=0
	DRBDResources int32 `json:"drbdResources,omitempty"`
}

// The BootRecoveryPolicy's condition types.
const (
	// ConditionFellBack: True while a node's fallback is not acknowledged.
	ConditionFellBack = "FellBack"
	// ConditionRecoveryBoot: True while a node runs its recovery system.
	ConditionRecoveryBoot = "RecoveryBoot"
	// ConditionPostBootHealthy: False while a node's post-boot health timed out; Unknown
	// while one waits for it; True when every node's current boot passed.
	ConditionPostBootHealthy = "PostBootHealthy"
)

// BootRecoveryPolicyStatus is the cluster's boots as the policy sees them.
type BootRecoveryPolicyStatus struct {
	// observedGeneration is the metadata.generation the status is of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// nodes are the Kairos nodes whose agents report, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Nodes []NodeBootRecord `json:"nodes,omitempty"`

	// fellBack names the nodes whose fallback is not acknowledged, for kubectl get.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	FellBack string `json:"fellBack,omitempty"`

	// recovery names the nodes that run their recovery system, for kubectl get.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Recovery string `json:"recovery,omitempty"`

	// unhealthy names the nodes whose post-boot health timed out, for kubectl get.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Unhealthy string `json:"unhealthy,omitempty"`

	// conditions: FellBack, RecoveryBoot, PostBootHealthy.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BootRecoveryPolicy says what the operator does about the boots of the cluster's Kairos
// nodes: a fallback from a staged image, a boot into the recovery system, a boot whose health
// is not green in time. Reading the boots never needs approval; a repair is a workflow that
// does. It is a singleton named "nodewright".
//
// A person acknowledges a node's fallback by naming it and the boot that fell back in the
// annotation nodewright.spectrocloud.com/acknowledge-fallback ("edge-2@<bootID>", several
// separated by commas); the admission webhook stamps who in
// nodewright.spectrocloud.com/acknowledged-by.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nwbr;bootrecovery,categories=nodewright
// +kubebuilder:printcolumn:name="Fell Back",type=string,JSONPath=`.status.fellBack`,description="Nodes whose fallback is not acknowledged"
// +kubebuilder:printcolumn:name="Recovery",type=string,JSONPath=`.status.recovery`,description="Nodes running their recovery system"
// +kubebuilder:printcolumn:name="Unhealthy",type=string,JSONPath=`.status.unhealthy`,description="Nodes whose post-boot health timed out"
// +kubebuilder:printcolumn:name="On Fallback",type=string,JSONPath=`.spec.onFallback.repair`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'nodewright'",message="BootRecoveryPolicy is a singleton: metadata.name must be 'nodewright'"
type BootRecoveryPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BootRecoveryPolicySpec `json:"spec,omitzero"`
	// +optional
	Status BootRecoveryPolicyStatus `json:"status,omitempty"`
}

// BootRecoveryPolicyList is a list of BootRecoveryPolicy.
//
// +kubebuilder:object:root=true
type BootRecoveryPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BootRecoveryPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BootRecoveryPolicy{}, &BootRecoveryPolicyList{})
}

// HoldsUpgrades reports whether a fallback holds the OSVersionPolicies (the default).
func (p *BootRecoveryPolicy) HoldsUpgrades() bool {
	return p.Spec.OnFallback.HoldUpgrades == nil || *p.Spec.OnFallback.HoldUpgrades
}

// Node is the record of the node named name in the policy's status, nil when it has none.
func (p *BootRecoveryPolicy) Node(name string) *NodeBootRecord {
	for i := range p.Status.Nodes {
		if p.Status.Nodes[i].Name == name {
			return &p.Status.Nodes[i]
		}
	}
	return nil
}

// Unacknowledged is the node's fallback when it is not acknowledged, nil otherwise.
func (n *NodeBootRecord) Unacknowledged() *KairosFallback {
	if n.LastFallback == nil || (n.Acknowledged != nil && n.Acknowledged.BootID == n.LastFallback.BootID) {
		return nil
	}
	return n.LastFallback
}
