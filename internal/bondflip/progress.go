package bondflip

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Progress is where a flip stands, for a person: what `kubectl nodewright flip watch` and
// the web UI show. It is derived from the flip's spec, annotations and status alone, and
// decides nothing.
type Progress struct {
	// Nodes are the flip's nodes in their order.
	Nodes []NodeProgress `json:"nodes"`
	// Current is the step now running, else the one a gate holds (Waiting); nil for none.
	Current *nwv1.WorkflowStep `json:"current,omitempty"`
	// CurrentPosition is the position of Current's node; 0 for the Preflight or none.
	CurrentPosition int `json:"currentPosition,omitempty"`
	// Held is the Held condition while it is True and the flip has not ended: which gate holds
	// the next step, and why.
	Held *metav1.Condition `json:"held,omitempty"`
	// Approvable is the step waiting that a person may approve: the flip is Manual, the step
	// is one the approval gate holds (a node's first), and it is not approved yet; "" when
	// there is none.
	Approvable string `json:"approvable,omitempty"`
	// Approved is the step waiting once it is approved, and ApprovedBy who approved it, as
	// the admission webhook stamped them ("" when it did not).
	Approved   string `json:"approved,omitempty"`
	ApprovedBy string `json:"approvedBy,omitempty"`
	// Failed is the forward step whose failure (or cancellation) started the rollback of a
	// flip that rolled back or failed, and FailedPosition its node (0 for the Preflight).
	Failed         *nwv1.WorkflowStep `json:"failed,omitempty"`
	FailedPosition int                `json:"failedPosition,omitempty"`
}

// NodeProgress is one node of a flip.
type NodeProgress struct {
	Position int    `json:"position"`
	Name     string `json:"name"`
	// Previous is the mode the node had before it was changed, once recorded; Current the
	// mode its agent last reported.
	Previous nwv1.BondMode      `json:"previous,omitempty"`
	Current  nwv1.BondMode      `json:"current,omitempty"`
	State    nwv1.NodeFlipState `json:"state"`
}

// ProgressOf is where f stands. Each node is as status.nodes has it (the controller's view of
// its steps and what its agent reported), else named by spec.nodeOrder with its state derived
// from its steps (NodeState); a position neither names is "-".
func ProgressOf(f *nwv1.BondModeFlipPlan) Progress {
	st := &f.Status.WorkflowStatus
	n := len(f.Spec.NodeOrder)
	for _, node := range f.Status.Nodes {
		n = max(n, int(node.Position))
	}
	for _, s := range st.Steps {
		if k, _, ok := ParseStep(Step(s.Name)); ok {
			n = max(n, k)
		}
	}
	p := Progress{Nodes: make([]NodeProgress, n)}
	for i := range p.Nodes {
		p.Nodes[i] = NodeProgress{Position: i + 1, Name: "-", State: NodeState(st, i+1)}
		if i < len(f.Spec.NodeOrder) {
			p.Nodes[i].Name = f.Spec.NodeOrder[i]
		}
	}
	for _, node := range f.Status.Nodes {
		if node.Position >= 1 && int(node.Position) <= n {
			p.Nodes[node.Position-1] = NodeProgress{Position: int(node.Position), Name: node.Name,
				Previous: node.PreviousMode, Current: node.CurrentMode, State: node.State}
		}
	}

	for _, state := range []nwv1.StepState{nwv1.StepRunning, nwv1.StepWaiting} {
		for i := range st.Steps {
			if p.Current == nil && st.Steps[i].State == state {
				p.Current = st.Steps[i].DeepCopy()
				p.CurrentPosition, _, _ = ParseStep(Step(p.Current.Name))
			}
		}
	}
	if held := meta.FindStatusCondition(st.Conditions, nwv1.ConditionHeld); held != nil && held.Status == metav1.ConditionTrue && !st.Phase.Finished() {
		p.Held = held.DeepCopy()
	}
	if c := p.Current; c != nil && c.State == nwv1.StepWaiting && f.Spec.Approval == nwv1.ApprovalManual &&
		(Plan{}).Gates(Step(c.Name)).Has(workflow.GateApproval) {
		if f.Annotations[nwv1.AnnotationApprove] == c.Name {
			p.Approved, p.ApprovedBy = c.Name, f.Annotations[nwv1.AnnotationApprovedBy]
		} else {
			p.Approvable = c.Name
		}
	}
	if st.Phase == nwv1.WorkflowRolledBack || st.Phase == nwv1.WorkflowFailed || st.Phase == nwv1.WorkflowRollingBack {
		for i := range st.Steps {
			if s := st.Steps[i]; s.State == nwv1.StepFailed || s.State == nwv1.StepCancelled {
				p.Failed = s.DeepCopy()
				p.FailedPosition, _, _ = ParseStep(Step(s.Name))
				break
			}
		}
	}
	return p
}
