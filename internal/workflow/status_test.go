package workflow_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

var auditSubject = audit.Subject{Kind: "Test", Name: "t", UID: "00000000-0000-4000-8000-000000000002"}

var kind = workflow.Kind{Name: "Test", AuditAction: "TestTransition", Succeeded: "it is done",
	RolledBack: "rolled back: all as before", Cancelled: "the test was deleted"}

// step runs one event on the status, as a controller does, and returns the new state.
func step(t *testing.T, st *nwv1.WorkflowStatus, e workflow.Event, message string) workflow.State {
	t.Helper()
	p := twoSteps{}
	from := workflow.StateOf(st, p)
	to, err := workflow.Next(p, from, e)
	if err != nil {
		t.Fatal(err)
	}
	workflow.Transition(st, p, kind, 3, from, to, e, message, false, metav1.NewTime(time.Unix(1_800_000_000, 0)))
	return to
}

func states(st *nwv1.WorkflowStatus) string {
	var out []string
	for _, s := range st.Steps {
		out = append(out, s.Name+"="+string(s.State))
	}
	return strings.Join(out, " ")
}

// A cancellation is recorded as such: the step it stopped is Cancelled (not Failed with a
// message that says so), the condition's reason is Cancelled, and the audit records name the
// event Cancel.
func TestACancellationIsTyped(t *testing.T) {
	st := &nwv1.WorkflowStatus{}
	step(t, st, workflow.Start, "started")
	step(t, st, workflow.Cancel, "")
	if got := states(st); got != "Change=Cancelled Commit=Skipped Revert=Running" {
		t.Errorf("steps %s", got)
	}
	step(t, st, workflow.StepSucceeded, "reverted")
	c := meta.FindStatusCondition(st.Conditions, nwv1.ConditionSucceeded)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != nwv1.ReasonCancelled || c.ObservedGeneration != 3 ||
		c.Message != "step Change was cancelled: the test was deleted; rolled back: all as before" {
		t.Errorf("Succeeded condition %+v", c)
	}
	if s := workflow.StateOf(st, twoSteps{}); s != (workflow.State{Phase: nwv1.WorkflowRolledBack, FailedStep: "Change"}) {
		t.Errorf("reads back as %s", s)
	}
	var events []string
	for _, r := range workflow.Records(st, twoSteps{}, kind, auditSubject, "tester") {
		events = append(events, r.Reason)
	}
	if got := strings.Join(events, " "); got != "Start Cancel StepSucceeded" {
		t.Errorf("records of %s, want Start Cancel StepSucceeded", got)
	}
}

// A kind whose RolledBackAs speaks says what it says once rolled back; when it says nothing,
// RolledBack holds.
func TestARollbackSaysWhatTheKindSeesInTheStatus(t *testing.T) {
	k := kind
	k.RolledBackAs = func(st *nwv1.WorkflowStatus) string {
		for _, s := range st.Steps {
			if strings.Contains(s.Message, "the thing is gone") {
				return "rolled back without the thing"
			}
		}
		return ""
	}
	for _, c := range []struct{ revert, want string }{
		{"the thing is gone: nothing to revert", "step Change failed: refused; rolled back without the thing"},
		{"reverted", "step Change failed: refused; rolled back: all as before"},
	} {
		st := &nwv1.WorkflowStatus{}
		p := twoSteps{}
		for _, e := range []struct {
			event   workflow.Event
			message string
		}{{workflow.Start, "started"}, {workflow.StepFailed, "refused"}, {workflow.StepSucceeded, c.revert}} {
			from := workflow.StateOf(st, p)
			to, err := workflow.Next(p, from, e.event)
			if err != nil {
				t.Fatal(err)
			}
			workflow.Transition(st, p, k, 3, from, to, e.event, e.message, false, metav1.NewTime(time.Unix(1_800_000_000, 0)))
		}
		c0 := meta.FindStatusCondition(st.Conditions, nwv1.ConditionSucceeded)
		if st.Phase != nwv1.WorkflowRolledBack || c0 == nil || c0.Message != c.want {
			t.Errorf("phase %s, Succeeded condition %+v; want %q", st.Phase, c0, c.want)
		}
	}
}

