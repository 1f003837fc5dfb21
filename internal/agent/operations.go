package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/text"
)

// An agent performs its node's NodeOperations, each at most once where twice would harm:
//
//   - Pending: past its deadline it is Failed (DeadlineExceeded) without being started;
//     otherwise the agent records Running (with the start time) before it does anything, so
//     that whoever reads the status after a crash knows it may have begun.
//   - Running, started by this process: the agent performs it and records what it observed:
//     Succeeded with the result, or Failed (or RolledBack) with the reason.
//   - Running, not started by this process: the agent that started it died. An operation
//     whose executor says it may run again (resumable: a DRBD pause or an adjust) is performed
//     again; any other is Failed (Interrupted), for the operator to decide. Past its deadline
//     it is Failed (DeadlineExceeded) instead.
//   - Succeeded, Failed or RolledBack: never performed again.
//
// The agent reads only its own node's operations: its cache lists and watches them with the
// field selector spec.nodeName=<node> (CacheOptions), as the kubelet does with pods, and it
// leaves alone, unwritten, one for another node should one reach it anyway. An executor runs
// under the operation's deadline; one stopped there is Failed (DeadlineExceeded), saying that
// what it had done is unknown.

// Executor performs one type of operation on this node.
type Executor interface {
	// Run performs op and says what it observed after. An error that is an *OperationError
	// fails the operation with its reason; any other is reported as CommandFailed. It must
	// find out what is already done, so that running it again does no harm when Resumable.
	Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error)
	// Resumable reports whether an operation interrupted by the agent's death may be run
	// again.
	Resumable() bool
}

// OperationError fails an operation with a reason a program can act on.
type OperationError struct {
	Reason, Message string
	// RolledBack: the change was made, found not working and undone.
	RolledBack bool
}

func (e *OperationError) Error() string { return e.Reason + ": " + e.Message }

// The reasons the runner itself gives.
const (
	ReasonDeadlineExceeded = "DeadlineExceeded"
	ReasonInterrupted      = "Interrupted"
	ReasonUnsupported      = "Unsupported"
	ReasonCommandFailed    = "CommandFailed"
	ReasonPanicked         = "Panicked"
)

// Operations runs this node's NodeOperations.
type Operations struct {
	Client client.Client
	// APIReader reads each operation from the API server, never from the cache: a cache one
	// write behind would show a finished operation still Running, started by no one here.
	APIReader client.Reader
	Node      string
	Executors map[nwv1.NodeOperationType]Executor
	Clock     clock.PassiveClock
	// Recorded, when set, is called once what an operation did on the host is recorded (its
	// outcome, or the progress of one that goes on): the reporter reads the host again.
	Recorded func()

	mu sync.Mutex
	// started: the operations this process started; done: those it performed and has not
	// yet recorded.
	started map[types.UID]bool
	done    map[types.UID]*outcome
	wake    chan event.GenericEvent
}

// Executors are the operations this agent performs: DRBD's pause-sync, resume-sync, adjust and
// online verify through drbd-utils, and the bond's mode under its checkpoint with bonds (nil:
// none).
func Executors(bonds *Bonds) map[nwv1.NodeOperationType]Executor {
	all := (&DRBD{Runner: DRBDRunner()}).Executors()
	if bonds != nil {
		for t, e := range bonds.Executors() {
			all[t] = e
		}
	}
	return all
}

// DRBDRunner runs drbd-utils' commands in a known environment, not the agent's: their errors
// are quoted in English.
func DRBDRunner() drbd.Runner {
	return drbd.ExecRunner{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}}
}

// CacheOptions restrict the agent's cache to its own node's operations in its namespace.
func CacheOptions(node, namespace string) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&nwv1.NodeOperation{}: {
			Namespaces: map[string]cache.Config{namespace: {}},
			Field:      fields.OneTermEqualSelector("spec.nodeName", node),
		},
	}}
}

// SetupWithManager registers the runner; operations run one at a time.
func (o *Operations) SetupWithManager(mgr ctrl.Manager) error {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.APIReader == nil {
		o.APIReader = mgr.GetAPIReader()
	}
	// Failed writes are tried again within 5s at most: an outcome reached while the API
	// server was out of reach is reported soon after it is back.
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 5*time.Second)
	return ctrl.NewControllerManagedBy(mgr).Named("nodeoperation").For(&nwv1.NodeOperation{}).
		WatchesRawSource(source.Channel(o.wakeChannel(), &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, RateLimiter: limiter}).Complete(o)
}

