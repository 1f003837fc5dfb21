package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/kubelite"
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
// The agent reads only its own node's operations: it lists and watches them with the field
// selector spec.nodeName=<node>, as the kubelet does with pods, and it leaves alone,
// unwritten, one for another node should one reach it anyway. An executor runs
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
	// Client reads each operation from the API server, never from a cache (the runner keeps
	// none): a cache one write behind would show a finished operation still Running, started
	// by no one here.
	Client    *kubelite.Client
	Node      string
	Namespace string
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
	queue   *queue
}

// Result says when an operation is to be looked at again, besides its changes: after
// RequeueAfter, when not zero.
type Result struct{ RequeueAfter time.Duration }

// NodeOperations is the API's resource of NodeOperations.
var NodeOperations = kubelite.Resource{Group: nwv1.GroupVersion.Group, Version: nwv1.GroupVersion.Version, Resource: "nodeoperations"}

// Executors are the operations this agent performs: DRBD's pause-sync, resume-sync, adjust and
// online verify through drbd-utils as drbd says (nil: on the host), and the bond's mode under its
// checkpoint with bonds (nil: none).
func Executors(bonds *Bonds, drbd *DRBD) map[nwv1.NodeOperationType]Executor {
	if drbd == nil {
		drbd = &DRBD{Runner: DRBDRunner()}
	}
	all := drbd.Executors()
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

// Run runs the node's operations, one at a time, until ctx ends: it lists and watches them,
// and looks at each one listed, changed, woken (Wake) or due again.
func (o *Operations) Run(ctx context.Context) error {
	if o.Client == nil || o.Node == "" || o.Namespace == "" {
		return fmt.Errorf("the operation runner needs a client, its node's name and the agent's namespace")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	q := o.workQueue()
	defer q.Stop()
	log := klog.FromContext(ctx).WithValues("node", o.Node)
	watch := &kubelite.ListWatch{Client: o.Client, Path: NodeOperations.Path(o.Namespace, ""),
		Options: kubelite.ListOptions{FieldSelector: "spec.nodeName=" + escapeFieldValue(o.Node)},
		Handle: func(e kubelite.Event) {
			if m, err := kubelite.MetaOf(e.Object); err == nil {
				q.Add(types.NamespacedName{Namespace: m.Namespace, Name: m.Name})
			}
		}}
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		_ = watch.Run(klog.NewContext(ctx, log))
	}()
	defer func() { <-watching }()
	for {
		key, ok := q.Get(ctx)
		if !ok {
			return nil
		}
		o.work(klog.NewContext(ctx, log.WithValues("operation", key)), q, key)
	}
}

// work reconciles key once, and queues it again as the result says: at once after a
// failure, then waiting up to 5 s (an outcome reached while the API server was out of reach
// is reported soon after it is back), or after RequeueAfter.
func (o *Operations) work(ctx context.Context, q *queue, key types.NamespacedName) {
	defer q.Done(key)
	result, err := o.reconcile(ctx, key)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Moving the operation on failed; trying again")
		}
		q.AddRateLimited(key)
	case result.RequeueAfter > 0:
		q.Forget(key)
		q.AddAfter(key, result.RequeueAfter)
	default:
		q.Forget(key)
	}
}

// reconcile is Reconcile, a panic in it an error.
func (o *Operations) reconcile(ctx context.Context, key types.NamespacedName) (result Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return o.Reconcile(ctx, key)
}

func (o *Operations) workQueue() *queue {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.queue == nil {
		o.queue = newQueue(5*time.Millisecond, 5*time.Second)
	}
	return o.queue
}

