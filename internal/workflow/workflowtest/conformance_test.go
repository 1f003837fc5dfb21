package workflowtest

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spectrocloud/nodewright/internal/workflow"
)

// plan is a workflow plan made of lists: forward steps, the rollback after each, and the
// irreversible ones.
type plan struct {
	forward      []workflow.Step
	rollback     map[workflow.Step][]workflow.Step
	irreversible map[workflow.Step]bool
}

func (p plan) Forward() []workflow.Step                 { return p.forward }
func (p plan) Rollback(f workflow.Step) []workflow.Step { return p.rollback[f] }
func (p plan) Irreversible(s workflow.Step) bool        { return p.irreversible[s] }
func (p plan) String() string                           { return fmt.Sprint(p.forward) }
func steps(names ...string) (out []workflow.Step) {
	for _, n := range names {
		out = append(out, workflow.Step(n))
	}
	return out
}

// sound is a flip-like plan: check, drain, change, confirm, commit (past undoing), each
// failure undoing what came before it.
func sound() plan {
	return plan{
		forward: steps("Preflight", "Drain", "Change", "Confirm", "Commit"),
		rollback: map[workflow.Step][]workflow.Step{
			"Drain":   steps("Undrain"),
			"Change":  steps("Revert", "Undrain"),
			"Confirm": steps("Revert", "Undrain"),
		},
		irreversible: map[workflow.Step]bool{"Commit": true},
	}
}

// recorder is a testing.TB that keeps what Conformance reports.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// conformance runs Conformance on p and returns what it reported.
func conformance(t *testing.T, p workflow.Plan) []string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Conformance(r, p)
	}()
	<-done
	return r.errors
}

func TestASoundPlanConforms(t *testing.T) {
	if errs := conformance(t, sound()); len(errs) > 0 {
		t.Errorf("a sound plan was reported:\n%s", strings.Join(errs, "\n"))
	}
}

// Each broken plan is caught, with a report that names what is wrong.
func TestBrokenPlansAreCaught(t *testing.T) {
	many := sound()
	for i := range MaxSteps {
		many.forward = append(many.forward, workflow.Step(fmt.Sprintf("Extra%d", i)))
	}
	for _, tc := range []struct {
		name  string
		plan  func() plan
		wants string
	}{
		{"no forward steps", func() plan { p := sound(); p.forward = nil; return p }, "no forward steps"},
		{"a rollback step that is a forward step", func() plan {
			p := sound()
			p.rollback["Change"] = steps("Drain")
			return p
		}, "rollback step Drain (after Change) is also a forward step"},
		{"a step name the API refuses", func() plan {
			p := sound()
			p.rollback["Drain"] = steps("undo-drain")
			return p
		}, `step name "undo-drain" does not fit`},
		{"a forward step twice", func() plan {
			p := sound()
			p.forward = steps("Preflight", "Drain", "Drain", "Commit")
			return p
		}, "forward step Drain comes twice"},
		{"a rollback step twice", func() plan {
			p := sound()
			p.rollback["Change"] = steps("Revert", "Revert")
			return p
		}, "rollback step Revert comes twice after Change"},
		{"more steps than the status holds", func() plan { return many }, "more than status.steps[] holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := conformance(t, tc.plan())
			if !strings.Contains(strings.Join(errs, "\n"), tc.wants) {
				t.Errorf("reported %q, want a report containing %q", errs, tc.wants)
			}
		})
	}
}

// keyed is sound with the steps of its two nodes sharing their actions, as a flip's do.
type keyed struct{ plan }

func (k keyed) ActionKey(s workflow.Step) workflow.Step {
	return workflow.Step(strings.TrimSuffix(strings.TrimSuffix(string(s), "1"), "2"))
}

// A step whose action is not in the kind's table is caught, naming it; a full table, and a
// plan whose steps share actions by key, pass.
func TestAStepWithoutAnActionIsCaught(t *testing.T) {
	actions := func(p workflow.Plan, keys ...string) []string {
		r := &recorder{TB: t}
		Actions(r, p, steps(keys...))
		return r.errors
	}
	all := []string{"Preflight", "Drain", "Change", "Confirm", "Commit", "Undrain", "Revert"}
	if errs := actions(sound(), all...); len(errs) > 0 {
		t.Errorf("a full table was reported: %v", errs)
	}
	errs := actions(sound(), slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == "Revert" })...)
	if len(errs) != 1 || !strings.Contains(errs[0], "step Revert (action key Revert) has no action") {
		t.Errorf("a table without Revert's action: reported %q", errs)
	}
	two := keyed{plan{forward: steps("Preflight", "Change1", "Change2"),
		rollback: map[workflow.Step][]workflow.Step{"Change2": steps("Revert1")}}}
	if errs := actions(two, "Preflight", "Change", "Revert"); len(errs) > 0 {
		t.Errorf("steps sharing actions by key were reported: %v", errs)
	}
	if errs := actions(two, "Preflight", "Change"); len(errs) != 1 || !strings.Contains(errs[0], "step Revert1 (action key Revert)") {
		t.Errorf("a keyed plan without Revert's action: reported %q", errs)
	}
}
