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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
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

// Workflow is what one workflow kind's controller supplies to the engine; its Descriptor
// says the rest.
type Workflow[O Object] interface {
	// Actions is the table of the steps' actions (see Action).
	Actions() Actions[O]
	// Finish tidies up after a finished workflow, on every reconcile until it says Done, and
	// again once the workflow is deleted; the engine lets the finalizer go once it is Done
	// for a deleted one. Its message is the CleanedUp condition's.
	Finish(ctx context.Context, run *Run[O]) (Finished, error)
}

// Preparer is a Workflow that looks at something before anything else, on every reconcile:
// it may hold the workflow (Hold), and whatever it changes in the status is written in the
// engine's one patch, before the plan is read (a flip records its node order there).
type Preparer[O Object] interface {
	Prepare(ctx context.Context, run *Run[O]) (Hold, error)
}

// Watcher is a Workflow that watches more than its children (a flip: the agents' reports).
// Watches gets the engine being set up, whose maps (Active, All, OwnerOf) it may use.
type Watcher[O Object] interface {
	Watches(b *builder.Builder, e *Engine[O]) *builder.Builder
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

// Outcome is what a step's action observed: an event for the machine, or that the step
// waits, with a message saying for what, for a watch event or until Wait has passed. Make
// one with Succeeded, Skipped, Failed or Waiting: the zero Outcome says nothing, and the
// engine retries it as an error.
type Outcome struct {
	Event   workflow.Event
	Message string
	// Skipped: the step succeeded without doing anything (nothing to do).
	Skipped bool
	Wait    time.Duration
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

// Finished is what Finish says: whether the tidying up is done, and what it did or waits
// for.
type Finished struct {
	Done    bool
	Message string
	// Wait, when not Done, is when to look again without a watch event.
	Wait time.Duration
}

// Tidied is the Finished of a workflow with nothing (more) to tidy.
func Tidied(format string, args ...any) Finished {
	return Finished{Done: true, Message: fmt.Sprintf(format, args...)}
}

// Tidying is the Finished of a workflow still tidying up: at most after, it looks again.
func Tidying(after time.Duration, format string, args ...any) Finished {
	return Finished{Message: fmt.Sprintf(format, args...), Wait: after}
}

// Hold is what a Preparer says: the zero Hold lets the reconcile go on; one with a Reason
// holds the workflow there. The engine writes it in its own patch: a workflow not yet
// started waits with the Succeeded condition Unknown for Reason, a running one's step says
// Message, and a Warning Event with Reason says it when it changes; a deleted workflow that
// never started is let go. A finished one waits silently (Finish does not run).
type Hold struct {
	Reason, Message string
	// StepMessage, when set, is what a running workflow's step says (Message otherwise).
	StepMessage string
	// Wait, when set, is when to look again without a watch event.
	Wait time.Duration
	// Backoff ends the reconcile in an error, so that the retries back off (what holds the
	// workflow will change with no event to say so).
	Backoff bool
}

// again is the delay before the reconcile that follows a write that moved the workflow.
const again = time.Millisecond

// Engine runs one workflow kind's objects.
type Engine[O Object] struct {
	Descriptor *Descriptor[O]
	Workflow   Workflow[O]
	Deps
	Client client.Client
	// APIReader reads the workflow object itself and the claim, past the cache.
	APIReader client.Reader

	actions    Actions[O]
	gates      GateConfig
	namespaced bool
	apis       apiWatches
	audited    progress
}

// New is the engine of the kind d describes, with w's actions; Setup completes it.
func New[O Object](d *Descriptor[O], w Workflow[O], deps Deps) *Engine[O] {
	e := &Engine[O]{Descriptor: d, Workflow: w, Deps: deps, actions: w.Actions()}
	e.gates = GateConfig{LockNamespace: deps.LockNamespace, ClusterPhases: d.ClusterPhases}
	if e.Clock == nil {
		e.Clock = clock.RealClock{}
	}
	return e
}

// Reconcile advances one workflow by at most one action.
func (e *Engine[O]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	d := e.Descriptor
	o := d.New()
	if err := e.APIReader.Get(ctx, req.NamespacedName, o); err != nil {
		if apierrors.IsNotFound(err) {
			e.audited.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if o.GetDeletionTimestamp().IsZero() && !controllerutil.ContainsFinalizer(o, d.Finalizer) {
		if err := e.patchFinalizers(ctx, o, func() { controllerutil.AddFinalizer(o, d.Finalizer) }); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: again}, nil
	}
	base := o.DeepCopyObject().(O)
	if len(d.APIs) > 0 {
		hold, err := e.servedOrHold(ctx)
		if err != nil {
			return ctrl.Result{}, err
		}
		if hold.Reason != "" {
			return e.hold(ctx, base, e.newRun(o), hold)
		}
	}
	if p, ok := e.Workflow.(Preparer[O]); ok {
		hold, err := p.Prepare(ctx, e.newRun(o))
		if err != nil {
			return ctrl.Result{}, err
		}
		if hold.Reason != "" {
			return e.hold(ctx, base, e.newRun(o), hold)
		}
	}
	run := e.newRun(o)
	st := o.GetWorkflowStatus()
	waiting := run.State.Phase == nwv1.WorkflowRunning && workflow.Waiting(st, run.State.Step)
	// A deleted workflow whose next step waits is cancelled there, before the step starts;
	// unless that step is past undoing once started and its plan does not let it be cancelled
	// before (workflow.CancelsWhileWaiting): then, as for a running one, the cancellation waits
	// for it, and the step still starts only when its gates let it.
	cancelWaiting := waiting && run.Deleting && workflow.CancelsWhileWaiting(run.Plan, run.State.Step)
	if waiting && !cancelWaiting {
		return e.gate(ctx, base, run)
	}
	if run.State.Phase.Finished() {
		return e.finish(ctx, base, run)
	}
	if run.State.Phase == nwv1.WorkflowPending && run.Deleting {
		// Deleted before it started: nothing to undo or tidy.
		return ctrl.Result{}, e.patchFinalizers(ctx, o, func() { controllerutil.RemoveFinalizer(o, d.Finalizer) })
	}

	var result ctrl.Result
	var from, to workflow.State
	var out Outcome
	var err error
	if cancelWaiting {
		out = Outcome{Event: workflow.Cancel}
	} else {
		out, err = e.advance(ctx, run)
	}
	if err == nil && out.Event != "" {
		from = run.State
		plan := run.Plan
		if cancelWaiting {
			plan = workflow.ReversibleAt(plan, run.State.Step)
		}
		to, err = workflow.Next(plan, run.State, out.Event)
		if err == nil {
			workflow.Transition(st, run.Plan, d.Kind, o.GetGeneration(), from, to, out.Event, out.Message, out.Skipped, run.Now)
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
	return result, nil
}

func (e *Engine[O]) newRun(o O) *Run[O] {
	run := &Run[O]{Object: o, Plan: e.Descriptor.Plan(o), Now: metav1.NewTime(e.Clock.Now()), Deleting: !o.GetDeletionTimestamp().IsZero()}
	run.State = workflow.StateOf(o.GetWorkflowStatus(), run.Plan)
	return run
}

// advance decides what happens now to a workflow that has not finished: a start, a
// cancellation, or the current step's action.
func (e *Engine[O]) advance(ctx context.Context, run *Run[O]) (Outcome, error) {
	switch phase := run.State.Phase; {
	case phase == nwv1.WorkflowPending:
		return Outcome{Event: workflow.Start, Message: "started"}, nil
	case phase == nwv1.WorkflowRunning && run.Deleting && !run.Plan.Irreversible(run.State.Step):
		// A step past undoing finishes first; the machine would keep it running anyway.
		return Outcome{Event: workflow.Cancel}, nil
	}
	return e.act(ctx, run)
}

// act performs the running step's action, from the kind's table. What retrying cannot fix
// fails the step: a step with no action, a child's name taken by someone else's object, a
// change of the object other than its status, or a write the API server refuses as invalid
// or forbidden (another admission webhook refusing a change, say).
func (e *Engine[O]) act(ctx context.Context, run *Run[O]) (Outcome, error) {
	key := workflow.ActionKey(run.Plan, run.State.Step)
	action := e.actions[key]
	if action == nil {
		return Failed("step %s has no action (key %s) in the %s controller", run.State.Step, key, e.Descriptor.Kind.Name), nil
	}
	before := run.Object.DeepCopyObject().(O)
	out, err := action(ctx, run)
	var taken children.NotOursError
	switch {
	case errors.As(err, &taken):
		return Failed("%s", taken.Message), nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err):
		return Failed("the API server refused: %v", err), nil
	case err != nil:
		return out, err
	case !sameButStatus(before, run.Object):
		return Failed("step %s changed the %s's spec or metadata, which the engine does not write (a bug of the %s controller)",
			run.State.Step, e.Descriptor.Kind.Noun, e.Descriptor.Kind.Name), nil
	case out.Event == "" && out.Message == "":
		return out, fmt.Errorf("step %s: its action said nothing (no event and no message: use Waiting to wait)", run.State.Step)
	}
	return out, nil
}

// sameButStatus reports whether a and b differ at most in their status: what the engine
// writes.
func sameButStatus[O Object](a, b O) bool {
	ua, errA := runtime.DefaultUnstructuredConverter.ToUnstructured(a)
	ub, errB := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if errA != nil || errB != nil {
		return false
	}
	delete(ua, "status")
	delete(ub, "status")
	return equality.Semantic.DeepEqual(ua, ub)
}

// finish runs the kind's Finish for a finished workflow: until it is done, and again once
// the workflow is deleted, which lets the finalizer go once it is. A workflow that ends
// releases the claim, except a Failed one: it keeps the cluster until a person has looked
// and deleted it. The CleanedUp condition says what Finish did or waits for.
func (e *Engine[O]) finish(ctx context.Context, base O, run *Run[O]) (ctrl.Result, error) {
	o, st := run.Object, run.Object.GetWorkflowStatus()
	if run.State.Phase != nwv1.WorkflowFailed || run.Deleting {
		if err := e.releaseLock(ctx, o); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !run.Deleting && meta.IsStatusConditionTrue(st.Conditions, nwv1.ConditionCleanedUp) {
		return ctrl.Result{}, nil
	}
	done, err := e.Workflow.Finish(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	status, reason := metav1.ConditionFalse, nwv1.ReasonCleaningUp
	if done.Done {
		status, reason = metav1.ConditionTrue, nwv1.ReasonCleanedUp
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: nwv1.ConditionCleanedUp, Status: status, Reason: reason,
		Message: audit.Shorten(done.Message, workflow.MaxConditionMessageBytes), ObservedGeneration: o.GetGeneration()})
	if err := e.patchStatus(ctx, base, o); err != nil {
		return ctrl.Result{}, err
	}
	e.recordTransitions(ctx, o, run.Plan)
	if !done.Done {
		return ctrl.Result{RequeueAfter: done.Wait}, nil
	}
	if run.Deleting && controllerutil.ContainsFinalizer(o, e.Descriptor.Finalizer) {
		err := e.patchFinalizers(ctx, o, func() { controllerutil.RemoveFinalizer(o, e.Descriptor.Finalizer) })
		if err == nil {
			e.audited.forget(client.ObjectKeyFromObject(o))
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// hold writes what a Preparer holds the workflow for (see Hold).
func (e *Engine[O]) hold(ctx context.Context, base O, run *Run[O], h Hold) (ctrl.Result, error) {
	o, st := run.Object, run.Object.GetWorkflowStatus()
	switch {
	case run.State.Phase == nwv1.WorkflowPending && run.Deleting:
		// Nothing started, nothing to undo.
		return ctrl.Result{}, e.patchFinalizers(ctx, o, func() { controllerutil.RemoveFinalizer(o, e.Descriptor.Finalizer) })
	case run.State.Phase == nwv1.WorkflowPending:
		st.Phase = nwv1.WorkflowPending
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: nwv1.ConditionSucceeded, Status: metav1.ConditionUnknown,
			Reason: h.Reason, Message: audit.Shorten(h.Message, workflow.MaxConditionMessageBytes), ObservedGeneration: o.GetGeneration()})
	case run.State.Phase.Active() && run.State.Step != "":
		msg := h.StepMessage
		if msg == "" {
			msg = h.Message
		}
		workflow.StepMessage(st, run.State.Step, msg)
	}
	if !equality.Semantic.DeepEqual(base.GetWorkflowStatus(), st) {
		if err := e.patchStatus(ctx, base, o); err != nil {
			return ctrl.Result{}, err
		}
		if e.Recorder != nil {
			e.Recorder.Event(o, corev1.EventTypeWarning, h.Reason, audit.Shorten(h.Message, workflow.MaxEventMessageBytes))
		}
		ctrl.LoggerFrom(ctx).Info("Workflow held", "kind", e.Descriptor.Kind.Name, "object", klog.KObj(o), "reason", h.Reason, "message", h.Message)
	}
	if h.Backoff {
		return ctrl.Result{}, fmt.Errorf("%s: %s", h.Reason, h.Message)
	}
	return ctrl.Result{RequeueAfter: h.Wait}, nil
}

// announce reports a transition: an Event and a log line. Its audit record is written by
// recordTransitions, from the status.
func (e *Engine[O]) announce(ctx context.Context, o O, from, to workflow.State, out Outcome) {
	ctrl.LoggerFrom(ctx).Info("Workflow transition", "kind", e.Descriptor.Kind.Name, "object", klog.KObj(o),
		"from", from.String(), "to", to.String(), "event", out.Event, "message", out.Message)
	if e.Recorder != nil {
		eventType, reason, msg := workflow.TransitionEvent(o.GetWorkflowStatus(), e.Descriptor.Kind, from, to, out.Event, out.Message, out.Skipped)
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
