// Package engine is the reconcile loop every workflow controller shares. A workflow kind
// supplies its plan (internal/workflow) and the action of each step (Workflow); the engine
// does the rest the same way for all of them:
//
//   - It reads the machine's state back from the object's status, never from memory, so a
//     restarted operator resumes where the status says.
//   - It performs at most one action per reconcile: a start, a cancellation, the running
//     step's action, the gates of a Waiting step, or the housekeeping of a finished workflow.
//   - It writes the outcome (the transition, a step's message, the Held condition) in one
//     status patch with an optimistic lock, so that two writers cannot both move it.
//   - A step's deadline counts from the start the status records (Run.Deadline) and wakes
//     the controller when it passes (Outcome.Wait), whether or not anything else changes.
//   - A write the API server refuses as invalid or forbidden fails the step instead of being
//     retried for ever.
//   - The Events of transitions and gates come from one place (internal/workflow), and the
//     audit trail is rebuilt from the status after every reconcile.
//
// A workflow never depends on the watch event of its own status write to go on: after every
// write that moves it, the engine asks to be called again at once. And it reads the object
// itself from the API server, never from the cache, so that an action never runs for a step
// the cache does not yet show finished. A predicate on the object's own events
// (GenerationChangedPredicate, copied from another controller, filters out status writes)
// therefore cannot stall a workflow after its first step; TestAPredicateCannotStallAWorkflow
// proves it. A predicate for every watch (WithEventFilter) would also hide the changes the
// gates wait for (a released claim, a healthy cluster, an approval): add none.
//
// Run the operator with leader election: the claim keeps two cluster-wide workflows from
// acting at once whatever runs them, but two active replicas could both perform one step's
// (idempotent) action.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// Object is a workflow kind's object: its status embeds the shared WorkflowStatus.
type Object interface {
	client.Object
	GetWorkflowStatus() *nwv1.WorkflowStatus
}

// Workflow is what one workflow kind supplies to the engine.
type Workflow[O Object] interface {
	// New is an empty object of the kind; NewList an empty list of them.
	New() O
	NewList() client.ObjectList
	// Plan is o's plan, fixed by its spec (which cannot change once it started).
	Plan(o O) workflow.Plan
	// Act performs the action of the step run is in (Running or RollingBack) and says what
	// it observed. It must be idempotent: after a crash it runs again for the same step.
	Act(ctx context.Context, run *Run[O]) (Outcome, error)
	// Finish tidies up after a finished workflow; Release in the outcome lets the finalizer
	// go from a deleted one.
	Finish(ctx context.Context, run *Run[O]) (Outcome, error)
}

// Preparer is a Workflow that checks something before anything else, on every reconcile
// (the migration: that the cluster serves the APIs it needs).
type Preparer[O Object] interface {
	// Prepare reports done when the reconcile ends there, with its result.
	Prepare(ctx context.Context, o O) (done bool, result ctrl.Result, err error)
}

// Run is one reconcile's view of a workflow.
type Run[O Object] struct {
	Object   O
	Plan     workflow.Plan
	State    workflow.State
	Now      metav1.Time
	Deleting bool
}

// Status is the object's workflow status.
func (r *Run[O]) Status() *nwv1.WorkflowStatus { return r.Object.GetWorkflowStatus() }

// StepStarted is when the running step began (now, when the status does not say).
func (r *Run[O]) StepStarted() time.Time {
	if started, ok := workflow.StepStarted(r.Status(), r.State.Step); ok {
		return started.Time
	}
	return r.Now.Time
}

// Deadline reports whether the running step has taken longer than limit, measured from the
// start its status records, and how long is left otherwise (an Outcome's Wait).
func (r *Run[O]) Deadline(limit time.Duration) (passed bool, left time.Duration) {
	left = r.StepStarted().Add(limit).Sub(r.Now.Time)
	return left <= 0, left
}

// Outcome is what a step's action observed: an event for the machine, or nothing yet (the
// step waits, with a message saying for what, for a watch event or until Wait has passed).
type Outcome struct {
	Event   workflow.Event
	Message string
	// Skipped: the step succeeded without doing anything (nothing to do).
	Skipped bool
	Wait    time.Duration
	// Release: the finalizer may go (Finish of a deleted workflow).
	Release bool
}