func (o *Operations) wakeChannel() chan event.GenericEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.wake == nil {
		o.wake = make(chan event.GenericEvent, 64)
	}
	return o.wake
}

// Reconcile moves one operation one step on.
func (o *Operations) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	op := &nwv1.NodeOperation{}
	if err := o.APIReader.Get(ctx, req.NamespacedName, op); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := metav1.NewTime(o.Clock.Now())
	switch op.Status.Phase {
	case nwv1.OperationSucceeded, nwv1.OperationFailed, nwv1.OperationRolledBack:
		return ctrl.Result{}, nil
	}
	if op.Spec.NodeName != o.Node {
		// Another node's (a name reused across nodes, say): not this agent's to run or to
		// write; the admission policy would refuse the write anyway.
		ctrl.LoggerFrom(ctx).Info("Leaving another node's operation alone", "operation", req.NamespacedName, "node", op.Spec.NodeName)
		return ctrl.Result{}, nil
	}
	exec, known := o.Executors[op.Spec.Type]
	switch {
	case op.Status.Phase == "" || op.Status.Phase == nwv1.OperationPending:
		if !now.Before(&op.Spec.Deadline) {
			return ctrl.Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonDeadlineExceeded,
				Message: fmt.Sprintf("not started before its deadline %s", op.Spec.Deadline.UTC().Format(time.RFC3339))}, now)
		}
		if !known {
			return ctrl.Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonUnsupported,
				Message: fmt.Sprintf("this agent cannot perform %s operations", op.Spec.Type)}, now)
		}
		base := op.DeepCopy()
		op.Status.Phase, op.Status.StartTime, op.Status.ObservedGeneration = nwv1.OperationRunning, &now, op.Generation
		if err := o.Client.Status().Patch(ctx, op, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, err
		}
		o.markStarted(op.UID)
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	case !known:
		return ctrl.Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonUnsupported,
			Message: fmt.Sprintf("this agent cannot perform %s operations", op.Spec.Type)}, now)
	case !o.startedHere(op.UID) && !exec.Resumable():
		return ctrl.Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonInterrupted,
			Message: "the agent that started it stopped before it finished; it is not run again: what it did is unknown"}, now)
	}
	if done := o.outcomeOf(op.UID); done != nil {
		// Performed already; only its record failed to be written: write it, never run it again.
		return ctrl.Result{}, o.finish(ctx, op, done.phase, done.result, done.failed, done.at)
	}
	// An operation whose change the host keeps a record of (a bond change under its
	// checkpoint) ends as that record says, whatever its deadline: the executor knows.
	holder, ok := exec.(Holder)
	held := ok && holder.Holds(op)
	if !held && !now.Before(&op.Spec.Deadline) {
		// Started, but the agent stopped (or could not reach the API server) until past it.
		return ctrl.Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonDeadlineExceeded,
			Message: fmt.Sprintf("its deadline %s passed before it could be performed", op.Spec.Deadline.UTC().Format(time.RFC3339))}, now)
	}
	o.markStarted(op.UID)
	// Nothing runs past the operation's deadline, but reading (or rolling back) what the host
	// recorded.
	limit := op.Spec.Deadline.Time
	if held {
		limit = o.Clock.Now().Add(2 * time.Minute)
	}
	runCtx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	result, err := run(runCtx, exec, op)
	if pending := (*Pending)(nil); errors.As(err, &pending) {
		// Done on the host, waiting (a bond change for its commit): Running, with its result.
		return ctrl.Result{RequeueAfter: max(time.Until(pending.Until), 10*time.Millisecond)}, o.progress(ctx, op, result)
	}
	if runCtx.Err() != nil && ctx.Err() == nil && !held {
		err = &OperationError{Reason: ReasonDeadlineExceeded, Message: fmt.Sprintf(
			"stopped at its deadline %s: what it had done by then is unknown (%v)", op.Spec.Deadline.UTC().Format(time.RFC3339), err)}
	}
	done := &outcome{phase: nwv1.OperationSucceeded, result: result, at: metav1.NewTime(o.Clock.Now())}
	if err != nil {
		if !errors.As(err, &done.failed) {
			done.failed = &OperationError{Reason: ReasonCommandFailed, Message: err.Error()}
		}
		done.phase = nwv1.OperationFailed
		if done.failed.RolledBack {
			done.phase = nwv1.OperationRolledBack
		}
	}
	o.remember(op.UID, done)
	return ctrl.Result{}, o.finish(ctx, op, done.phase, done.result, done.failed, done.at)
}

