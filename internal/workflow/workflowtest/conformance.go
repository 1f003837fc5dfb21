// Package workflowtest holds the conformance check every workflow plan's tests run.
package workflowtest

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// MaxSteps is the most entries status.steps[] holds (the API's maxItems): every step a
// workflow can show, forward and rollback, must fit.
const MaxSteps = 48

// stepName is the pattern status.steps[].name must match.
var stepName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// Conformance runs every event in every state plan p can reach and checks the rules every
// workflow keeps: an event refused changes nothing, a cancellation is always accepted, a
// finished workflow accepts nothing else, only the last forward step succeeding reaches
// Succeeded, nothing goes forward again once a step failed (a failed verification is never
// retried into success), a failed rollback step ends Failed, every active state asks for an
// action, every forward step is reached and has a rollback path that ends RolledBack (or
// Failed at an irreversible step), the steps fit status.steps[], and the status written for
// each transition reads back as the state moved to, with one audit record per transition.
func Conformance(t testing.TB, p workflow.Plan) {
	t.Helper()
	forward := p.Forward()
	if len(forward) == 0 {
		t.Fatalf("%+v: no forward steps", p)
	}
	// The state is read back from the status against the plan's lists: they must be the
	// same on every call.
	if !slices.Equal(forward, p.Forward()) {
		t.Errorf("%+v: Forward gives another list on a second call", p)
	}
	for _, f := range forward {
		if !slices.Equal(p.Rollback(f), p.Rollback(f)) {
			t.Errorf("%+v: Rollback(%s) gives another list on a second call", p, f)
		}
	}
	reachable := workflow.Reachable(p)
	for _, s := range reachable {
		for _, e := range workflow.Events() {
			next, err := workflow.Next(p, s, e)
			if problem := checkPair(p, s, e, next, err); problem != nil {
				t.Errorf("%+v: %s + %s → %s (Next said %v): %v", p, s, e, next, err, problem)
			}
		}
	}
	checkNothingForwardAfterAFailure(t, p, reachable)
	checkRollbackPaths(t, p, reachable)
	checkSteps(t, p)
	checkStatusRoundTrip(t, p)
}

// checkStatusRoundTrip walks every path of the plan writing each transition into a status,
// as a controller does, and checks that the status reads back as the state the machine moved
// to (a restarted controller resumes from it), that it fits the API, and that the audit
// records rebuilt from it are one per transition, the newest this one's.
func checkStatusRoundTrip(t testing.TB, p workflow.Plan) {
	t.Helper()
	kind := workflow.Kind{Name: "Conformance", AuditAction: "ConformanceTransition", Succeeded: "done",
		RolledBack: "rolled back", Cancelled: "cancelled by the test"}
	now := metav1.NewTime(time.Unix(1_800_000_000, 0))
	subject := audit.Subject{Kind: kind.Name, Name: "conformance", UID: "00000000-0000-4000-8000-000000000001"}
	type node struct {
		st          *nwv1.WorkflowStatus
		transitions int
	}
	queue := []node{{st: &nwv1.WorkflowStatus{}}}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		from := workflow.StateOf(n.st, p)
		for _, e := range workflow.Events() {
			to, err := workflow.Next(p, from, e)
			if err != nil || to == from {
				continue
			}
			st := n.st.DeepCopy()
			// Every other step that succeeds is recorded as skipped: the machine reads both
			// the same.
			skipped := e == workflow.StepSucceeded && n.transitions%2 == 1
			workflow.Transition(st, p, kind, 1, from, to, e, "because", skipped, now)
			if got := workflow.StateOf(st, p); got != to {
				t.Errorf("%+v: %s --%s--> %s, but the status reads back as %s (steps %v)", p, from, e, to, got, st.Steps)
				continue
			}
			if gated := to.Phase == nwv1.WorkflowRunning && workflow.GatesOf(p, to.Step) != 0; gated != workflow.Waiting(st, to.Step) {
				t.Errorf("%+v: %s --%s--> %s: step %s has gates %v but Waiting is %v", p, from, e, to, to.Step, workflow.GatesOf(p, to.Step), !gated)
			} else if gated && n.transitions%2 == 0 {
				// Half the gated steps are admitted before their outcome, as the engine does.
				if !workflow.Admit(st, to.Step, "approver", now) || workflow.StateOf(st, p) != to {
					t.Errorf("%+v: admitting %s after %s --%s--> %s changed the state to %s", p, to.Step, from, e, to, workflow.StateOf(st, p))
				}
			}
			if len(st.Steps) > MaxSteps {
				t.Errorf("%+v: after %s --%s--> %s the status lists %d steps, more than %d", p, from, e, to, len(st.Steps), MaxSteps)
			}
			records := workflow.Records(st, p, kind, subject, "tester")
			want := n.transitions + 1
			if from.Phase == nwv1.WorkflowPending && e == workflow.Cancel {
				want = 0 // cancelled before the start: nothing happened to record
			}
			if len(records) != want || (want > 0 && (records[want-1].From != from.String() || records[want-1].To != to.String() || records[want-1].Reason != string(e))) {
				t.Errorf("%+v: after %s --%s--> %s the status rebuilds %d records (%v), want %d, the last for this transition", p, from, e, to, len(records), records, want)
				continue
			}
			again := workflow.Records(st.DeepCopy(), p, kind, subject, "tester")
			for i := range records {
				if again[i].ID != records[i].ID {
					t.Errorf("%+v: after %s --%s--> %s record %d gets another ID when rebuilt", p, from, e, to, i)
				}
			}
			queue = append(queue, node{st: st, transitions: n.transitions + 1})
		}
	}
}

