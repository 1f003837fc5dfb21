// Package workflow is the pure state machine every Nodewright workflow shares (a migration,
// a bond-mode flip, a replication upgrade): a workflow starts, carries out its forward steps
// one at a time, and on a failure or a cancellation carries out the rollback steps its plan
// gives for the step that failed. It talks to no cluster. A controller reads the state back
// from the workflow's status, performs the one action the state asks for (Action), and feeds
// the outcome in as an event (Next).
package workflow

import (
	"fmt"
	"slices"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Step is one step of a workflow; its name is what status.steps[].name shows and the action
// the controller performs while the workflow is in it.
type Step string

// Event is the outcome of the current step's action, or a request from outside.
type Event string

// The events.
const (
	// Start begins a Pending workflow.
	Start Event = "Start"
	// StepSucceeded: the current step's action is done (or was skipped as not needed).
	StepSucceeded Event = "StepSucceeded"
	// StepFailed: the current step's action failed for good (after its retries, or at once
	// for a failed verification, which is never retried into success).
	StepFailed Event = "StepFailed"
	// Cancel: the workflow was deleted or cancelled; a running one rolls back first.
	Cancel Event = "Cancel"
)

// Events lists every event.
func Events() []Event { return []Event{Start, StepSucceeded, StepFailed, Cancel} }

// State is where a workflow is. Step is empty when Pending or finished (except in Failed,
// where it names the rollback step that failed); FailedStep names the forward step whose
// failure (or cancellation) started the rollback.
type State struct {
	Phase      nwv1.WorkflowPhase
	Step       Step
	FailedStep Step
}

func (s State) String() string {
	out := string(s.Phase)
	if s.Step != "" {
		out += "/" + string(s.Step)
	}
	if s.FailedStep != "" {
		out += " (after " + string(s.FailedStep) + ")"
	}
	return out
}

// Pending is where every workflow starts.
var Pending = State{Phase: nwv1.WorkflowPending}

// Plan is the shape of one workflow, fixed by its spec (which cannot change once started).
type Plan interface {
	// Forward lists the forward steps in order. It is never empty.
	Forward() []Step
	// Rollback lists the steps that undo a failure (or cancellation) in the forward step
	// failed, in order; none when the failure changed nothing. A rollback step is never a
	// forward step.
	Rollback(failed Step) []Step
	// Irreversible reports whether the forward step s is past undoing: a failure there ends
	// the workflow Failed at s, with nothing rolled back, and a cancellation waits for s to
	// finish.
	Irreversible(s Step) bool
}

// Next is the state after event e in state s of a workflow of plan p, or an error for an
// event that makes no sense there (which the controller reports, leaving the state as it
// was). Cancel is accepted in every state: a deletion cannot be refused.
func Next(p Plan, s State, e Event) (State, error) {
	invalid := func() (State, error) { return s, fmt.Errorf("event %s is not valid in %s", e, s) }
	switch s.Phase {
	case nwv1.WorkflowPending:
		switch e {
		case Start:
			return State{Phase: nwv1.WorkflowRunning, Step: p.Forward()[0]}, nil
		case Cancel:
			return State{Phase: nwv1.WorkflowRolledBack}, nil
		}
		return invalid()

	case nwv1.WorkflowRunning:
		forward := p.Forward()
		i := slices.Index(forward, s.Step)
		if i < 0 {
			return invalid()
		}
		switch e {
		case StepSucceeded:
			if i == len(forward)-1 {
				return State{Phase: nwv1.WorkflowSucceeded}, nil
			}
			return State{Phase: nwv1.WorkflowRunning, Step: forward[i+1]}, nil
		case StepFailed, Cancel:
			if p.Irreversible(s.Step) {
				if e == Cancel {
					return s, nil
				}
				return State{Phase: nwv1.WorkflowFailed, FailedStep: s.Step}, nil
			}
			return rollBack(p, s.Step, 0), nil
		}
		return invalid()

	case nwv1.WorkflowRollingBack:
		i := slices.Index(p.Rollback(s.FailedStep), s.Step)
		if i < 0 {
			return invalid()
		}
		switch e {
		case StepSucceeded:
			return rollBack(p, s.FailedStep, i+1), nil
		case StepFailed:
			return State{Phase: nwv1.WorkflowFailed, Step: s.Step, FailedStep: s.FailedStep}, nil
		case Cancel:
			return s, nil
		}
		return invalid()

	case nwv1.WorkflowSucceeded, nwv1.WorkflowFailed, nwv1.WorkflowRolledBack:
		if e == Cancel {
			return s, nil
		}
		return invalid()
	}
	return invalid()
}

// rollBack is the state at rollback step i after a failure in failed.
func rollBack(p Plan, failed Step, i int) State {
	rollback := p.Rollback(failed)
	if i >= len(rollback) {
		return State{Phase: nwv1.WorkflowRolledBack, FailedStep: failed}
	}
	return State{Phase: nwv1.WorkflowRollingBack, Step: rollback[i], FailedStep: failed}
}

// Action is what the controller must do in state s: the step's action, or nothing when the
// workflow waits to start or has finished.
func Action(s State) Step {
	if s.Phase.Active() {
		return s.Step
	}
	return ""
}

// Reachable lists every state a workflow of plan p can reach from Pending, by any sequence
// of events, Pending included.
func Reachable(p Plan) []State {
	seen := map[State]bool{Pending: true}
	queue := []State{Pending}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, e := range Events() {
			if next, err := Next(p, s, e); err == nil && !seen[next] {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	out := make([]State, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	return out
}

// KeyedPlan is a plan whose steps share actions: a flip's Node2ProtectVMs and
// Node3ProtectVMs are both the action ProtectVMs, for another node.
type KeyedPlan interface {
	Plan
	// ActionKey is the key of step s's action in the kind's table of actions.
	ActionKey(s Step) Step
}

// ActionKey is the key of step s's action in the table of actions of p's kind: the step
// itself, unless p is a KeyedPlan.
func ActionKey(p Plan, s Step) Step {
	if k, ok := p.(KeyedPlan); ok {
		return k.ActionKey(s)
	}
	return s
}

// Steps lists every step of p, forward and rollback, each once, in the order first met.
func Steps(p Plan) []Step {
	all := slices.Clone(p.Forward())
	for _, f := range p.Forward() {
		for _, r := range p.Rollback(f) {
			if !slices.Contains(all, r) {
				all = append(all, r)
			}
		}
	}
	return all
}
