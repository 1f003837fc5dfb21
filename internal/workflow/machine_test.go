package workflow_test

import (
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// twoSteps changes something, then commits it past undoing.
type twoSteps struct{}

func (twoSteps) Forward() []workflow.Step { return []workflow.Step{"Change", "Commit"} }
func (twoSteps) Rollback(f workflow.Step) []workflow.Step {
	if f == "Change" {
		return []workflow.Step{"Revert"}
	}
	return nil
}
func (twoSteps) Irreversible(s workflow.Step) bool { return s == "Commit" }

func TestPaths(t *testing.T) {
	p := twoSteps{}
	run := func(s workflow.State, events ...workflow.Event) workflow.State {
		t.Helper()
		for _, e := range events {
			next, err := workflow.Next(p, s, e)
			if err != nil {
				t.Fatalf("%s + %s: %v", s, e, err)
			}
			s = next
		}
		return s
	}
	running := func(step workflow.Step) workflow.State {
		return workflow.State{Phase: nwv1.WorkflowRunning, Step: step}
	}
	for _, tc := range []struct {
		name   string
		events []workflow.Event
		want   workflow.State
	}{
		{"every step succeeds", []workflow.Event{workflow.Start, workflow.StepSucceeded, workflow.StepSucceeded},
			workflow.State{Phase: nwv1.WorkflowSucceeded}},
		{"cancelled before it starts", []workflow.Event{workflow.Cancel}, workflow.State{Phase: nwv1.WorkflowRolledBack}},
		{"the change fails", []workflow.Event{workflow.Start, workflow.StepFailed},
			workflow.State{Phase: nwv1.WorkflowRollingBack, Step: "Revert", FailedStep: "Change"}},
		{"the change fails and is reverted", []workflow.Event{workflow.Start, workflow.StepFailed, workflow.StepSucceeded},
			workflow.State{Phase: nwv1.WorkflowRolledBack, FailedStep: "Change"}},
		{"the revert fails", []workflow.Event{workflow.Start, workflow.StepFailed, workflow.StepFailed},
			workflow.State{Phase: nwv1.WorkflowFailed, Step: "Revert", FailedStep: "Change"}},
		{"a cancellation during the revert waits for it", []workflow.Event{workflow.Start, workflow.Cancel, workflow.Cancel},
			workflow.State{Phase: nwv1.WorkflowRollingBack, Step: "Revert", FailedStep: "Change"}},
		{"the commit fails: nothing is undone", []workflow.Event{workflow.Start, workflow.StepSucceeded, workflow.StepFailed},
			workflow.State{Phase: nwv1.WorkflowFailed, FailedStep: "Commit"}},
		{"a cancellation during the commit waits for it", []workflow.Event{workflow.Start, workflow.StepSucceeded, workflow.Cancel},
			running("Commit")},
	} {
		if got := run(workflow.Pending, tc.events...); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if got, err := workflow.Next(p, running("Revert"), workflow.StepSucceeded); err == nil {
		t.Errorf("a rollback step run forward was accepted: %s", got)
	}
	if got := len(workflow.Reachable(p)); got != 9 {
		// Pending, Running at each step, Succeeded, RolledBack when cancelled before the
		// start, RollingBack at Revert and RolledBack after Change, Failed at Revert, Failed
		// at Commit.
		t.Errorf("%d reachable states, want 9", got)
	}
}

// Every phase is exactly one of Pending, active and finished, and the machine's states agree.
func TestPhasesArePendingActiveOrFinished(t *testing.T) {
	for _, p := range []nwv1.WorkflowPhase{nwv1.WorkflowPending, nwv1.WorkflowRunning, nwv1.WorkflowSucceeded,
		nwv1.WorkflowFailed, nwv1.WorkflowRollingBack, nwv1.WorkflowRolledBack} {
		n := 0
		for _, holds := range []bool{p == nwv1.WorkflowPending, p.Active(), p.Finished()} {
			if holds {
				n++
			}
		}
		if n != 1 {
			t.Errorf("phase %s: Pending %t, Active %t, Finished %t; want exactly one", p, p == nwv1.WorkflowPending, p.Active(), p.Finished())
		}
	}
	for _, s := range workflow.Reachable(twoSteps{}) {
		if s.Phase.Active() != (workflow.Action(s) != "") {
			t.Errorf("%s: Active %t but the action is %q", s, s.Phase.Active(), workflow.Action(s))
		}
	}
}
