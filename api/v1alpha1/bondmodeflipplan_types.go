package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VMProtection says what happens to the VMs on a node while its network is reconfigured.
// +kubebuilder:validation:Enum=LiveMigrate;Stop;None
type VMProtection string

// The VM protection policies.
const (
	// VMProtectionLiveMigrate moves the VMs off each node before it is changed. Needs a
	// second node and ReadWriteMany volumes.
	VMProtectionLiveMigrate VMProtection = "LiveMigrate"
	// VMProtectionStop stops the node's VMs before the change and starts them after.
	VMProtectionStop VMProtection = "Stop"
	// VMProtectionNone leaves the VMs running and accepts a short loss of connectivity.
	VMProtectionNone VMProtection = "None"
)

// BondModeFlipPlanSpec says which bond mode to move the cluster to and how carefully.
type BondModeFlipPlanSpec struct {
	// targetMode is the bond mode every node ends with.
	// +required
	TargetMode BondMode `json:"targetMode"`

	// bondInterface is the bond to change. Defaults to the one the site's EdgeProfile names.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`
	BondInterface string `json:"bondInterface,omitempty"`

	// nodeOrder is the order in which nodes are changed, one at a time. Defaults to
	// secondaries and tiebreakers first and the primary last.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	NodeOrder []string `json:"nodeOrder,omitempty"`

	// vmProtection is what happens to a node's VMs while it is changed.
	// +optional
	// +kubebuilder:default=LiveMigrate
	VMProtection VMProtection `json:"vmProtection,omitempty"`

	// connectivityTimeout is how long a node may take to reach its peers again after the
	// change before it is rolled back to its previous mode. Between 10s and 10m.
	// +optional
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('10m'))",message="must be between 10s and 10m"
	ConnectivityTimeout metav1.Duration `json:"connectivityTimeout,omitzero"`

	// approval says whether each step that changes a node waits for a person to approve it.
	// +optional
	// +kubebuilder:default=Automatic
	Approval Approval `json:"approval,omitempty"`

	// maintenanceWindow, when set, is when a step that changes a node may start.
	// +optional
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`
}

// NodeFlipState is where one node stands in a flip. It is derived from the flip's steps for
// that node (docs/decisions/0003): the steps are the state, this is a view of them.
// +kubebuilder:validation:Enum=Pending;InProgress;Done;RollingBack;RolledBack;Failed
type NodeFlipState string

// The node flip states.
const (
	// NodeFlipPending: none of the node's steps has started.
	NodeFlipPending NodeFlipState = "Pending"
	// NodeFlipInProgress: one of the node's forward steps is running, or some have finished
	// and others have not.
	NodeFlipInProgress NodeFlipState = "InProgress"
	// NodeFlipDone: every forward step of the node succeeded: it runs the target mode.
	NodeFlipDone NodeFlipState = "Done"
	// NodeFlipRollingBack: one of the node's rollback steps is running.
	NodeFlipRollingBack NodeFlipState = "RollingBack"
	// NodeFlipRolledBack: the node's rollback steps succeeded: it runs its previous mode.
	NodeFlipRolledBack NodeFlipState = "RolledBack"
	// NodeFlipFailed: a step of the node failed and the node could not be brought back; its
	// currentMode says what it runs, as its agent last reported.
	NodeFlipFailed NodeFlipState = "Failed"
)

// NodeCordon is what a flip did with a node's scheduling.
// +kubebuilder:validation:Enum=Cordoned;Uncordoned;WasCordoned
type NodeCordon string

// The node cordon records.
const (
	// NodeCordoned: the flip made the node unschedulable for its change (the Node carries
	// the annotation nodewright.spectrocloud.com/cordoned-by naming the flip).
	NodeCordoned NodeCordon = "Cordoned"
	// NodeUncordoned: the flip made the node schedulable again after its change.
	NodeUncordoned NodeCordon = "Uncordoned"
	// NodeWasCordoned: the node was unschedulable before the flip (cordoned by someone else):
	// the flip left it alone, and leaves it cordoned.
	NodeWasCordoned NodeCordon = "WasCordoned"
)

// NodeFlipPart is one part of a node's step: each node's step (Node1, say) carries out the
// parts Cordon, ProtectVMs, PauseResync, SetBondMode, Confirm, ResumeResync, Uncordon and
// RestoreVMs in order, and its rollback step (RollbackNode1) those of RollbackCordon,
// RollbackProtectVMs, RollbackBondMode, RollbackUncordon and RollbackVMs it needs. The record is the step's memory of where it is: written in the same
// status patch as the step's own state, it is read back after a restart.
type NodeFlipPart struct {
	// name of the part.
	// +required
	// +kubebuilder:validation:Enum=Cordon;ProtectVMs;PauseResync;SetBondMode;Confirm;ResumeResync;Uncordon;RestoreVMs;RollbackCordon;RollbackProtectVMs;RollbackBondMode;RollbackUncordon;RollbackVMs
	Name string `json:"name"`

	// state of the part: Running while it is under way, then Succeeded, Skipped (nothing to
	// do) or Failed; Cancelled when the flip stopped its step (its deletion) or failed it
	// while the part was under way.
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

// NodeFlip is one node's part in a bond-mode flip: a view of its steps, what was observed of
// it, and the record of its steps' parts.
type NodeFlip struct {
	// name of the node.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// position of the node in the flip's order, from 1: its steps are named after it
	// (Node1, and RollbackNode1 for its rollback).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	Position int32 `json:"position"`

	// previousMode is the mode the node had before, recorded before it was changed; its
	// rollback restores it.
	// +optional
	PreviousMode BondMode `json:"previousMode,omitempty"`

	// currentMode is the mode the node's agent last reported.
	// +optional
	CurrentMode BondMode `json:"currentMode,omitempty"`

	// state of the node's part, derived from its steps.
	// +required
	State NodeFlipState `json:"state"`

	// part is the part of the node's step under way, or the last one that ran: SetBondMode,
	// say, or RollbackBondMode.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Part string `json:"part,omitempty"`

	// cordon says what the flip did with the node's scheduling: Cordoned while it holds the
	// node unschedulable for its change, Uncordoned once it made it schedulable again,
	// WasCordoned when the node was already unschedulable (cordoned by someone else) and was
	// left alone. Empty until the node's Cordon part ran.
	// +optional
	Cordon NodeCordon `json:"cordon,omitempty"`

	// parts records each part the node's steps began, in the order they began: at most the
	// eight forward parts and the five of its rollback.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=13
	Parts []NodeFlipPart `json:"parts,omitempty"`
}

// BondModeFlipPlanStatus is the flip's progress and evidence.
type BondModeFlipPlanStatus struct {
	WorkflowStatus `json:",inline"`

	// currentNode is the node whose step runs or waits, empty when none does.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CurrentNode string `json:"currentNode,omitempty"`

	// progress counts the nodes whose part is Done, of all: "2/3".
	// +optional
	// +kubebuilder:validation:MaxLength=8
	Progress string `json:"progress,omitempty"`

	// nodes lists each node's part, in the order they are changed.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Nodes []NodeFlip `json:"nodes,omitempty"`
}

// BondModeFlipPlan changes the storage bond's mode on every node, one node at a time, with
// the VMs protected and each node rolled back to its previous mode if it loses its peers.
// The spec cannot change once the flip has started.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bmfp;bondflip,categories=nodewright
// +kubebuilder:printcolumn:name="Target Mode",type=string,JSONPath=`.spec.targetMode`
// +kubebuilder:printcolumn:name="VM Protection",type=string,JSONPath=`.spec.vmProtection`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.currentNode`,description="The node being changed or brought back, or waiting to be"
// +kubebuilder:printcolumn:name="Done",type=string,JSONPath=`.status.progress`,description="Nodes on the target mode, of all"
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.steps[?(@.state=="Running")].name`,description="The step now running: Node<i> or RollbackNode<i>"
// +kubebuilder:printcolumn:name="Part",type=string,JSONPath=`.status.nodes[*].parts[?(@.state=="Running")].name`,description="The part of the running step under way"
// +kubebuilder:printcolumn:name="Cordoned",type=string,JSONPath=`.status.nodes[?(@.cordon=="Cordoned")].name`,description="The nodes the flip holds cordoned",priority=1
// +kubebuilder:printcolumn:name="Waiting",type=string,JSONPath=`.status.steps[?(@.state=="Waiting")].name`,description="The step a gate holds"
// +kubebuilder:printcolumn:name="Held By",type=string,JSONPath=`.status.conditions[?(@.type=="Held")].reason`,description="The gate that holds the next step, or GatesOpen"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec",message="spec cannot change once the flip has started",fieldPath=".spec"
type BondModeFlipPlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which bond mode to move to and how carefully.
	// +required
	Spec BondModeFlipPlanSpec `json:"spec"`

	// status is the flip's progress and evidence.
	// +optional
	Status BondModeFlipPlanStatus `json:"status,omitempty"`
}

// BondModeFlipPlanList is a list of BondModeFlipPlan.
//
// +kubebuilder:object:root=true
type BondModeFlipPlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BondModeFlipPlan `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BondModeFlipPlan{}, &BondModeFlipPlanList{})
}
