package bondflip

import (
	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Progress is where a flip stands, for a person: what `kubectl nodewright flip watch` and
// the web UI show. It is derived from the flip's spec, annotations and status alone, and
// decides nothing.
type Progress struct {
	// Nodes are the flip's nodes in their order.
	Nodes []NodeProgress `json:"nodes"`
	// Gating is the step that runs or waits, the gate that holds it, what a person may
	// approve and the step that failed. Approvable is a node's first step: the one the
	// approval gate holds.
	workflow.Gating
	// CurrentPosition is the position of Current's node; 0 for the Preflight or none.
	CurrentPosition int `json:"currentPosition,omitempty"`
	// FailedPosition is the position of Failed's node (0 for the Preflight).
	FailedPosition int `json:"failedPosition,omitempty"`
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
	// Part is the part of its step under way, or the last that ran (status.nodes[].part;
	// status.nodes[].parts has the record of each).
	Part string `json:"part,omitempty"`
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
				Previous: node.PreviousMode, Current: node.CurrentMode, State: node.State, Part: node.Part}
		}
	}

	p.Gating = workflow.GatingOf(Plan{}, f.Spec.Approval, f.Annotations, st)
	if p.Current != nil {
		p.CurrentPosition, _, _ = ParseStep(Step(p.Current.Name))
	}
	if p.Failed != nil {
		p.FailedPosition, _, _ = ParseStep(Step(p.Failed.Name))
	}
	return p
}
