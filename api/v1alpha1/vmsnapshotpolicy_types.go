package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The labels and annotations a VMSnapshotPolicy puts on each VirtualMachineSnapshot it makes.
// It touches only a snapshot that carries both labels and its own UID.
const (
	// LabelSnapshotPolicy names the policy that made the snapshot.
	LabelSnapshotPolicy = "nodewright.spectrocloud.com/snapshot-policy"
	// LabelSnapshotVM names the VM it is of (also spec.source.name).
	LabelSnapshotVM = "nodewright.spectrocloud.com/snapshot-vm"
	// AnnotationSnapshotPolicyUID is the UID of the policy that made it: a policy deleted and
	// made again under the same name does not take over the old one's snapshots.
	AnnotationSnapshotPolicyUID = "nodewright.spectrocloud.com/snapshot-policy-uid"
	// AnnotationSnapshotScheduled is the scheduled time of the run that made it (RFC 3339).
	AnnotationSnapshotScheduled = "nodewright.spectrocloud.com/snapshot-scheduled"
	// AnnotationSnapshotStarted is when the run made it (RFC 3339): its scheduled time, or
	// later for a run late by catchUp RunOnce. Its failure deadline counts from then.
	AnnotationSnapshotStarted = "nodewright.spectrocloud.com/snapshot-started"
	// AnnotationSnapshotVolumes lists, comma-separated, the volumes of the VM it must include
	// to be good: those of the VM when the run made it.
	AnnotationSnapshotVolumes = "nodewright.spectrocloud.com/snapshot-volumes"
	// AnnotationSnapshotVMUID is the UID of the VM it is of: a VM deleted and made again under
	// the same name does not take over the old one's snapshots, which retention would then
	// drop as older than the new one's.
	AnnotationSnapshotVMUID = "nodewright.spectrocloud.com/snapshot-vm-uid"
)

// The conditions of a VMSnapshotPolicy.
const (
	// ConditionHealthy: every selected VM's newest run made a good snapshot or is on its way,
	// and the policy can run.
	ConditionHealthy = "Healthy"
	// ConditionDegraded: a VM failed spec.degradedAfter runs in a row. The policy goes on.
	ConditionDegraded = "Degraded"
	// ConditionSuspended: spec.suspend holds the runs.
	ConditionSuspended = "Suspended"
)

// MaxSnapshotPolicyVMs bounds status.vms: the VMs one policy selects.
const MaxSnapshotPolicyVMs = 500

// SnapshotConsistency is what a snapshot must show of the guest's freeze to count as good.
// +kubebuilder:validation:Enum=GuestAgent;BestEffort
type SnapshotConsistency string

// The consistencies.
const (
	// SnapshotGuestAgent: the guest agent froze the guest's file systems (KubeVirt's
	// indication GuestAgent, without QuiesceFailed).
	SnapshotGuestAgent SnapshotConsistency = "GuestAgent"
	// SnapshotBestEffort: a snapshot without the guest agent's freeze is good too, marked
	// NoGuestAgent: crash-consistent, as after a power cut.
	SnapshotBestEffort SnapshotConsistency = "BestEffort"
)

// SnapshotCatchUp is what a policy does with a run missed by more than its starting
// deadline (its operator was down, or node work put it off).
// +kubebuilder:validation:Enum=Skip;RunOnce
type SnapshotCatchUp string

// The catch-up modes.
const (
	SnapshotCatchUpSkip    SnapshotCatchUp = "Skip"
	SnapshotCatchUpRunOnce SnapshotCatchUp = "RunOnce"
)