// escapeFieldValue escapes a value for a field selector, as fields.EscapeValue.
func escapeFieldValue(v string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`, `=`, `\=`).Replace(v)
}

// Reconcile moves one operation one step on.
func (o *Operations) Reconcile(ctx context.Context, key types.NamespacedName) (Result, error) {
	op := &nwv1.NodeOperation{}
	if err := o.Client.Get(ctx, NodeOperations.Path(key.Namespace, key.Name), op); err != nil {
		return Result{}, kubelite.IgnoreNotFound(err)
	}
	now := metav1.NewTime(o.Clock.Now())
	switch op.Status.Phase {
	case nwv1.OperationSucceeded, nwv1.OperationFailed, nwv1.OperationRolledBack:
		return Result{}, nil
	}
	if op.Spec.NodeName != o.Node {
		// Another node's (a name reused across nodes, say): not this agent's to run or to
		// write; the admission policy would refuse the write anyway.
		klog.FromContext(ctx).Info("Leaving another node's operation alone", "operation", key, "node", op.Spec.NodeName)
		return Result{}, nil
	}
	exec, known := o.Executors[op.Spec.Type]
	switch {
	case op.Status.Phase == "" || op.Status.Phase == nwv1.OperationPending:
		if !now.Before(&op.Spec.Deadline) {
			return Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonDeadlineExceeded,
				Message: fmt.Sprintf("not started before its deadline %s", op.Spec.Deadline.UTC().Format(time.RFC3339))}, now)
		}
		if !known {
			return Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonUnsupported,
				Message: fmt.Sprintf("this agent cannot perform %s operations", op.Spec.Type)}, now)
		}
		base := op.DeepCopy()
		op.Status.Phase, op.Status.StartTime, op.Status.ObservedGeneration = nwv1.OperationRunning, &now, op.Generation
		if err := o.patchStatus(ctx, base, op); err != nil {
			return Result{}, err
		}
		o.markStarted(op.UID)
		return Result{RequeueAfter: time.Millisecond}, nil
	case !known:
		return Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonUnsupported,
			Message: fmt.Sprintf("this agent cannot perform %s operations", op.Spec.Type)}, now)
	case !o.startedHere(op.UID) && !exec.Resumable():
		return Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonInterrupted,
			Message: "the agent that started it stopped before it finished; it is not run again: what it did is unknown"}, now)
	}
	if done := o.outcomeOf(op.UID); done != nil {
		// Performed already; only its record failed to be written: write it, never run it again.
		return Result{}, o.finish(ctx, op, done.phase, done.result, done.failed, done.at)
	}
	// An operation whose change the host keeps a record of (a bond change under its
	// checkpoint) ends as that record says, whatever its deadline: the executor knows.
	holder, ok := exec.(Holder)
	held := ok && holder.Holds(op)
	if !held && !now.Before(&op.Spec.Deadline) {
		// Started, but the agent stopped (or could not reach the API server) until past it.
		return Result{}, o.finish(ctx, op, nwv1.OperationFailed, nil, &OperationError{Reason: ReasonDeadlineExceeded,
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
		return Result{RequeueAfter: max(time.Until(pending.Until), 10*time.Millisecond)}, o.progress(ctx, op, result)
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
	return Result{}, o.finish(ctx, op, done.phase, done.result, done.failed, done.at)
}

// run performs op with exec; a panic fails it (Panicked) rather than reaching
// the runner, whose retry would perform it again.
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
	if err := o.patchStatus(ctx, base, op); err != nil {
		return err
	}
	o.recorded()
	return nil
}

// patchStatus writes the status of op, changed from base, with a merge patch of what changed
// that carries the resourceVersion read: a Conflict if the operation changed since. op is
// then the operation as written.
func (o *Operations) patchStatus(ctx context.Context, base, op *nwv1.NodeOperation) error {
	patch, err := kubelite.MergePatch(base, op, base.ResourceVersion)
	if err != nil {
		return err
	}
	written := &nwv1.NodeOperation{}
	if err := o.Client.MergePatch(ctx, NodeOperations.Path(op.Namespace, op.Name, "status"), patch, written); err != nil {
		return err
	}
	*op = *written
	return nil
}

func (o *Operations) recorded() {
	if o.Recorded != nil {
		o.Recorded()
	}
}

// Wake has the operation called key looked at again at once: its host record changed. It
// never blocks; a wake before Run is kept until it runs.
func (o *Operations) Wake(key types.NamespacedName) {
	o.workQueue().Add(key)
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
	err := o.patchStatus(ctx, base, op)
	if err == nil || kubelite.IsNotFound(err) {
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
