package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VMOperation is one of the safe operations a VM's owner may ask for on their own VM
// (docs/selfservice.md).
// +kubebuilder:validation:Enum=SnapshotNow;Restore;Restart;MigrateVolume
type VMOperation string

// The operations.
const (
	// VMSnapshotNow takes a VirtualMachineSnapshot of the VM now, judged good by the rules of
	// the VMSnapshotPolicy that selects the VM (or the defaults: GuestAgent, 10m).
	VMSnapshotNow VMOperation = "SnapshotNow"
	// VMRestore restores the VM from one of its own snapshots that is judged good: the VM is
	// stopped, restored, and started again if it ran.
	VMRestore VMOperation = "Restore"
	// VMRestart restarts the VM: it is stopped (run strategy Halted) and started again with
	// the run strategy it had, and a new VirtualMachineInstance runs.
	VMRestart VMOperation = "Restart"
	// VMMigrateVolume moves one of the VM's volumes to a StorageClass the policy allows, with a
	// VMVolumeMigration: Hot where the source's backend can clone within its CSI driver, else
	// Cold.
	VMMigrateVolume VMOperation = "MigrateVolume"
)

// VMOperations are the operations, in the order the docs list them.
var VMOperations = []VMOperation{VMSnapshotNow, VMRestore, VMRestart, VMMigrateVolume}

// The labels a VMOperationRequest puts on what it makes (a snapshot, a restore, a volume
// migration), with app.kubernetes.io/managed-by. A migration's own requested-by stamp names
// the operator, which made it; these name the request, and so its requester.
const (
	// LabelVMOperationRequest names the request that made the object.
	LabelVMOperationRequest = "nodewright.spectrocloud.com/vm-operation-request"
	// LabelVMOperationRequestUID is the UID of the request that made it: a request deleted
	// and made again under the same name does not take over the old one's objects.
	LabelVMOperationRequestUID = "nodewright.spectrocloud.com/vm-operation-request-uid"
)

// RequestUser is the user who created a request, as the API server authenticated them: the
// admission webhook writes it, whatever the request said, as the API server does for a
// CertificateSigningRequest's spec.username. The controller asks the API server again,
// with a SubjectAccessReview as this user, before it acts.
type RequestUser struct {
	// username of the user.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Username string `json:"username"`
	// uid of the user, when the authenticator gives one.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	UID string `json:"uid,omitempty"`
	// groups the user is in.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=1024
	Groups []string `json:"groups,omitempty"`
	// extra holds the authenticator's other attributes of the user (scopes, say), which
	// authorization may read.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Extra map[string]ExtraValue `json:"extra,omitempty"`
}

// ExtraValue is one attribute's values in RequestUser.extra.
// +kubebuilder:validation:MaxItems=16
// +kubebuilder:validation:items:MaxLength=1024
type ExtraValue []string

// VMOperationParams are the operation's parameters.
type VMOperationParams struct {
	// snapshot is, for Restore, the VirtualMachineSnapshot of the VM to restore from, in the
	// request's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Snapshot string `json:"snapshot,omitempty"`

	// volume is, for MigrateVolume, the VM's volume to move (its name in
	// spec.template.spec.volumes).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Volume string `json:"volume,omitempty"`

	// storageClass is, for MigrateVolume, the StorageClass to move it to: one the
	// SelfServicePolicy lists.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClass string `json:"storageClass,omitempty"`
}

// VMOperationRequestSpec is what a VM's owner asks for. It cannot change once made.
// +kubebuilder:validation:XValidation:rule="self.operation != 'Restore' || (has(self.params) && has(self.params.snapshot))",message="params.snapshot: a Restore names the snapshot of the VM to restore from",fieldPath=".params.snapshot"
// +kubebuilder:validation:XValidation:rule="self.operation == 'Restore' || !has(self.params) || !has(self.params.snapshot)",message="params.snapshot: only a Restore names a snapshot",fieldPath=".params.snapshot"
// +kubebuilder:validation:XValidation:rule="self.operation != 'MigrateVolume' || (has(self.params) && has(self.params.volume) && has(self.params.storageClass))",message="params: a MigrateVolume names the volume and the storageClass to move it to",fieldPath=".params"
// +kubebuilder:validation:XValidation:rule="self.operation == 'MigrateVolume' || !has(self.params) || (!has(self.params.volume) && !has(self.params.storageClass))",message="params: only a MigrateVolume names a volume and a storageClass",fieldPath=".params"
type VMOperationRequestSpec struct {
	// operation is what is asked: SnapshotNow, Restore, Restart or MigrateVolume.
	// +required
	Operation VMOperation `json:"operation"`

	// vm is the KubeVirt VirtualMachine, in the request's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	VM string `json:"vm"`

	// params are the operation's parameters.
	// +optional
	// +kubebuilder:default={}
	Params VMOperationParams `json:"params,omitzero"`

	// reason says why, for the audit trail and the administrator who approves.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// requester is who created the request, written by the admission webhook whatever the
	// request said.
	// +optional
	Requester *RequestUser `json:"requester,omitempty"`
}

