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
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Skipped;Cancelled
type StepState string

// The step states. A step that was undone keeps the state it ended in: the rollback steps
// that undid it are listed after it, each with its own state.
const (
	StepPending   StepState = "Pending"
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
}

// WorkflowStatus is the status every workflow kind shares.
type WorkflowStatus struct {
	// phase is the workflow's coarse state.
	// +optional
	Phase WorkflowPhase `json:"phase,omitempty"`

	// steps lists the workflow's steps in the order they run, each with its evidence.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
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

	// conditions describe the workflow's current state in detail.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AnnotationRequestedBy is stamped on every Nodewright object by the mutating admission
// webhook: the Kubernetes user who created it, as the API server authenticated them. The
// webhook sets it on create and keeps it unchanged on every update, so no user can forge or
// rewrite it; the audit trail names this user as the one who asked.
const AnnotationRequestedBy = "nodewright.spectrocloud.com/requested-by"
