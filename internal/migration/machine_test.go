package migration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/workflowtest"
)

func plans() []Plan {
	return []Plan{
		{Mode: nwv1.MigrationCold, RetainSource: true}, {Mode: nwv1.MigrationCold, RetainSource: false},
		{Mode: nwv1.MigrationHot, RetainSource: true}, {Mode: nwv1.MigrationHot, RetainSource: false},
	}
}

// states lists every state a plan can reach from Pending, by any sequence of events.
func states(p Plan) []State { return workflow.Reachable(p) }

// TestConformance: every migration plan keeps the rules every workflow keeps.
func TestConformance(t *testing.T) {
	for _, p := range plans() {
		workflowtest.Conformance(t, p)
	}
}

// TestReachableStates pins the size of each plan's state space, so that a change to the
// machine that adds or loses states is noticed.
func TestReachableStates(t *testing.T) {
	want := map[Plan]int{
		// Pending, Succeeded, RolledBack (cancelled before start); per forward step: Running,
		// RolledBack after it, and per rollback step RollingBack and Failed there.
		{Mode: nwv1.MigrationCold, RetainSource: true}:  3 + 8 + 8 + 2*(0+1+2+2+2+4+4+4),
		{Mode: nwv1.MigrationCold, RetainSource: false}: 3 + 9 + 8 + 2*(0+1+2+2+2+4+4+4) + 1,
		{Mode: nwv1.MigrationHot, RetainSource: true}:   3 + 10 + 10 + 2*(0+1+2+2+2+1+2+4+4+4),
		{Mode: nwv1.MigrationHot, RetainSource: false}:  3 + 11 + 10 + 2*(0+1+2+2+2+1+2+4+4+4) + 1,
	}
	for p, n := range want {
		if got := len(states(p)); got != n {
			t.Errorf("%+v: %d reachable states, want %d", p, got, n)
		}
	}
}

func TestHappyPaths(t *testing.T) {
	cases := map[Plan]string{
		{Mode: nwv1.MigrationCold, RetainSource: true}:  "Validate SnapshotSource StopVM CreateTarget Copy Repoint StartVM SnapshotTarget",
		{Mode: nwv1.MigrationCold, RetainSource: false}: "Validate SnapshotSource StopVM CreateTarget Copy Repoint StartVM SnapshotTarget ReleaseSource",
		{Mode: nwv1.MigrationHot, RetainSource: true}:   "Validate FreezeGuest SnapshotSource CloneSource ThawGuest VerifyClone StopVM Repoint StartVM SnapshotTarget",
	}
	for p, want := range cases {
		s, err := p.Next(Pending, Start)
		var path []string
		for err == nil && s.Phase == nwv1.WorkflowRunning {
			path = append(path, string(Action(s)))
			s, err = p.Next(s, StepSucceeded)
		}
		if err != nil || s.Phase != nwv1.WorkflowSucceeded || strings.Join(path, " ") != want {
			t.Errorf("%+v: path %v ended in %s (err %v); want %s", p, path, s, err, want)
		}
	}
}

// TestRollbackFromEveryStep checks the rollback each forward step's failure starts.
func TestRollbackFromEveryStep(t *testing.T) {
	cold := Plan{Mode: nwv1.MigrationCold, RetainSource: true}
	hot := Plan{Mode: nwv1.MigrationHot, RetainSource: true}
	cases := []struct {
		plan   Plan
		failed Step
		want   string
	}{
		{cold, Validate, ""},
		{cold, SnapshotSource, "RollbackCleanup"},
		{cold, StopVM, "RollbackStartVM RollbackCleanup"},
		{cold, CreateTarget, "RollbackStartVM RollbackCleanup"},
		{cold, Copy, "RollbackStartVM RollbackCleanup"},
		{cold, Repoint, "RollbackStopVM RollbackRepoint RollbackStartVM RollbackCleanup"},
		{cold, StartVM, "RollbackStopVM RollbackRepoint RollbackStartVM RollbackCleanup"},
		{cold, SnapshotTarget, "RollbackStopVM RollbackRepoint RollbackStartVM RollbackCleanup"},
		{hot, Validate, ""},
		{hot, FreezeGuest, "RollbackThawGuest"},
		{hot, SnapshotSource, "RollbackThawGuest RollbackCleanup"},
		{hot, CloneSource, "RollbackThawGuest RollbackCleanup"},
		{hot, ThawGuest, "RollbackThawGuest RollbackCleanup"},
		{hot, VerifyClone, "RollbackCleanup"},
		{hot, StopVM, "RollbackStartVM RollbackCleanup"},
		{hot, Repoint, "RollbackStopVM RollbackRepoint RollbackStartVM RollbackCleanup"},
		{hot, StartVM, "RollbackStopVM RollbackRepoint RollbackStartVM RollbackCleanup"},
		{hot, SnapshotTarget, "RollbackStopVM RollbackRepoint RollbackStartVM RollbackCleanup"},
	}
	covered := map[Plan]map[Step]bool{cold: {}, hot: {}}
	for _, tc := range cases {
		covered[tc.plan][tc.failed] = true
		for _, e := range []Event{StepFailed, Cancel} {
			s, err := tc.plan.Next(State{Phase: nwv1.WorkflowRunning, Step: tc.failed}, e)
			var path []string
			for err == nil && s.Phase == nwv1.WorkflowRollingBack {
				path = append(path, string(Action(s)))
				s, err = tc.plan.Next(s, StepSucceeded)
			}
			if err != nil || s.Phase != nwv1.WorkflowRolledBack || s.FailedStep != tc.failed || strings.Join(path, " ") != tc.want {
				t.Errorf("%s %s on %s: rollback %v ended in %s (err %v); want %q then RolledBack",
					tc.plan.Mode, e, tc.failed, path, s, err, tc.want)
			}
		}
	}
	for p, steps := range covered {
		for _, f := range p.Forward() {
			if !steps[f] {
				t.Errorf("%s: no rollback case for step %s", p.Mode, f)
			}
		}
	}
}

