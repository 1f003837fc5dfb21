// Package migration is the plan of a VMVolumeMigration: the steps of the cold and hot paths
// and the rollback path from every step, which the shared workflow machine
// (internal/workflow) runs. It talks to no cluster; the controller observes the world, feeds
// the outcome of each action in as an event, and performs the action the machine asks for
// next.
package migration

import (
	"slices"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Step is one step of a migration; its name is what status.steps[].name shows and the action
// the controller performs while the migration is in it.
type Step = workflow.Step

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

// Event, State and the events are the workflow machine's.
type (
	Event = workflow.Event
	State = workflow.State
)

// The events.
const (
	Start         = workflow.Start
	StepSucceeded = workflow.StepSucceeded
	StepFailed    = workflow.StepFailed
	Cancel        = workflow.Cancel
)

// Events lists every event.
func Events() []Event { return workflow.Events() }

// Pending is where every migration starts.
var Pending = workflow.Pending

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

// Irreversible reports whether a failure in step s is past undoing: ReleaseSource. The VM
// runs on the verified target with both snapshots taken, and undoing that would be the harm:
// a failed release is reported, and a cancellation waits for it.
func (p Plan) Irreversible(s Step) bool { return s == ReleaseSource }

// Next is the state after event e in state s, or an error for an event that makes no sense
// there (which the controller reports, leaving the state as it was).
func (p Plan) Next(s State, e Event) (State, error) { return workflow.Next(p, s, e) }

// Action is what the controller must do in state s: the step's action, or nothing when the
// migration waits to start or has finished.
func Action(s State) Step { return workflow.Action(s) }

// PlanOf is m's plan, fixed by its spec. An unset mode is Cold: the controller never picks
// the path that needs more of the backend on its own.
func PlanOf(m *nwv1.VMVolumeMigration) Plan {
	mode := m.Spec.Mode
	if mode == "" {
		mode = nwv1.MigrationCold
	}
	return Plan{Mode: mode, RetainSource: m.Spec.RetainSource == nil || *m.Spec.RetainSource}
}