func checkPair(p workflow.Plan, s workflow.State, e workflow.Event, next workflow.State, err error) error {
	forward := p.Forward()
	// The phases are spelled out, not asked of Finished and Active: this is their oracle too.
	finished := s.Phase == nwv1.WorkflowSucceeded || s.Phase == nwv1.WorkflowFailed || s.Phase == nwv1.WorkflowRolledBack
	active := s.Phase == nwv1.WorkflowRunning || s.Phase == nwv1.WorkflowRollingBack
	switch {
	case err != nil && next != s:
		return fmt.Errorf("a refused event changed the state")
	case e == workflow.Cancel && err != nil:
		return fmt.Errorf("cancelling must always be accepted (deletion cannot be refused)")
	case finished && e == workflow.Cancel && next != s:
		return fmt.Errorf("cancelling a finished workflow must change nothing")
	case finished && e != workflow.Cancel && err == nil:
		return fmt.Errorf("a finished workflow accepted %s", e)
	case e == workflow.Start && (s.Phase == nwv1.WorkflowPending) != (err == nil):
		return fmt.Errorf("the Start event must be accepted exactly when Pending")
	case s.Phase == nwv1.WorkflowPending && (e == workflow.StepSucceeded || e == workflow.StepFailed) && err == nil:
		return fmt.Errorf("a step outcome before the start was accepted")
	case next.Phase == nwv1.WorkflowSucceeded && s.Phase != nwv1.WorkflowSucceeded &&
		(s.Phase != nwv1.WorkflowRunning || s.Step != forward[len(forward)-1] || e != workflow.StepSucceeded):
		return fmt.Errorf("the phase Succeeded reached other than by the last forward step succeeding")
	case s.Phase == nwv1.WorkflowRunning && e == workflow.StepFailed && (next.Phase == nwv1.WorkflowRunning || next.Phase == nwv1.WorkflowSucceeded):
		return fmt.Errorf("a failed step went on forward")
	case s.Phase == nwv1.WorkflowRollingBack && e == workflow.StepFailed && next.Phase != nwv1.WorkflowFailed:
		return fmt.Errorf("a failed rollback step must end in Failed")
	case s.Phase == nwv1.WorkflowRollingBack && next.Phase == nwv1.WorkflowRunning:
		return fmt.Errorf("a rollback went forward again")
	case active && e != workflow.Start && err != nil:
		return fmt.Errorf("an active workflow refused %s", e)
	case (next.Phase == nwv1.WorkflowRunning || next.Phase == nwv1.WorkflowRollingBack) && workflow.Action(next) == "":
		return fmt.Errorf("an active state asks for no action")
	}
	return nil
}

// checkNothingForwardAfterAFailure: from a state in which a step has failed (rolling back,
// rolled back after a failure, failed), no sequence of events reaches a forward step or
// Succeeded again.
func checkNothingForwardAfterAFailure(t testing.TB, p workflow.Plan, reachable []workflow.State) {
	t.Helper()
	for _, s := range reachable {
		if s.FailedStep == "" {
			continue
		}
		for _, later := range from(p, s) {
			if later.Phase == nwv1.WorkflowRunning || later.Phase == nwv1.WorkflowSucceeded {
				t.Errorf("%+v: %s, after %s failed, leads to %s", p, s, s.FailedStep, later)
			}
		}
	}
}

