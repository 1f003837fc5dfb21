package bondflip

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/workflowtest"
)

// TestConformance: a flip of one to sixteen nodes keeps the rules every workflow keeps
// (including that its steps fit status.steps).
func TestConformance(t *testing.T) {
	for n := 1; n <= MaxNodes; n++ {
		p, err := NewPlan(n)
		if err != nil {
			t.Fatal(err)
		}
		workflowtest.Conformance(t, p)
	}
	for _, n := range []int{0, MaxNodes + 1} {
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
	if got, want := join(p.Forward()), "Preflight Node1 Node2"; got != want {
		t.Errorf("forward:\n%s\nwant\n%s", got, want)
	}
	p16, _ := NewPlan(MaxNodes)
	if n := len(p16.Forward()) + len(p16.Rollback(NodeStep(MaxNodes))); n != 33 || n > workflowtest.MaxSteps {
		t.Errorf("a sixteen-node flip's longest step list is %d; want 33, within %d", n, workflowtest.MaxSteps)
	}
}

// TestRollbackFromEveryStep pins which nodes each failure undoes.
func TestRollbackFromEveryStep(t *testing.T) {
	p, _ := NewPlan(3)
	cases := map[Step]string{
		Preflight:   "",
		NodeStep(1): "RollbackNode1",
		NodeStep(2): "RollbackNode2 RollbackNode1",
		NodeStep(3): "RollbackNode3 RollbackNode2 RollbackNode1",
		// Not forward steps of this plan.
		NodeStep(4):           "",
		RollbackStep(1):       "",
		Step("Node1Confirm"):  "",
		Step("Node0"):         "",
		Step("SomethingElse"): "",
	}
	for failed, want := range cases {
		if got := join(p.Rollback(failed)); got != want {
			t.Errorf("after %s: %q; want %q", failed, got, want)
		}
	}
}

// TestUndoParts pins what a node's rollback step does after its forward step ended in each
// part: the same as the rollback steps of each part did when each part was a step, and the
// node uncordoned (where the flip's cordon is) before its VMs come back.
func TestUndoParts(t *testing.T) {
	cases := map[string]string{
		Cordon:       "RollbackUncordon",
		ProtectVMs:   "RollbackUncordon RollbackVMs",
		PauseResync:  "RollbackBondMode RollbackUncordon RollbackVMs",
		SetBondMode:  "RollbackBondMode RollbackUncordon RollbackVMs",
		Confirm:      "RollbackBondMode RollbackUncordon RollbackVMs",
		ResumeResync: "RollbackBondMode RollbackUncordon RollbackVMs",
		Uncordon:     "RollbackCordon RollbackProtectVMs RollbackBondMode RollbackUncordon RollbackVMs",
		RestoreVMs:   "RollbackCordon RollbackProtectVMs RollbackBondMode RollbackUncordon RollbackVMs",
		"":           "RollbackCordon RollbackProtectVMs RollbackBondMode RollbackUncordon RollbackVMs", // a node flipped before
	}
	if len(cases) != len(NodeParts)+1 {
		t.Fatalf("%d cases; want one for each of the %d forward parts and one for a node flipped before", len(cases), len(NodeParts))
	}
	if len(NodeParts)+len(RollbackParts) != MaxParts {
		t.Errorf("%d forward and %d rollback parts; MaxParts says %d", len(NodeParts), len(RollbackParts), MaxParts)
	}
	for failed, want := range cases {
		if got := strings.Join(UndoParts(failed), " "); got != want {
			t.Errorf("after %q: %q; want %q", failed, got, want)
		}
	}
}

func TestParseStep(t *testing.T) {
	for _, c := range []struct {
		step     Step
		k        int
		rollback bool
		ok       bool
	}{
		{"Node1", 1, false, true}, {"Node16", 16, false, true}, {"RollbackNode7", 7, true, true},
		{"Preflight", 0, false, false}, {"Node0", 0, false, false}, {"Node1SetBondMode", 0, false, false},
		{"Node100", 0, false, false}, {"RollbackNode", 0, false, false}, {"node1", 0, false, false},
	} {
		k, rollback, ok := ParseStep(c.step)
		if k != c.k || rollback != c.rollback || ok != c.ok {
			t.Errorf("%s: %d %v %v; want %d %v %v", c.step, k, rollback, ok, c.k, c.rollback, c.ok)
		}
	}
	if NodeStep(16) != "Node16" || RollbackStep(3) != "RollbackNode3" || PartName(2, SetBondMode) != "Node2SetBondMode" {
		t.Errorf("names: %s %s %s", NodeStep(16), RollbackStep(3), PartName(2, SetBondMode))
	}
}

// TestHappyPath: a flip of three nodes runs its 4 steps in order and succeeds.
func TestHappyPath(t *testing.T) {
	p, _ := NewPlan(3)
	s, err := workflow.Next(p, workflow.Pending, workflow.Start)
	n := 0
	for err == nil && s.Phase == nwv1.WorkflowRunning {
		n++
		s, err = workflow.Next(p, s, workflow.StepSucceeded)
	}
	if err != nil || s.Phase != nwv1.WorkflowSucceeded || n != 4 {
		t.Errorf("ended %s after %d steps (%v); want Succeeded after 4", s, n, err)
	}
}

func TestGates(t *testing.T) {
	p, _ := NewPlan(2)
	for _, s := range append(p.Forward(), p.Rollback(NodeStep(2))...) {
		want := workflow.Gates(0)
		switch {
		case s == Preflight:
			want = workflow.GatesPreflight
		case strings.HasPrefix(string(s), "Node"):
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
			if got := string(NodeState(st, 1)) + "," + string(NodeState(st, 2)); s.Step == NodeStep(1) && got != "Pending,Pending" {
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
		t.Errorf("at Node1: %s", got)
	}
	move(workflow.StepSucceeded)
	if got := states(); got != "Done,InProgress" {
		t.Errorf("at Node2: %s", got)
	}
	move(workflow.StepFailed)
	if got := states(); got != "Done,RollingBack" {
		t.Errorf("rolling back node 2: %s (%s)", got, s)
	}
	for s.Phase == nwv1.WorkflowRollingBack {
		move(workflow.StepSucceeded)
		if s.Step == RollbackStep(1) {
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
// step leaves the third Pending: its step, skipped by the rollback, never started.
func TestANodeNeverStartedStaysPending(t *testing.T) {
	p, _ := NewPlan(3)
	st := &nwv1.WorkflowStatus{}
	s := workflow.Pending
	for _, e := range []workflow.Event{workflow.Start, workflow.StepSucceeded, workflow.StepSucceeded, workflow.StepFailed} {
		next, err := workflow.Next(p, s, e)
		if err != nil {
			t.Fatal(err)
		}
		workflow.Transition(st, p, workflow.Kind{Name: "BondModeFlipPlan"}, 1, s, next, e, "", false, metav1.Now())
		s = next
		workflow.Admit(st, s.Step, "", metav1.Now())
	}
	if s.FailedStep != NodeStep(2) {
		t.Fatalf("failed at %s; want Node2", s.FailedStep)
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