// VMOperationPhase is a request's coarse state.
// +kubebuilder:validation:Enum=Pending;Waiting;Running;Succeeded;Failed;Refused
type VMOperationPhase string

// The phases.
const (
	// VMOperationPending: the controller has not looked at it yet.
	VMOperationPending VMOperationPhase = "Pending"
	// VMOperationWaiting: nothing of it has been done; status.blockedBy says what it waits
	// for.
	VMOperationWaiting VMOperationPhase = "Waiting"
	// VMOperationRunning: it is being done; status.step says which part.
	VMOperationRunning   VMOperationPhase = "Running"
	VMOperationSucceeded VMOperationPhase = "Succeeded"
	// VMOperationFailed: it started and did not end well; status.message says what state the
	// VM is in.
	VMOperationFailed VMOperationPhase = "Failed"
	// VMOperationRefused: nothing was done, and nothing will be: the requester may not ask
	// for it, the self-service policy does not offer it, or the VM or snapshot is not one it
	// can be done with.
	VMOperationRefused VMOperationPhase = "Refused"
)

// The parts of a running request (status.step).
const (
	// StepStopVM: a Restore or a Restart stops the VM (its run strategy Halted) and waits for its
	// VirtualMachineInstance to go.
	StepStopVM = "StopVM"
	// StepRestoreVM: a Restore's VirtualMachineRestore is made and waited for.
	StepRestoreVM = "RestoreVM"
	// StepGiveBack: a Restore or a Restart that cannot go on gives the VM its run strategy
	// back, and fails saying why (status.message).
	StepGiveBack = "GiveBack"
	// StepStartVM: a Restore or a Restart gives the VM back the run strategy it had; a
	// Restart waits for a new VirtualMachineInstance to run.
	StepStartVM = "StartVM"
	// StepSnapshotVM: a SnapshotNow's VirtualMachineSnapshot is made and waited for.
	StepSnapshotVM = "SnapshotVM"
	// StepMigrateVolume: a MigrateVolume's VMVolumeMigration is made and waited for.
	StepMigrateVolume = "MigrateVolume"
)

// The conditions of a VMOperationRequest.
const (
	// ConditionAuthorized: the requester may ask for the operation on the VM: both
	// SubjectAccessReviews allowed it, at admission and when the controller last looked.
	ConditionAuthorized = "Authorized"
	// ConditionApproved: an administrator approved the request, or the policy needs no
	// approval.
	ConditionApproved = "Approved"
)

// Approval states of a request (status.approval).
const (
	ApprovalNotRequired = "NotRequired"
	ApprovalRequired    = "Required"
	ApprovalGiven       = "Approved"
)