// from lists every state reachable from s, s included.
func from(p workflow.Plan, s workflow.State) []workflow.State {
	seen := map[workflow.State]bool{s: true}
	queue := []workflow.State{s}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, e := range workflow.Events() {
			if next, err := workflow.Next(p, cur, e); err == nil && !seen[next] {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	return slices.Collect(maps.Keys(seen))
}

// checkRollbackPaths: every forward step is reached; its failure, and its cancellation,
// carry out exactly the plan's rollback for it and end RolledBack, except at an
// irreversible step, whose failure ends Failed there and whose cancellation waits.
func checkRollbackPaths(t testing.TB, p workflow.Plan, reachable []workflow.State) {
	t.Helper()
	for _, f := range p.Forward() {
		at := workflow.State{Phase: nwv1.WorkflowRunning, Step: f}
		if !slices.Contains(reachable, at) {
			t.Errorf("%+v: forward step %s is never reached", p, f)
			continue
		}
		for _, e := range []workflow.Event{workflow.StepFailed, workflow.Cancel} {
			s, err := workflow.Next(p, at, e)
			if p.Irreversible(f) {
				want := workflow.State{Phase: nwv1.WorkflowFailed, FailedStep: f}
				if e == workflow.Cancel {
					want = at
				}
				if err != nil || s != want {
					t.Errorf("%+v: %s at irreversible step %s led to %s (err %v), want %s", p, e, f, s, err, want)
				}
				continue
			}
			var path []workflow.Step
			for err == nil && s.Phase == nwv1.WorkflowRollingBack && len(path) <= MaxSteps {
				path = append(path, workflow.Action(s))
				s, err = workflow.Next(p, s, workflow.StepSucceeded)
			}
			if want := p.Rollback(f); err != nil || s.Phase != nwv1.WorkflowRolledBack || s.FailedStep != f || !slices.Equal(path, want) {
				t.Errorf("%+v: %s at %s: rollback %v ended in %s (err %v); want %v, then RolledBack", p, e, f, path, s, err, want)
			}
		}
	}
}

// checkSteps: names fit status.steps[].name, no rollback step is a forward step or has
// gates, and every step the workflow can show fits status.steps[].
func checkSteps(t testing.TB, p workflow.Plan) {
	t.Helper()
	forward := p.Forward()
	if dup, ok := duplicate(forward); ok {
		t.Errorf("%+v: forward step %s comes twice", p, dup)
	}
	all := slices.Clone(forward)
	for _, f := range forward {
		if dup, ok := duplicate(p.Rollback(f)); ok {
			t.Errorf("%+v: rollback step %s comes twice after %s", p, dup, f)
		}
		for _, r := range p.Rollback(f) {
			if slices.Contains(forward, r) {
				t.Errorf("%+v: rollback step %s (after %s) is also a forward step", p, r, f)
			}
			if g := workflow.GatesOf(p, r); g != 0 {
				t.Errorf("%+v: rollback step %s has gates (%b): a rollback never waits", p, r, g)
			}
			if !slices.Contains(all, r) {
				all = append(all, r)
			}
		}
	}
	for _, s := range all {
		if !stepName.MatchString(string(s)) || len(s) > 64 {
			t.Errorf("%+v: step name %q does not fit status.steps[].name (%s, at most 64 characters)", p, s, stepName)
		}
	}
	if len(all) > MaxSteps {
		t.Errorf("%+v: %d distinct steps, more than status.steps[] holds (%d)", p, len(all), MaxSteps)
	}
}

func duplicate(steps []workflow.Step) (workflow.Step, bool) {
	seen := map[workflow.Step]bool{}
	for _, s := range steps {
		if seen[s] {
			return s, true
		}
		seen[s] = true
	}
	return "", false
}

// Actions checks that every step of plan p, forward and rollback, has an action in its
// kind's table, whose keys are keys (engine.Actions.Keys): the engine fails a step that has
// none, so a plan that names one is a bug found here rather than on a cluster.
func Actions(t testing.TB, p workflow.Plan, keys []workflow.Step) {
	t.Helper()
	for _, s := range workflow.Steps(p) {
		if key := workflow.ActionKey(p, s); !slices.Contains(keys, key) {
			t.Errorf("%+v: step %s (action key %s) has no action in the table (%v)", p, s, key, keys)
		}
	}
}