// A failure names its step as the reason, and the rollback step that failed after it.
func TestAFailureNamesItsStep(t *testing.T) {
	st := &nwv1.WorkflowStatus{}
	step(t, st, workflow.Start, "started")
	step(t, st, workflow.StepFailed, "the change was refused")
	step(t, st, workflow.StepFailed, "the revert was refused")
	c := meta.FindStatusCondition(st.Conditions, nwv1.ConditionSucceeded)
	if c == nil || c.Reason != "ChangeFailed" || !strings.Contains(c.Message, "then rollback step Revert failed: the revert was refused") {
		t.Errorf("Succeeded condition %+v", c)
	}
	if st.Phase != nwv1.WorkflowFailed || st.CompletionTime == nil {
		t.Errorf("phase %s, completion %v", st.Phase, st.CompletionTime)
	}
}

// A step's message is cut between characters: written again with the same long text, it is
// the same, so the status is not rewritten on every reconcile.
func TestAStepMessageIsCutBetweenCharacters(t *testing.T) {
	st := &nwv1.WorkflowStatus{}
	step(t, st, workflow.Start, "started")
	long := strings.Repeat("é", workflow.MaxStepMessageBytes) // two bytes each: a cut by bytes could split one
	if !workflow.StepMessage(st, "Change", long) {
		t.Fatal("the first message did not change the status")
	}
	got := st.Steps[0].Message
	if len(got) > workflow.MaxStepMessageBytes || !utf8.ValidString(got) {
		t.Errorf("message of %d bytes, valid UTF-8 %t", len(got), utf8.ValidString(got))
	}
	if workflow.StepMessage(st, "Change", long) {
		t.Error("the same message written again changed the status")
	}
}

// A cancellation whose rollback then failed names the failed step as the reason: a person
// must look, which "Cancelled" would not say.
func TestACancelledWorkflowThatFailedNamesTheStep(t *testing.T) {
	st := &nwv1.WorkflowStatus{}
	step(t, st, workflow.Start, "started")
	step(t, st, workflow.Cancel, "")
	step(t, st, workflow.StepFailed, "the revert was refused")
	c := meta.FindStatusCondition(st.Conditions, nwv1.ConditionSucceeded)
	if c == nil || st.Phase != nwv1.WorkflowFailed || c.Reason != "ChangeFailed" ||
		!strings.Contains(c.Message, "step Change was cancelled: the test was deleted; then rollback step Revert failed") {
		t.Errorf("phase %s, Succeeded condition %+v", st.Phase, c)
	}
}

// Records ends on a status the controller never writes but a person can: a rollback step
// marked Cancelled, which the machine keeps waiting on, moves nothing and is not a
// transition; rebuilding the records must end, and build each one with the same ID again.
func TestRecordsEndOnAStatusThatMovesNothing(t *testing.T) {
	st := &nwv1.WorkflowStatus{}
	step(t, st, workflow.Start, "started")
	step(t, st, workflow.StepFailed, "the change was refused")
	for i := range st.Steps {
		if st.Steps[i].Name == "Revert" {
			st.Steps[i].State = nwv1.StepCancelled
		}
	}
	done := make(chan []string)
	go func() {
		var ids []string
		for _, r := range workflow.Records(st, twoSteps{}, kind, auditSubject, "tester") {
			ids = append(ids, r.ID)
		}
		done <- ids
	}()
	select {
	case ids := <-done:
		if len(ids) != 2 {
			t.Errorf("%d records, want 2 (the start and the failed change)", len(ids))
		}
	case <-time.After(time.Minute):
		t.Fatal("Records did not return")
	}
}