// VMOperationRequestStatus says what the request waits for, what it did, and the state the VM
// is in.
type VMOperationRequestStatus struct {
	// phase is the request's coarse state.
	// +optional
	Phase VMOperationPhase `json:"phase,omitempty"`

	// step is the part of the operation under way or last done.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Step string `json:"step,omitempty"`

	// queuePosition is the request's place among the namespace's unfinished requests, oldest
	// first: 1 runs next. Zero once it runs or ended.
	// +optional
	QueuePosition int32 `json:"queuePosition,omitempty"`

	// approval is NotRequired, Required (waiting for an administrator) or Approved.
	// +optional
	// +kubebuilder:validation:Enum=NotRequired;Required;Approved
	Approval string `json:"approval,omitempty"`

	// approvedBy is the administrator who approved it, as the admission webhook stamped them.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ApprovedBy string `json:"approvedBy,omitempty"`

	// window is the maintenance window the operation runs in, as the policy says it; empty:
	// any time.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Window string `json:"window,omitempty"`

	// nextWindowStart is when the window next opens, while it is closed.
	// +optional
	NextWindowStart *metav1.Time `json:"nextWindowStart,omitempty"`

	// blockedBy lists, while it waits, everything that holds it now.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=1024
	BlockedBy []string `json:"blockedBy,omitempty"`

	// snapshot is the VirtualMachineSnapshot a SnapshotNow made.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Snapshot string `json:"snapshot,omitempty"`

	// restore is the VirtualMachineRestore a Restore made.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Restore string `json:"restore,omitempty"`

	// migration is the VMVolumeMigration a MigrateVolume made.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Migration string `json:"migration,omitempty"`

	// runStrategy is the run strategy the VM had before a Restore stopped it, given back once
	// it is restored.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RunStrategy string `json:"runStrategy,omitempty"`

	// vmUID is the UID of the VM the request started on: every later step checks it is still
	// that VM, not one made again under its name.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	VMUID string `json:"vmUID,omitempty"`

	// restartedVMI is the UID of the VirtualMachineInstance a Restart stopped: it is done
	// when another runs.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	RestartedVMI string `json:"restartedVMI,omitempty"`

	// message says, for a person, what it did, what it waits for, or why it failed and the
	// state the VM is in.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`

	// startTime is when it began to run.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when it Succeeded, Failed or was Refused.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// observedGeneration is the metadata.generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Authorized and Approved.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VMOperationRequest asks for one safe operation on one VM of its namespace: a snapshot now, a
// restore from one of the VM's own snapshots, a restart, or a move of one of its volumes to
// another StorageClass. A VM's owner with the edit role in
// the namespace may make one; the SelfServicePolicy says whether it needs an administrator's
// approval, when it runs, and how often. It never holds up cluster-wide node work: it waits
// for it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=vmopr;vmop,categories=nodewright
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.operation`
// +kubebuilder:printcolumn:name="VM",type=string,JSONPath=`.spec.vm`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.step`
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queuePosition`
// +kubebuilder:printcolumn:name="Approval",type=string,JSONPath=`.status.approval`
// +kubebuilder:printcolumn:name="Requester",type=string,JSONPath=`.spec.requester.username`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Blocked By",type=string,JSONPath=`.status.blockedBy[0]`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
type VMOperationRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec cannot change: make a new request"
	Spec VMOperationRequestSpec `json:"spec"`
	// +optional
	Status VMOperationRequestStatus `json:"status,omitzero"`
}

// VMOperationRequestList is a list of VMOperationRequest.
// +kubebuilder:object:root=true
type VMOperationRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VMOperationRequest `json:"items"`
}

// SelfServicePolicyName is the name of the one SelfServicePolicy.
const SelfServicePolicyName = "default"

// SelfServiceRate bounds how many requests of an operation start in a namespace per period.
type SelfServiceRate struct {
	// requests is how many may start in any one period.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Requests int32 `json:"requests"`
	// period is the period, between 1m and 168h.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('168h'))",message="must be between 1m and 168h"
	Period metav1.Duration `json:"period"`
}

// SelfServiceOperation is what the policy says of one operation.
// +kubebuilder:validation:XValidation:rule="self.operation == 'MigrateVolume' || !has(self.storageClasses)",message="storageClasses: only a MigrateVolume has them",fieldPath=".storageClasses"
// +kubebuilder:validation:XValidation:rule="self.operation != 'MigrateVolume' || (has(self.storageClasses) && size(self.storageClasses) > 0)",message="storageClasses: a MigrateVolume lists the StorageClasses a volume may be moved to",fieldPath=".storageClasses"
type SelfServiceOperation struct {
	// operation is SnapshotNow, Restore, Restart or MigrateVolume.
	// +required
	Operation VMOperation `json:"operation"`

	// approval is Automatic (default: a request runs once its other gates allow) or Manual
	// (an administrator approves each request: the annotation
	// nodewright.spectrocloud.com/approve set to the operation's name; never by the
	// requester).
	// +optional
	// +kubebuilder:default=Automatic
	Approval Approval `json:"approval,omitempty"`

	// maintenanceWindow is when a request may start; any time when unset.
	// +optional
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`

	// rate bounds how many requests start per period in one namespace; a request over it
	// waits. Unbounded when unset.
	// +optional
	Rate *SelfServiceRate `json:"rate,omitempty"`

	// maxQueued is the most unfinished requests of the operation one namespace may have; one
	// more is refused at creation. Default 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxQueued int32 `json:"maxQueued,omitempty"`

	// storageClasses are, for MigrateVolume, the StorageClasses a volume may be moved to.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	StorageClasses []string `json:"storageClasses,omitempty"`
}

// SelfServicePolicySpec is which operations VM owners may ask for, and under what rules.
type SelfServicePolicySpec struct {
	// namespaceSelector selects the namespaces whose VM owners may make requests; every
	// namespace when unset.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// operations are the operations offered, each with its rules. One not listed is refused.
	// +optional
	// +listType=map
	// +listMapKey=operation
	// +kubebuilder:validation:MaxItems=8
	Operations []SelfServiceOperation `json:"operations,omitempty"`
}

// SelfServicePolicy is the administrator's word on what VM owners may ask for with a
// VMOperationRequest: per operation, whether it needs approval, its maintenance window, its
// rate and queue per namespace. There is one, named default; without it no request runs.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ssp,categories=nodewright
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="metadata.name: there is one SelfServicePolicy, named default"
// +kubebuilder:printcolumn:name="Operations",type=string,JSONPath=`.spec.operations[*].operation`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SelfServicePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SelfServicePolicySpec `json:"spec"`
}

// SelfServicePolicyList is a list of SelfServicePolicy.
// +kubebuilder:object:root=true
type SelfServicePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SelfServicePolicy `json:"items"`
}

// Operation is what the policy says of op; nil when it does not offer it.
func (p *SelfServicePolicy) Operation(op VMOperation) *SelfServiceOperation {
	for i := range p.Spec.Operations {
		if p.Spec.Operations[i].Operation == op {
			return &p.Spec.Operations[i]
		}
	}
	return nil
}

func init() {
	SchemeBuilder.Register(&VMOperationRequest{}, &VMOperationRequestList{}, &SelfServicePolicy{}, &SelfServicePolicyList{})
}