// Succeeded is the outcome of a step that did what it should.
func Succeeded(format string, args ...any) Outcome {
	return Outcome{Event: workflow.StepSucceeded, Message: fmt.Sprintf(format, args...)}
}

// Skipped is the outcome of a step that had nothing to do.
func Skipped(format string, args ...any) Outcome {
	return Outcome{Event: workflow.StepSucceeded, Skipped: true, Message: fmt.Sprintf(format, args...)}
}

// Failed is the outcome of a step that failed for good.
func Failed(format string, args ...any) Outcome {
	return Outcome{Event: workflow.StepFailed, Message: fmt.Sprintf(format, args...)}
}

// Waiting is the outcome of a step that waits: for a watch event, or at most after.
func Waiting(after time.Duration, format string, args ...any) Outcome {
	return Outcome{Message: fmt.Sprintf(format, args...), Wait: after}
}

// again is the delay before the reconcile that follows a write that moved the workflow.
const again = time.Millisecond

// Engine runs one workflow kind's objects.
type Engine[O Object] struct {
	Client client.Client
	// APIReader reads the workflow object itself and the claim, past the cache.
	APIReader client.Reader
	Recorder  record.EventRecorder
	Clock     clock.PassiveClock
	Kind      workflow.Kind
	// Finalizer holds a workflow until a running one is rolled back and tidied up.
	Finalizer string
	// Audit, when set, receives one record per transition; Actor is who they say did it.
	Audit audit.Appender
	Actor string
	// Gates configures the gates of the steps a GatedPlan gates.
	Gates    GateConfig
	Workflow Workflow[O]

	audited progress
}

