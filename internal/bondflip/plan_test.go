package bondflip

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/workflowtest"
)

// TestConformance: a flip of one, two or three nodes keeps the rules every workflow keeps
// (including that its steps fit the status's 32).
func TestConformance(t *testing.T) {
	for n := 1; n <= 3; n++ {
		p, err := NewPlan(n)
		if err != nil {
			t.Fatal(err)
		}
		workflowtest.Conformance(t, p)
	}
	for _, n := range []int{0, 4} {
		if _, err := NewPlan(n); err == nil {
			t.Errorf("a plan of %d nodes was accepted", n)
		}
	}
}

func join(steps []Step) string {
	var s []string
	for _, step := range steps {
		s = append(s, string(step))
	}
	return strings.Join(s, " ")
}

func TestForward(t *testing.T) {
	p, _ := NewPlan(2)
	want := "Preflight Node1ProtectVMs Node1PauseResync Node1SetBondMode Node1Confirm Node1ResumeResync Node1RestoreVMs " +
		"Node2ProtectVMs Node2PauseResync Node2SetBondMode Node2Confirm Node2ResumeResync Node2RestoreVMs"
	if got := join(p.Forward()); got != want {
		t.Errorf("forward:\n%s\nwant\n%s", got, want)
	}
	p3, _ := NewPlan(3)
	if n := len(p3.Forward()) + len(p3.Rollback(NodeStep(3, RestoreVMs))); n != 28 {
		t.Errorf("a three-node flip's longest step list is %d; decision 0003 says 28 of 32", n)
	}
}

// TestRollbackFromEveryStep pins what each failure undoes.
func TestRollbackFromEveryStep(t *testing.T) {
	p, _ := NewPlan(3)
	cases := map[Step]string{
		Preflight:                 "",
		NodeStep(1, ProtectVMs):   "Node1RollbackVMs",
		NodeStep(1, PauseResync):  "Node1RollbackBondMode Node1RollbackVMs",
		NodeStep(1, SetBondMode):  "Node1RollbackBondMode Node1RollbackVMs",
		NodeStep(1, Confirm):      "Node1RollbackBondMode Node1RollbackVMs",
		NodeStep(1, ResumeResync): "Node1RollbackBondMode Node1RollbackVMs",
		NodeStep(1, RestoreVMs):   "Node1RollbackProtectVMs Node1RollbackBondMode Node1RollbackVMs",
		NodeStep(2, ProtectVMs):   "Node2RollbackVMs Node1RollbackProtectVMs Node1RollbackBondMode Node1RollbackVMs",
		NodeStep(3, SetBondMode): "Node3RollbackBondMode Node3RollbackVMs " +
			"Node2RollbackProtectVMs Node2RollbackBondMode Node2RollbackVMs Node1RollbackProtectVMs Node1RollbackBondMode Node1RollbackVMs",
		NodeStep(3, RestoreVMs): "Node3RollbackProtectVMs Node3RollbackBondMode Node3RollbackVMs " +
			"Node2RollbackProtectVMs Node2RollbackBondMode Node2RollbackVMs Node1RollbackProtectVMs Node1RollbackBondMode Node1RollbackVMs",
		// Not forward steps of this plan.
		NodeStep(4, ProtectVMs):  "",
		NodeStep(1, RollbackVMs): "",
		Step("SomethingElse"):    "",
	}
	for failed, want := range cases {
		if got := join(p.Rollback(failed)); got != want {
			t.Errorf("after %s: %q; want %q", failed, got, want)
		}
	}
}

// TestHappyPath: a flip of three nodes runs its 19 steps in order and succeeds.
func TestHappyPath(t *testing.T) {
	p, _ := NewPlan(3)
	s, err := workflow.Next(p, workflow.Pending, workflow.Start)
	n := 0
	for err == nil && s.Phase == nwv1.WorkflowRunning {
		n++
		s, err = workflow.Next(p, s, workflow.StepSucceeded)
	}
	if err != nil || s.Phase != nwv1.WorkflowSucceeded || n != 19 {
		t.Errorf("ended %s after %d steps (%v); want Succeeded after 19", s, n, err)
	}
}

func TestGates(t *testing.T) {
	p, _ := NewPlan(2)
	for _, s := range p.Forward() {
		want := workflow.Gates(0)
		switch {
		case s == Preflight:
			want = workflow.GatesPreflight
		case strings.HasSuffix(string(s), ProtectVMs):
			want = workflow.GatesNodeChange
		}
		if got := p.Gates(s); got != want {
			t.Errorf("%s: gates %b; want %b", s, got, want)
		}
	}
}

