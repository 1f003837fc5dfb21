package osupgrade

import (
	"fmt"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Progress is where a policy stands, for a person: what `kubectl nodewright os watch` and the
// web UI show. It is derived from the policy's spec, annotations and status alone, and decides
// nothing.
type Progress struct {
	// Nodes are the policy's nodes in their order, as status.nodes has them; before the
	// Preflight recorded them, spec.nodeOrder's, Pending.
	Nodes []nwv1.NodeOSUpgrade `json:"nodes"`
	// HeldNodes are the selected nodes the policy leaves alone, with why (status.held);
	// Gating.Held is the gate that holds the next step.
	HeldNodes []nwv1.OSNodeHold `json:"heldNodes,omitempty"`
	// Gating is the step that runs or waits, the gate that holds it, what a person may
	// approve and the step that failed.
	workflow.Gating
	// CurrentPosition is the position of Current's node; 0 for the Preflight, the Recovery or
	// none.
	CurrentPosition int `json:"currentPosition,omitempty"`
	// FailedPosition is the position of Failed's node (0 for the Preflight or the Recovery).
	FailedPosition int `json:"failedPosition,omitempty"`
	// Done counts the nodes Done, of Total.
	Done  int `json:"done"`
	Total int `json:"total"`
	// FellBack names the nodes whose boot of the image fell back.
	FellBack []string `json:"fellBack,omitempty"`
	// Acknowledged are the nodes the acknowledge-fallback annotation names, and AcknowledgedBy
	// who set it as the admission webhook stamped it.
	Acknowledged   []string `json:"acknowledged,omitempty"`
	AcknowledgedBy string   `json:"acknowledgedBy,omitempty"`
}

// ProgressOf is where p stands.
func ProgressOf(p *nwv1.OSVersionPolicy) Progress {
	st := &p.Status.WorkflowStatus
	out := Progress{HeldNodes: p.Status.Held, Acknowledged: Acknowledged(p), AcknowledgedBy: p.Annotations[nwv1.AnnotationAcknowledgedBy]}
	if len(p.Status.Nodes) > 0 {
		out.Nodes = append([]nwv1.NodeOSUpgrade(nil), p.Status.Nodes...)
	} else {
		for i, n := range p.Spec.NodeOrder {
			out.Nodes = append(out.Nodes, nwv1.NodeOSUpgrade{Name: n, Position: int32(i + 1), Phase: nwv1.NodeOSPending})
		}
	}
	for _, n := range out.Nodes {
		switch n.Phase {
		case nwv1.NodeOSDone:
			out.Done++
		case nwv1.NodeOSFellBack:
			out.FellBack = append(out.FellBack, n.Name)
		}
	}
	out.Total = len(out.Nodes)
	out.Gating = workflow.GatingOf(PlanOf(p), p.Spec.Approval, p.Annotations, st)
	if out.Current != nil {
		out.CurrentPosition, _ = ParseStep(Step(out.Current.Name))
	}
	if out.Failed != nil {
		out.FailedPosition, _ = ParseStep(Step(out.Failed.Name))
	}
	return out
}

// NodeAt is the node at position (from 1), and whether there is one.
func (p Progress) NodeAt(position int) (nwv1.NodeOSUpgrade, bool) {
	for _, n := range p.Nodes {
		if int(n.Position) == position {
			return n, true
		}
	}
	return nwv1.NodeOSUpgrade{}, false
}

// NodeName names the node at position for a message: "edge-2 (2 of 3)".
func (p Progress) NodeName(position int) string {
	if n, ok := p.NodeAt(position); ok {
		return fmt.Sprintf("%s (%d of %d)", n.Name, position, p.Total)
	}
	return fmt.Sprintf("position %d", position)
}
