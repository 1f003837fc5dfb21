package replupgrade

import (
	"slices"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Progress is where an upgrade stands, for a person: what `kubectl nodewright upgrade watch`
// and the web UI show. It is derived from the upgrade's spec, annotations and status alone,
// and decides nothing.
type Progress struct {
	// Stages are the six forward steps in order, each as status.steps has it; Pending (with
	// no times) until the status lists it.
	Stages []nwv1.WorkflowStep `json:"stages"`
	// Rollback are the rollback steps the status lists, in its order: what a rollback runs, or
	// ran. None unless the upgrade rolls back.
	Rollback []nwv1.WorkflowStep `json:"rollback,omitempty"`
	// Gating is the step that runs or waits, the gate that holds it, what a person may
	// approve (a stage that changes the nodes: Place, Verify, Quorum, ReleaseTaints) and the
	// stage that failed.
	workflow.Gating
	// Stage is the position (1 to 6) of Current when it is a stage; 0 otherwise.
	Stage int `json:"stage,omitempty"`
	// FailedStage is the position of Failed; 0 when none failed.
	FailedStage int `json:"failedStage,omitempty"`
}

// StagePosition is where step stands among the stages, from 1; 0 when it is not one.
func StagePosition(step string) int {
	return slices.Index(forward, Step(step)) + 1
}

// ProgressOf is where u stands.
func ProgressOf(u *nwv1.ReplicationUpgrade) Progress {
	st := &u.Status.WorkflowStatus
	p := Progress{Stages: make([]nwv1.WorkflowStep, len(forward))}
	for i, s := range forward {
		p.Stages[i] = nwv1.WorkflowStep{Name: string(s), State: nwv1.StepPending}
	}
	for _, s := range st.Steps {
		if k := StagePosition(s.Name); k > 0 {
			p.Stages[k-1] = *s.DeepCopy()
		} else {
			p.Rollback = append(p.Rollback, *s.DeepCopy())
		}
	}
	p.Gating = workflow.GatingOf(Plan{}, u.Spec.Approval, u.Annotations, st)
	if p.Current != nil {
		p.Stage = StagePosition(p.Current.Name)
	}
	if p.Failed != nil {
		p.FailedStage = StagePosition(p.Failed.Name)
	}
	return p
}
