package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespacedObjectReference names an object in a namespace.
type NamespacedObjectReference struct {
	// namespace of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// LegacySource names the objects the legacy node-init DaemonSet writes, which Nodewright
// observes read-only.
type LegacySource struct {
	// configMapRef is the ConfigMap in which the DaemonSet keeps its state machine and the
	// per-node heartbeats.
	// +required
	ConfigMapRef NamespacedObjectReference `json:"configMapRef"`

	// daemonSetRef is the DaemonSet itself; its desired and ready pod counts feed the
	// DaemonSetAvailable condition.
	// +required
	DaemonSetRef NamespacedObjectReference `json:"daemonSetRef"`

	// eventComponent is the source component (or reportingComponent) of the Events the
	// DaemonSet emits; those Events are folded into the cluster's recent warnings.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	EventComponent string `json:"eventComponent"`
}

// BondMode is a Linux bonding mode.
// +kubebuilder:validation:Enum=balance-rr;active-backup;balance-xor;broadcast;"802.3ad";balance-tlb;balance-alb
type BondMode string

// The Linux bonding modes.
const (
	BondModeBalanceRR    BondMode = "balance-rr"
	BondModeActiveBackup BondMode = "active-backup"
	BondModeBalanceXOR   BondMode = "balance-xor"
	BondModeBroadcast    BondMode = "broadcast"
	BondMode8023AD       BondMode = "802.3ad"
	BondModeBalanceTLB   BondMode = "balance-tlb"
	BondModeBalanceALB   BondMode = "balance-alb"
)

// WorkflowPhase is the coarse state of a workflow (a migration, a bond-mode flip, a
// replication upgrade).
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;RollingBack;RolledBack
type WorkflowPhase string

// The workflow phases. Pending is the only phase in which a workflow's spec may change.
const (
	// WorkflowPending: accepted, nothing has been changed yet.
	WorkflowPending WorkflowPhase = "Pending"
	// WorkflowRunning: steps are being carried out.
	WorkflowRunning WorkflowPhase = "Running"
	// WorkflowSucceeded: every step finished and was verified.
	WorkflowSucceeded WorkflowPhase = "Succeeded"
	// WorkflowFailed: a step failed and the workflow could not be rolled back; see conditions.
	WorkflowFailed WorkflowPhase = "Failed"
	// WorkflowRollingBack: a step failed and the changes made so far are being undone.
	WorkflowRollingBack WorkflowPhase = "RollingBack"
	// WorkflowRolledBack: a step failed and everything was restored as it was before.
	WorkflowRolledBack WorkflowPhase = "RolledBack"
)

// Finished reports whether the workflow has ended: Succeeded, Failed or RolledBack. Nothing
// more happens to a finished workflow but its deletion.
func (p WorkflowPhase) Finished() bool {
	return p == WorkflowSucceeded || p == WorkflowFailed || p == WorkflowRolledBack
}

// Active reports whether the workflow is carrying out steps: Running or RollingBack.
func (p WorkflowPhase) Active() bool { return p == WorkflowRunning || p == WorkflowRollingBack }

// StepState is the state of one step of a workflow.
// +kubebuilder:validation:Enum=Pending;Waiting;Running;Succeeded;Failed;Skipped;Cancelled
type StepState string

// The step states. A step that was undone keeps the state it ended in: the rollback steps
// that undid it are listed after it, each with its own state.
const (
	StepPending StepState = "Pending"
	// StepWaiting: the step is next, but a gate holds it (approval, the maintenance window,
	// another workflow, the cluster's health); the Held condition says which and why. It has
	// not started: nothing of it has been done.
	StepWaiting   StepState = "Waiting"
	StepRunning   StepState = "Running"
	StepSucceeded StepState = "Succeeded"
	StepFailed    StepState = "Failed"
	StepSkipped   StepState = "Skipped"
	// StepCancelled: a cancellation (the workflow's deletion) stopped the step; the workflow
	// then rolled back from it.
	StepCancelled StepState = "Cancelled"
)

// WorkflowStep is the evidence one step of a workflow leaves behind.
type WorkflowStep struct {
	// name of the step, e.g. SnapshotSource or Copy.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`

	// state of the step.
	// +required
	State StepState `json:"state"`

	// startedAt is when the step began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// finishedAt is when the step succeeded, failed, was skipped or was cancelled.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// message says what the step did or why it failed, for a person.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// approvedBy is the user who approved the step, for a step that waited for approval
	// (spec.approval Manual), as the admission webhook stamped them.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ApprovedBy string `json:"approvedBy,omitempty"`
}

// WorkflowStatus is the status every workflow kind shares.
type WorkflowStatus struct {
	// phase is the workflow's coarse state.
	// +optional
	Phase WorkflowPhase `json:"phase,omitempty"`

	// steps lists the workflow's steps in the order they run, each with its evidence. At
	// most 48 (32 before a flip could change 16 nodes: a Preflight, a step per node and a
	// rollback step per node make 33; the bound was loosened, never tightened).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=48
	Steps []WorkflowStep `json:"steps,omitempty"`

	// startTime is when the first step began.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the workflow reached Succeeded, Failed or RolledBack.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// observedGeneration is the metadata.generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// nextWindowStart is when the next maintenance window opens, while a step waits for it.
	// +optional
	NextWindowStart *metav1.Time `json:"nextWindowStart,omitempty"`

	// conditions describe the workflow's current state in detail: Succeeded, and Held while
	// a gate holds the next step.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Approval says whether the steps of a cluster-wide workflow that change a node wait for a
// person.
// +kubebuilder:validation:Enum=Automatic;Manual
type Approval string

// The approval policies.
const (
	// ApprovalAutomatic: every step starts as soon as its other gates allow.
	ApprovalAutomatic Approval = "Automatic"
	// ApprovalManual: each step that changes a node waits (Waiting, with the Held condition's
	// reason AwaitingApproval) until a person approves it: `kubectl nodewright approve`,
	// which sets the annotation AnnotationApprove to the step's name.
	ApprovalManual Approval = "Manual"
)

// Weekday is a day of the week.
// +kubebuilder:validation:Enum=Monday;Tuesday;Wednesday;Thursday;Friday;Saturday;Sunday
type Weekday string

// MaintenanceWindow is when a cluster-wide workflow may start a step that changes a node: on
// the given days, from start to end in the time zone. A window whose end is not after its
// start ends on the next day (22:00 to 02:00). A step that started inside the window runs to
// its end; the next one waits for the next window.
type MaintenanceWindow struct {
	// days on which the window opens; every day when empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=7
	Days []Weekday `json:"days,omitempty"`

	// start is when the window opens, as HH:MM (24-hour clock) in timeZone.
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`

	// end is when the window closes, as HH:MM; not after start means on the next day.
	// +required
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	End string `json:"end"`

	// timeZone is the IANA time zone of start and end, e.g. Europe/Berlin.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	TimeZone string `json:"timeZone,omitempty"`
}

// AnnotationApprove approves the step of a Manual workflow that it names (status.steps[] in
// state Waiting). Setting it needs the right to update the object; the admission webhook
// stamps who set it in AnnotationApprovedBy.
const AnnotationApprove = "nodewright.spectrocloud.com/approve"

// AnnotationApprovedBy is stamped by the mutating admission webhook whenever
// AnnotationApprove is set or changed: the user who set it, as the API server authenticated
// them. It cannot be set or changed otherwise; the step's approvedBy and the audit trail name
// this user.
const AnnotationApprovedBy = "nodewright.spectrocloud.com/approved-by"

// AnnotationRequestedBy is stamped on every Nodewright object by the mutating admission
// webhook: the Kubernetes user who created it, as the API server authenticated them. The
// webhook sets it on create and keeps it unchanged on every update, so no user can forge or
// rewrite it; the audit trail names this user as the one who asked.
const AnnotationRequestedBy = "nodewright.spectrocloud.com/requested-by"

// AnnotationManagementSetBy is stamped on the NodewrightCluster by the mutating admission
// webhook: the user who last set spec.management (at creation, or by changing it), as the API
// server authenticated them. It cannot be set or changed otherwise; the audit record of a
// switch between Observe and Managed names this user.
const AnnotationManagementSetBy = "nodewright.spectrocloud.com/management-set-by"

// GetWorkflowStatus is the migration's shared workflow status.
func (m *VMVolumeMigration) GetWorkflowStatus() *WorkflowStatus { return &m.Status.WorkflowStatus }

// GetWorkflowStatus is the flip's shared workflow status.
func (f *BondModeFlipPlan) GetWorkflowStatus() *WorkflowStatus { return &f.Status.WorkflowStatus }

// GetWorkflowStatus is the upgrade's shared workflow status.
func (u *ReplicationUpgrade) GetWorkflowStatus() *WorkflowStatus { return &u.Status.WorkflowStatus }

// GetGates are the flip's approval policy and maintenance window.
func (f *BondModeFlipPlan) GetGates() (Approval, *MaintenanceWindow) {
	return f.Spec.Approval, f.Spec.MaintenanceWindow
}

// GetGates are the upgrade's approval policy and maintenance window.
func (u *ReplicationUpgrade) GetGates() (Approval, *MaintenanceWindow) {
	return u.Spec.Approval, u.Spec.MaintenanceWindow
}