// Reconcile advances one workflow by at most one action.
func (e *Engine[O]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	o := e.Workflow.New()
	if err := e.APIReader.Get(ctx, req.NamespacedName, o); err != nil {
		if apierrors.IsNotFound(err) {
			e.audited.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if o.GetDeletionTimestamp().IsZero() && !controllerutil.ContainsFinalizer(o, e.Finalizer) {
		if err := e.patchFinalizers(ctx, o, func() { controllerutil.AddFinalizer(o, e.Finalizer) }); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: again}, nil
	}
	if p, ok := e.Workflow.(Preparer[O]); ok {
		if done, result, err := p.Prepare(ctx, o); done || err != nil {
			return result, err
		}
	}
	base := o.DeepCopyObject().(O)
	run := e.newRun(o)
	st := o.GetWorkflowStatus()
	waiting := run.State.Phase == nwv1.WorkflowRunning && workflow.Waiting(st, run.State.Step)
	// A deleted workflow whose next step waits is cancelled there, before the step starts;
	// unless that step is past undoing once started: then, as for a running one, the
	// cancellation waits for it, and the step still starts only when its gates let it.
	if waiting && (!run.Deleting || run.Plan.Irreversible(run.State.Step)) {
		return e.gate(ctx, base, run)
	}

	var result ctrl.Result
	var from, to workflow.State
	out, err := e.advance(ctx, run)
	if err == nil && out.Event != "" {
		from = run.State
		to, err = workflow.Next(run.Plan, run.State, out.Event)
		if err == nil {
			workflow.Transition(st, run.Plan, e.Kind, o.GetGeneration(), from, to, out.Event, out.Message, out.Skipped, run.Now)
			if waiting {
				// Cancelled while it waited: no gate holds anything any more.
				setHeld(st, o.GetGeneration(), metav1.ConditionFalse, nwv1.ReasonCancelled,
					fmt.Sprintf("step %s was cancelled while it waited for its gates", from.Step))
				st.NextWindowStart = nil
			}
		}
	} else if run.State.Phase.Active() && run.State.Step != "" {
		msg := out.Message
		if err != nil {
			msg = "retrying after an error: " + err.Error()
		}
		workflow.StepMessage(st, run.State.Step, msg)
		result.RequeueAfter = out.Wait
	} else if err == nil {
		result.RequeueAfter = out.Wait
	}
	if err == nil {
		st.ObservedGeneration = o.GetGeneration()
	}
	if perr := e.patchStatus(ctx, base, o); perr != nil {
		return ctrl.Result{}, perr
	}
	e.recordTransitions(ctx, o, run.Plan)
	if err != nil {
		return ctrl.Result{}, err
	}
	if out.Event != "" {
		e.announce(ctx, o, from, to, out)
		return ctrl.Result{RequeueAfter: again}, nil
	}
	if out.Release {
		if err := e.releaseLock(ctx, o); err != nil {
			return ctrl.Result{}, err
		}
		err := e.patchFinalizers(ctx, o, func() { controllerutil.RemoveFinalizer(o, e.Finalizer) })
		if err == nil {
			e.audited.forget(client.ObjectKeyFromObject(o))
		}
		return ctrl.Result{}, err
	}
	return result, nil
}

func (e *Engine[O]) newRun(o O) *Run[O] {
	run := &Run[O]{Object: o, Plan: e.Workflow.Plan(o), Now: metav1.NewTime(e.Clock.Now()), Deleting: !o.GetDeletionTimestamp().IsZero()}
	run.State = workflow.StateOf(o.GetWorkflowStatus(), run.Plan)
	return run
}

// advance decides what happens now: a start, a cancellation, the current step's action, or
// the housekeeping of a finished workflow.
func (e *Engine[O]) advance(ctx context.Context, run *Run[O]) (Outcome, error) {
	switch phase := run.State.Phase; {
	case phase == nwv1.WorkflowPending && run.Deleting:
		return Outcome{Release: controllerutil.ContainsFinalizer(run.Object, e.Finalizer)}, nil
	case phase == nwv1.WorkflowPending:
		return Outcome{Event: workflow.Start, Message: "started"}, nil
	case phase == nwv1.WorkflowRunning && run.Deleting && !run.Plan.Irreversible(run.State.Step):
		// A step past undoing finishes first; the machine would keep it running anyway.
		return Outcome{Event: workflow.Cancel}, nil
	case phase.Finished():
		if phase != nwv1.WorkflowFailed {
			// A Failed workflow keeps the cluster until a person has looked and deleted it.
			if err := e.releaseLock(ctx, run.Object); err != nil {
				return Outcome{}, err
			}
		}
		return e.Workflow.Finish(ctx, run)
	}
	return e.act(ctx, run)
}

// act performs the running step's action. What retrying cannot fix fails the step: a
// child's name taken by someone else's object, or a write the API server refuses as invalid
// or forbidden (another admission webhook refusing a change, say).
func (e *Engine[O]) act(ctx context.Context, run *Run[O]) (Outcome, error) {
	out, err := e.Workflow.Act(ctx, run)
	var taken children.NotOursError
	switch {
	case errors.As(err, &taken):
		return Failed("%s", taken.Message), nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err):
		return Failed("the API server refused: %v", err), nil
	}
	return out, err
}

// announce reports a transition: an Event and a log line. Its audit record is written by
// recordTransitions, from the status.
func (e *Engine[O]) announce(ctx context.Context, o O, from, to workflow.State, out Outcome) {
	ctrl.LoggerFrom(ctx).Info("Workflow transition", "kind", e.Kind.Name, "object", klog.KObj(o),
		"from", from.String(), "to", to.String(), "event", out.Event, "message", out.Message)
	if e.Recorder != nil {
		eventType, reason, msg := workflow.TransitionEvent(o.GetWorkflowStatus(), e.Kind, from, to, out.Event, out.Message, out.Skipped)
		e.Recorder.Event(o, eventType, reason, msg)
	}
}

// patchStatus writes o's status if o changed from base, with an optimistic lock.
func (e *Engine[O]) patchStatus(ctx context.Context, base, o O) error {
	if equality.Semantic.DeepEqual(base, o) {
		return nil
	}
	return e.Client.Status().Patch(ctx, o, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

func (e *Engine[O]) patchFinalizers(ctx context.Context, o O, change func()) error {
	base := o.DeepCopyObject().(O)
	change()
	err := e.Client.Patch(ctx, o, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