// TestEveryStateAndEvent runs every event in every state of every plan and checks the rules
// that hold for each pair.
func TestEveryStateAndEvent(t *testing.T) {
	for _, p := range plans() {
		for _, s := range states(p) {
			for _, e := range Events() {
				next, err := p.Next(s, e)
				if problem := checkPair(p, s, e, next, err); problem != nil {
					t.Errorf("%+v: %s + %s → %s (Next said %v): %v", p, s, e, next, err, problem)
				}
			}
		}
	}
}

func checkPair(p Plan, s State, e Event, next State, err error) error {
	terminal := s.Phase == nwv1.WorkflowSucceeded || s.Phase == nwv1.WorkflowFailed || s.Phase == nwv1.WorkflowRolledBack
	switch {
	case err != nil && next != s:
		return fmt.Errorf("a refused event changed the state")
	case e == Cancel && err != nil:
		return fmt.Errorf("cancelling must always be accepted (deletion cannot be refused)")
	case terminal && e == Cancel && next != s:
		return fmt.Errorf("cancelling a finished migration must change nothing")
	case terminal && e != Cancel && err == nil:
		return fmt.Errorf("a finished migration accepted %s", e)
	case e == Start && (s.Phase == nwv1.WorkflowPending) != (err == nil):
		return fmt.Errorf("Start must be accepted exactly when Pending")
	case s.Phase == nwv1.WorkflowPending && (e == StepSucceeded || e == StepFailed) && err == nil:
		return fmt.Errorf("a step outcome before the start was accepted")
	case next.Phase == nwv1.WorkflowSucceeded && s.Phase != nwv1.WorkflowSucceeded && (s.Phase != nwv1.WorkflowRunning || s.Step != p.Forward()[len(p.Forward())-1] || e != StepSucceeded):
		return fmt.Errorf("Succeeded reached other than by the last forward step succeeding")
	case s.Phase == nwv1.WorkflowRollingBack && e == StepFailed && next.Phase != nwv1.WorkflowFailed:
		return fmt.Errorf("a failed rollback step must end in Failed")
	case s.Phase == nwv1.WorkflowRollingBack && next.Phase == nwv1.WorkflowRunning:
		return fmt.Errorf("a rollback went forward again")
	case (s.Phase == nwv1.WorkflowRunning || s.Phase == nwv1.WorkflowRollingBack) && e != Start && err != nil:
		return fmt.Errorf("an active migration refused %s", e)
	case next.Phase == nwv1.WorkflowRunning || next.Phase == nwv1.WorkflowRollingBack:
		if Action(next) == "" {
			return fmt.Errorf("an active state asks for no action")
		}
	}
	return nil
}

// TestChecksumGate: no sequence of events reaches Succeeded without the data step (Copy or
// VerifyClone) having succeeded; a failure there always ends in a rollback.
func TestChecksumGate(t *testing.T) {
	for _, p := range plans() {
		gate := Copy
		if p.Mode == nwv1.MigrationHot {
			gate = VerifyClone
		}
		s, _ := p.Next(Pending, Start)
		for s.Step != gate {
			s, _ = p.Next(s, StepSucceeded)
		}
		failed, err := p.Next(s, StepFailed)
		if err != nil || failed.Phase != nwv1.WorkflowRollingBack || !slices.Contains(p.Rollback(gate), RollbackCleanup) {
			t.Errorf("%+v: a failed %s led to %s (err %v)", p, gate, failed, err)
		}
		for _, f := range p.Forward() {
			if f == gate {
				break
			}
			if slices.Index(p.Forward(), f) > slices.Index(p.Forward(), Repoint) {
				t.Errorf("%+v: %s comes after Repoint but the gate %s does not precede it", p, f, gate)
			}
		}
		if slices.Index(p.Forward(), gate) > slices.Index(p.Forward(), Repoint) {
			t.Errorf("%+v: the VM is repointed before %s proves the data", p, gate)
		}
	}
}

func TestReleaseSourceIsNeverRolledBack(t *testing.T) {
	p := Plan{Mode: nwv1.MigrationCold, RetainSource: false}
	s := State{Phase: nwv1.WorkflowRunning, Step: ReleaseSource}
	if next, _ := p.Next(s, StepFailed); next.Phase != nwv1.WorkflowFailed || next.FailedStep != ReleaseSource {
		t.Errorf("a failed release went to %s", next)
	}
	if next, _ := p.Next(s, Cancel); next != s {
		t.Errorf("a cancel during the release went to %s", next)
	}
}