// VMSelector selects VirtualMachines in the policy's own namespace, never another's.
// +kubebuilder:validation:XValidation:rule="!has(self.names) || self.names.all(n, !n.contains('/'))",message="names are of VMs in the policy's own namespace: a namespace/name reaches another namespace, which a policy never does"
type VMSelector struct {
	// names are VMs by name. With matchLabels or matchExpressions, a VM must be named and
	// match.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=500
	// +kubebuilder:validation:items:MaxLength=253
	Names []string `json:"names,omitempty"`

	// matchLabels and matchExpressions select the VMs by their labels, as a Kubernetes label
	// selector does. An empty vmSelector selects every VM of the namespace.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// +optional
	// +listType=atomic
	MatchExpressions []metav1.LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// SnapshotSchedule is when the policy's runs come.
type SnapshotSchedule struct {
	// cron is a standard five-field cron expression (minute hour day-of-month month
	// day-of-week) or a descriptor (@hourly, @daily, @weekly, @monthly, @yearly), as a
	// Kubernetes CronJob takes it; no TZ= or CRON_TZ= prefix (timeZone says it) and no
	// @every.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Cron string `json:"cron"`

	// timeZone is the IANA time zone the expression is read in (Europe/Berlin). On a
	// daylight-saving change, a time that does not exist that day gets no run, and a time
	// that comes twice gets one (each real hour when the hour field is *).
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	TimeZone string `json:"timeZone,omitempty"`
}

// SnapshotRetention is what is kept. Only good snapshots count and are kept by the rules: the
// union of the last keepLast, and the newest of each of the last keepHourly hours, keepDaily
// days and keepWeekly ISO weeks (by the schedule's time zone). maxAge drops good ones older
// than it that the rules kept. Never fewer than minGood good ones are kept, and never the
// newest good one deleted. A failed snapshot is deleted once a newer one is good.
// +kubebuilder:validation:XValidation:rule="self.minGood <= self.keepLast",message="minGood must not be greater than keepLast: the policy could never keep minGood good snapshots by the last-N rule",fieldPath=".minGood"
type SnapshotRetention struct {
	// keepLast keeps the newest keepLast good snapshots of each VM. At least 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	KeepLast int32 `json:"keepLast,omitempty"`
	// keepHourly keeps the newest good snapshot of each of the last keepHourly hours.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	KeepHourly int32 `json:"keepHourly,omitempty"`
	// keepDaily keeps the newest good snapshot of each of the last keepDaily days.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	KeepDaily int32 `json:"keepDaily,omitempty"`
	// keepWeekly keeps the newest good snapshot of each of the last keepWeekly ISO weeks.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	KeepWeekly int32 `json:"keepWeekly,omitempty"`
	// maxAge, when set, drops the good snapshots older than it, down to minGood.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 36h or 720h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) >= duration('1h')",message="must be at least 1h"
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
	// minGood is the fewest good snapshots of each VM kept, whatever maxAge says. At least 1,
	// at most keepLast.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MinGood int32 `json:"minGood,omitempty"`
}

// SnapshotConsistencySpec is the consistency a good snapshot shows.
type SnapshotConsistencySpec struct {
	// require is GuestAgent (default: the guest's file systems frozen by its agent) or
	// BestEffort (a crash-consistent snapshot is good too, marked NoGuestAgent).
	// +optional
	// +kubebuilder:default=GuestAgent
	Require SnapshotConsistency `json:"require,omitempty"`
}

// VMSnapshotPolicySpec is what the policy snapshots, when, and what it keeps.
type VMSnapshotPolicySpec struct {
	// vmSelector selects the VMs of the policy's namespace to snapshot.
	// +required
	VMSelector VMSelector `json:"vmSelector"`

	// schedule is when runs come.
	// +required
	Schedule SnapshotSchedule `json:"schedule"`

	// retention is what is kept of each VM's snapshots.
	// +required
	Retention SnapshotRetention `json:"retention"`

	// consistency is what a snapshot must show of the guest's freeze to be good.
	// +optional
	// +kubebuilder:default={}
	Consistency SnapshotConsistencySpec `json:"consistency,omitzero"`

	// failureDeadline is how long one snapshot may take: KubeVirt fails it past that (its
	// spec.failureDeadline), and the policy counts it failed a minute later whatever
	// KubeVirt says. Between 1m and 24h.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 5m or 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('24h'))",message="must be between 1m and 24h"
	FailureDeadline metav1.Duration `json:"failureDeadline,omitzero"`

	// catchUp is what happens to a run missed by more than startingDeadline: Skip (default:
	// it is skipped, and says so) or RunOnce (it runs once, late, however many were missed).
	// +optional
	// +kubebuilder:default=Skip
	CatchUp SnapshotCatchUp `json:"catchUp,omitempty"`

	// startingDeadline is how late a run may start and still count as on time. Between 0s
	// and 24h.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 5m or 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('24h')",message="must be at most 24h"
	StartingDeadline metav1.Duration `json:"startingDeadline,omitzero"`

	// degradedAfter is how many failed runs of a VM in a row make the policy Degraded (a
	// Warning Event and the Degraded condition; the policy goes on running). Default 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	DegradedAfter int32 `json:"degradedAfter,omitempty"`

	// suspend stops new runs. Retention still applies to the snapshots there (a failed one
	// goes once a newer one is good; a lowered keepLast or maxAge drops good ones, down to
	// minGood). Runs scheduled while suspended are not caught up when it is lifted.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// SnapshotRef names one snapshot of a VM and what it is.
type SnapshotRef struct {
	// name of the VirtualMachineSnapshot.
	Name string `json:"name"`
	// scheduled is the scheduled time of the run that made it.
	Scheduled metav1.Time `json:"scheduled"`
	// noGuestAgent: good under BestEffort, without the guest agent's freeze.
	// +optional
	NoGuestAgent bool `json:"noGuestAgent,omitempty"`
	// reason says why it is not good, for a failed one.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// SnapshotSkip is a run that made no snapshot, and why.
type SnapshotSkip struct {
	// scheduled is the scheduled time of the run.
	Scheduled metav1.Time `json:"scheduled"`
	// reason says why it made none.
	Reason string `json:"reason"`
}

// VMSnapshotStatus is one VM's snapshots, as the policy sees them.
type VMSnapshotStatus struct {
	// name of the VM.
	Name string `json:"name"`
	// lastScheduled is the newest scheduled time acted on for this VM: run, skipped or missed.
	// +optional
	LastScheduled *metav1.Time `json:"lastScheduled,omitempty"`
	// lastRun is the snapshot the newest run made.
	// +optional
	LastRun *SnapshotRef `json:"lastRun,omitempty"`
	// lastGood is the newest good snapshot.
	// +optional
	LastGood *SnapshotRef `json:"lastGood,omitempty"`
	// lastFailed is the newest failed snapshot still kept.
	// +optional
	LastFailed *SnapshotRef `json:"lastFailed,omitempty"`
	// lastSkipped is the newest run that made no snapshot, and why: put off, waiting, late.
	// +optional
	LastSkipped *SnapshotSkip `json:"lastSkipped,omitempty"`
	// guestFrozen: the guest's file systems are frozen (its VMI's fsFreezeStatus) while no
	// snapshot of the policy is in progress and the newest one failed: left frozen by a failed
	// snapshot, as kubevirt#9998 did. The policy does not thaw it, since another tool (a volume
	// migration's hot copy, a backup) may hold the freeze; virtctl unfreeze does.
	// +optional
	GuestFrozen bool `json:"guestFrozen,omitempty"`
	// consecutiveFailures counts the VM's newest snapshots that failed, in a row.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// kept counts the good snapshots kept.
	// +optional
	Kept int32 `json:"kept,omitempty"`
	// keptSnapshots are the newest of them, newest first, at most 20 (kubectl nodewright
	// snapshot list shows them all).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	KeptSnapshots []string `json:"keptSnapshots,omitempty"`
}

// VMSnapshotPolicyStatus is what the policy observed and did.
type VMSnapshotPolicyStatus struct {
	// observedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Healthy (every VM's newest run is good or on its way), Degraded (a VM
	// failed degradedAfter runs in a row) and Suspended.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// nextRun is the next scheduled time, none while suspended.
	// +optional
	NextRun *metav1.Time `json:"nextRun,omitempty"`
	// lastRun is the newest scheduled time a run started for any VM.
	// +optional
	LastRun *metav1.Time `json:"lastRun,omitempty"`
	// lastSkipped is the newest run that made no snapshot of some VM, and why.
	// +optional
	LastSkipped *SnapshotSkip `json:"lastSkipped,omitempty"`
	// selected counts the VMs the selector selects.
	// +optional
	Selected int32 `json:"selected,omitempty"`
	// kept counts the good snapshots kept, of every VM.
	// +optional
	Kept int32 `json:"kept,omitempty"`
	// vms are the selected VMs, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=500
	VMs []VMSnapshotStatus `json:"vms,omitempty"`
}

// VMSnapshotPolicy snapshots the VMs it selects on a schedule, with KubeVirt's
// VirtualMachineSnapshot, and keeps what its retention says: only good snapshots count, the
// newest good one is never deleted, and never fewer than minGood are kept.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=vmsp;snappolicy,categories=nodewright
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule.cron`
// +kubebuilder:printcolumn:name="VMs",type=integer,JSONPath=`.status.selected`
// +kubebuilder:printcolumn:name="Kept",type=integer,JSONPath=`.status.kept`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastRun`
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.nextRun`
// +kubebuilder:printcolumn:name="Time Zone",type=string,JSONPath=`.spec.schedule.timeZone`,priority=1
// +kubebuilder:printcolumn:name="Skipped",type=string,JSONPath=`.status.lastSkipped.reason`,priority=1
type VMSnapshotPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VMSnapshotPolicySpec `json:"spec"`
	// +optional
	Status VMSnapshotPolicyStatus `json:"status,omitzero"`
}

// VMSnapshotPolicyList is a list of VMSnapshotPolicy.
// +kubebuilder:object:root=true
type VMSnapshotPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VMSnapshotPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VMSnapshotPolicy{}, &VMSnapshotPolicyList{})
}