// run performs op with exec; a panic fails it (Panicked) rather than reaching
// controller-runtime, whose retry would perform it again.
func run(ctx context.Context, exec Executor, op *nwv1.NodeOperation) (result *nwv1.NodeOperationResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			result, err = nil, &OperationError{Reason: ReasonPanicked, Message: fmt.Sprintf("the agent failed while performing it: %v", p)}
		}
	}()
	return exec.Run(ctx, op)
}

// Pending is what an executor returns, with its result, for an operation done on the host that
// waits for something else until Until: a bond change waits for its commit. The operation
// stays Running, its result recorded; the executor is asked again when it is woken (Wake) or
// at Until.
type Pending struct{ Until time.Time }

func (p *Pending) Error() string { return "waiting until " + p.Until.UTC().Format(time.RFC3339) }

// Holder is an Executor that keeps its own record of the operations it performed on the host
// (a bond change's checkpoint): such an operation ends as the record says, even past its
// deadline, because the record knows what the host runs.
type Holder interface {
	Holds(op *nwv1.NodeOperation) bool
}

// progress records the result of an operation that goes on, when it changed.
func (o *Operations) progress(ctx context.Context, op *nwv1.NodeOperation, result *nwv1.NodeOperationResult) error {
	if equality.Semantic.DeepEqual(op.Status.Result, result) {
		return nil
	}
	base := op.DeepCopy()
	op.Status.Result = result
	if err := o.Client.Status().Patch(ctx, op, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	o.recorded()
	return nil
}

func (o *Operations) recorded() {
	if o.Recorded != nil {
		o.Recorded()
	}
}

// Wake has the operation called key looked at again at once: its host record changed.
func (o *Operations) Wake(key types.NamespacedName) {
	op := &nwv1.NodeOperation{}
	op.Namespace, op.Name = key.Namespace, key.Name
	select {
	case o.wakeChannel() <- event.GenericEvent{Object: op}:
	default:
		// Full: it is looked at again at its requeue anyway.
	}
}

// outcome is how a performed operation ended, kept until it is recorded.
type outcome struct {
	phase  nwv1.NodeOperationPhase
	result *nwv1.NodeOperationResult
	failed *OperationError
	at     metav1.Time
}

// finish records the operation's end.
func (o *Operations) finish(ctx context.Context, op *nwv1.NodeOperation, phase nwv1.NodeOperationPhase, result *nwv1.NodeOperationResult, failed *OperationError, now metav1.Time) error {
	base := op.DeepCopy()
	op.Status.Phase, op.Status.CompletionTime, op.Status.Result, op.Status.ObservedGeneration = phase, &now, result, op.Generation
	if op.Status.StartTime == nil {
		op.Status.StartTime = ptr.To(now)
	}
	op.Status.Error = nil
	if failed != nil {
		op.Status.Error = &nwv1.OperationError{Reason: failed.Reason, Message: text.Shorten(failed.Message, 1024)}
	}
	// With the resourceVersion read: an operation deleted and made again under the name is
	// never given this one's outcome. A conflict performs nothing again: the retry finds the
	// outcome kept for this UID and writes it.
	err := o.Client.Status().Patch(ctx, op, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if err == nil || apierrors.IsNotFound(err) {
		o.forget(op.UID)
		o.recorded()
		return nil
	}
	return err
}

func (o *Operations) markStarted(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.started == nil {
		o.started = map[types.UID]bool{}
	}
	o.started[uid] = true
}

func (o *Operations) startedHere(uid types.UID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.started[uid]
}

func (o *Operations) remember(uid types.UID, done *outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done == nil {
		o.done = map[types.UID]*outcome{}
	}
	o.done[uid] = done
}

func (o *Operations) outcomeOf(uid types.UID) *outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done[uid]
}

func (o *Operations) forget(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.started, uid)
	delete(o.done, uid)
}
