// Package migration is the pure state machine of a VMVolumeMigration: the steps of the cold
// and hot paths, the rollback path from every step, and the one action each state asks the
// controller to perform. It talks to no cluster; the controller observes the world, feeds the
// outcome of each action in as an event, and performs the action the machine asks for next.
package migration

import (
	"fmt"
	"slices"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Step is one step of a migration; its name is what status.steps[].name shows and the action
// the controller performs while the migration is in it.
type Step string

// The forward steps.
const (
	// Validate: the VM and volume exist, the target class can do what is asked, no other
	// migration of the VM runs.
	Validate Step = "Validate"
	// FreezeGuest (hot): freeze the guest's filesystems through its agent; skipped without one.
	FreezeGuest Step = "FreezeGuest"
	// SnapshotSource: the "before" bookend, a VolumeSnapshot of the source, ready to use.
	SnapshotSource Step = "SnapshotSource"
	// CloneSource (hot): the target PVC as a CSI clone of the source, taken with the snapshot.
	CloneSource Step = "CloneSource"
	// ThawGuest (hot): thaw the guest.
	ThawGuest Step = "ThawGuest"
	// StopVM: stop the VM and wait until its VMI is gone.
	StopVM Step = "StopVM"
	// CreateTarget (cold): the target PVC, at least the source's size.
	CreateTarget Step = "CreateTarget"
	// Copy (cold): the copy Job; succeeds only when the target's digest read back from disk
	// equals the source's.
	Copy Step = "Copy"
	// VerifyClone (hot): the verify Job comparing the clone with the snapshot.
	VerifyClone Step = "VerifyClone"
	// Repoint: the VM's volume now names the target PVC.
	Repoint Step = "Repoint"
	// StartVM: start the VM and wait until it runs, within spec.timeouts.vmStart.
	StartVM Step = "StartVM"
	// SnapshotTarget: the "after" bookend.
	SnapshotTarget Step = "SnapshotTarget"
	// ReleaseSource: delete the source PVC (only when spec.retainSource is false).
	ReleaseSource Step = "ReleaseSource"
)

// The rollback steps.
const (
	// RollbackThawGuest: thaw a guest that may still be frozen.
	RollbackThawGuest Step = "RollbackThawGuest"
	// RollbackStopVM: stop the VM that failed on the target.
	RollbackStopVM Step = "RollbackStopVM"
	// RollbackRepoint: point the VM's volume back at the source PVC.
	RollbackRepoint Step = "RollbackRepoint"
	// RollbackStartVM: start the VM on its source.
	RollbackStartVM Step = "RollbackStartVM"
	// RollbackCleanup: delete what the migration created (Jobs, target PVC or clone,
	// snapshots).
	RollbackCleanup Step = "RollbackCleanup"
)

// Event is the outcome of the current step's action, or a request from outside.
type Event string

// The events.
const (
	// Start begins a Pending migration.
	Start Event = "Start"
	// StepSucceeded: the current step's action is done (or was skipped as not needed).
	StepSucceeded Event = "StepSucceeded"
	// StepFailed: the current step's action failed for good (after its retries, or at once for
	// a checksum mismatch, which is never retried into success).
	StepFailed Event = "StepFailed"
	// Cancel: the migration was deleted; a running one rolls back first.
	Cancel Event = "Cancel"
)

// Events lists every event.
func Events() []Event { return []Event{Start, StepSucceeded, StepFailed, Cancel} }

// State is where a migration is. Step is empty when Pending or finished; FailedStep names the
// forward step whose failure (or cancellation) started the rollback.
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

// Pending is where every migration starts.
var Pending = State{Phase: nwv1.WorkflowPending}

// Plan is the migration's shape, fixed by its spec (which cannot change once started).
type Plan struct {
	Mode         nwv1.MigrationMode
	RetainSource bool
}

// Forward lists the plan's steps in order.
func (p Plan) Forward() []Step {
	var steps []Step
	if p.Mode == nwv1.MigrationHot {
		steps = []Step{Validate, FreezeGuest, SnapshotSource, CloneSource, ThawGuest, VerifyClone, StopVM, Repoint, StartVM, SnapshotTarget}
	} else {
		steps = []Step{Validate, SnapshotSource, StopVM, CreateTarget, Copy, Repoint, StartVM, SnapshotTarget}
	}
	if !p.RetainSource {
		steps = append(steps, ReleaseSource)
	}
	return steps
}

// Rollback lists the steps that undo a failure (or cancellation) in the forward step failed:
// before the VM is pointed at the target, thaw the guest if it may be frozen, restart the VM
// on its source if it was stopped, and delete what was created; from Repoint on, stop the
// VM, point it back at the source, start it and delete what was created. A failure in
// Validate changed nothing, so there is nothing to undo.
func (p Plan) Rollback(failed Step) []Step {
	forward := p.Forward()
	at := slices.Index(forward, failed)
	reached := func(s Step) bool { i := slices.Index(forward, s); return i >= 0 && i <= at }
	if reached(Repoint) {
		return []Step{RollbackStopVM, RollbackRepoint, RollbackStartVM, RollbackCleanup}
	}
	var steps []Step
	if reached(FreezeGuest) && !p.passed(ThawGuest, at) {
		steps = append(steps, RollbackThawGuest)
	}
	if reached(StopVM) {
		steps = append(steps, RollbackStartVM)
	}
	if reached(SnapshotSource) {
		steps = append(steps, RollbackCleanup)
	}
	return steps
}

// passed reports whether step s finished before the forward step at index at.
func (p Plan) passed(s Step, at int) bool {
	i := slices.Index(p.Forward(), s)
	return i >= 0 && i < at
}

// Next is the state after event e in state s, or an error for an event that makes no sense
// there (which the controller reports, leaving the state as it was).
func (p Plan) Next(s State, e Event) (State, error) {
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
			if s.Step == ReleaseSource {
				// The VM runs on the verified target with both snapshots taken: undoing that
				// would be the harm. A failed release is reported; a cancel waits for it.
				if e == Cancel {
					return s, nil
				}
				return State{Phase: nwv1.WorkflowFailed, FailedStep: s.Step}, nil
			}
			return p.rollBack(s.Step, 0), nil
		}
		return invalid()

	case nwv1.WorkflowRollingBack:
		rollback := p.Rollback(s.FailedStep)
		i := slices.Index(rollback, s.Step)
		if i < 0 {
			return invalid()
		}
		switch e {
		case StepSucceeded:
			return p.rollBack(s.FailedStep, i+1), nil
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
func (p Plan) rollBack(failed Step, i int) State {
	rollback := p.Rollback(failed)
	if i >= len(rollback) {
		return State{Phase: nwv1.WorkflowRolledBack, FailedStep: failed}
	}
	return State{Phase: nwv1.WorkflowRollingBack, Step: rollback[i], FailedStep: failed}
}

// Action is what the controller must do in state s: the step's action, or nothing when the
// migration waits to start or has finished.
func Action(s State) Step {
	if s.Phase == nwv1.WorkflowRunning || s.Phase == nwv1.WorkflowRollingBack {
		return s.Step
	}
	return ""
}