// TestNodeStateFollowsTheSteps drives a two-node flip through the machine, its second node
// failing at SetBondMode, and reads each node's state from the steps at every point.
func TestNodeStateFollowsTheSteps(t *testing.T) {
	p, _ := NewPlan(2)
	st := &nwv1.WorkflowStatus{}
	s := workflow.Pending
	move := func(e workflow.Event) {
		t.Helper()
		next, err := workflow.Next(p, s, e)
		if err != nil {
			t.Fatal(err)
		}
		workflow.Transition(st, p, workflow.Kind{Name: "BondModeFlipPlan"}, 1, s, next, e, "", false, metav1.Now())
		s = next
		if workflow.Waiting(st, s.Step) { // held by its gates: the engine admits it
			if got := string(NodeState(st, 1)) + "," + string(NodeState(st, 2)); s.Step == NodeStep(1, ProtectVMs) && got != "Pending,Pending" {
				t.Errorf("node 1 held at its first step: %s", got)
			}
			workflow.Admit(st, s.Step, "", metav1.Now())
		}
	}
	states := func() string {
		return string(NodeState(st, 1)) + "," + string(NodeState(st, 2))
	}
	if got := states(); got != "Pending,Pending" {
		t.Fatalf("before the start: %s", got)
	}
	move(workflow.Start) // Preflight
	move(workflow.StepSucceeded)
	if got := states(); got != "InProgress,Pending" {
		t.Errorf("at Node1ProtectVMs: %s", got)
	}
	for range NodeParts {
		move(workflow.StepSucceeded)
	}
	if got := states(); got != "Done,InProgress" {
		t.Errorf("at Node2ProtectVMs: %s", got)
	}
	move(workflow.StepSucceeded) // Node2PauseResync
	move(workflow.StepSucceeded) // Node2SetBondMode
	move(workflow.StepFailed)
	if got := states(); got != "Done,RollingBack" {
		t.Errorf("rolling back node 2: %s (%s)", got, s)
	}
	for s.Phase == nwv1.WorkflowRollingBack {
		move(workflow.StepSucceeded)
		if s.Step == NodeStep(1, RollbackBondMode) {
			if got := states(); got != "RollingBack,RolledBack" {
				t.Errorf("rolling back node 1: %s", got)
			}
		}
	}
	if got := states(); s.Phase != nwv1.WorkflowRolledBack || got != "RolledBack,RolledBack" {
		t.Errorf("after the rollback: %s, %s", s, got)
	}
}

// TestANodeNeverStartedStaysPending: a flip of three nodes rolled back at the second node's
// change leaves the third Pending: its steps, skipped by the rollback, never started.
func TestANodeNeverStartedStaysPending(t *testing.T) {
	p, _ := NewPlan(3)
	st := &nwv1.WorkflowStatus{}
	s := workflow.Pending
	for _, e := range []workflow.Event{workflow.Start, workflow.StepSucceeded, workflow.StepSucceeded, workflow.StepSucceeded,
		workflow.StepSucceeded, workflow.StepSucceeded, workflow.StepSucceeded, workflow.StepSucceeded,
		workflow.StepSucceeded, workflow.StepSucceeded, workflow.StepFailed} {
		next, err := workflow.Next(p, s, e)
		if err != nil {
			t.Fatal(err)
		}
		workflow.Transition(st, p, workflow.Kind{Name: "BondModeFlipPlan"}, 1, s, next, e, "", false, metav1.Now())
		s = next
		workflow.Admit(st, s.Step, "", metav1.Now())
	}
	if s.FailedStep != NodeStep(2, SetBondMode) {
		t.Fatalf("failed at %s; want Node2SetBondMode", s.FailedStep)
	}
	for s.Phase == nwv1.WorkflowRollingBack {
		next, _ := workflow.Next(p, s, workflow.StepSucceeded)
		workflow.Transition(st, p, workflow.Kind{Name: "BondModeFlipPlan"}, 1, s, next, workflow.StepSucceeded, "", false, metav1.Now())
		s = next
	}
	got := string(NodeState(st, 1)) + "," + string(NodeState(st, 2)) + "," + string(NodeState(st, 3))
	if got != "RolledBack,RolledBack,Pending" {
		t.Errorf("after the rollback: %s; want RolledBack,RolledBack,Pending", got)
	}
}
