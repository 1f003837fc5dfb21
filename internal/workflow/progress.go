package workflow

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Gating is where a gated workflow stands for a person: the step that runs or waits, the
// gate that holds it, whether a person may approve it, and the step that failed. The watch
// commands and the web UI show it; it is derived from the workflow's approval policy,
// annotations and status alone, and decides nothing.
type Gating struct {
	// Current is the step now running, else the one a gate holds (Waiting); nil for none.
	Current *nwv1.WorkflowStep `json:"current,omitempty"`
	// Held is the Held condition while it is True and the workflow has not ended: which gate
	// holds the next step, and why.
	Held *metav1.Condition `json:"held,omitempty"`
	// Approvable is the step waiting that a person may approve: the workflow is Manual, the
	// step is one the approval gate holds, and it is not approved yet; "" when there is none.
	Approvable string `json:"approvable,omitempty"`
	// Approved is the step waiting once it is approved, and ApprovedBy who approved it, as
	// the admission webhook stamped them ("" when it did not).
	Approved   string `json:"approved,omitempty"`
	ApprovedBy string `json:"approvedBy,omitempty"`
	// Failed is the forward step whose failure (or cancellation) started the rollback of a
	// workflow that rolls back, rolled back or failed.
	Failed *nwv1.WorkflowStep `json:"failed,omitempty"`
}

// GatingOf is where the workflow with status st, approval policy approval and annotations
// stands, its steps gated as p says.
func GatingOf(p GatedPlan, approval nwv1.Approval, annotations map[string]string, st *nwv1.WorkflowStatus) Gating {
	var g Gating
	for _, state := range []nwv1.StepState{nwv1.StepRunning, nwv1.StepWaiting} {
		for i := range st.Steps {
			if g.Current == nil && st.Steps[i].State == state {
				g.Current = st.Steps[i].DeepCopy()
			}
		}
	}
	if held := meta.FindStatusCondition(st.Conditions, nwv1.ConditionHeld); held != nil && held.Status == metav1.ConditionTrue && !st.Phase.Finished() {
		g.Held = held.DeepCopy()
	}
	if c := g.Current; c != nil && c.State == nwv1.StepWaiting && approval == nwv1.ApprovalManual && p.Gates(Step(c.Name)).Has(GateApproval) {
		if annotations[nwv1.AnnotationApprove] == c.Name {
			g.Approved, g.ApprovedBy = c.Name, annotations[nwv1.AnnotationApprovedBy]
		} else {
			g.Approvable = c.Name
		}
	}
	if st.Phase == nwv1.WorkflowRolledBack || st.Phase == nwv1.WorkflowFailed || st.Phase == nwv1.WorkflowRollingBack {
		for i := range st.Steps {
			if s := st.Steps[i]; s.State == nwv1.StepFailed || s.State == nwv1.StepCancelled {
				g.Failed = s.DeepCopy()
				break
			}
		}
	}
	return g
}
