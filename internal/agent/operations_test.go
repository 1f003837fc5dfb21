package agent_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const patience = 2 * time.Minute

// counting performs DRBD verifies by counting them: the runner's rules are under test here,
// not a host change. Its result says which call it was.
type counting struct {
	mu        sync.Mutex
	calls     map[string]int
	resumable bool
	fail      *agent.OperationError
	panics    bool
}

func (c *counting) Run(_ context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op.Name]++
	if c.panics {
		panic("the executor broke")
	}
	if c.fail != nil {
		return nil, c.fail
	}
	return &nwv1.NodeOperationResult{OutOfSyncKiB: ptr.To(int64(c.calls[op.Name]))}, nil
}

func (c *counting) Resumable() bool { return c.resumable }

func (c *counting) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

func operation(ns, name, node string, deadline time.Time) *nwv1.NodeOperation {
	return &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationDRBDVerify, Deadline: metav1.NewTime(deadline),
			DRBDVerify: &nwv1.DRBDResourceOperation{Resource: "pvc-1"}}}
}

// startAgent runs the operation runner of node in ns, as the agent runs it.
func startAgent(t *testing.T, ns, node string, exec agent.Executor) (stop func()) {
	t.Helper()
	return runOperations(t, &agent.Operations{Node: node, Namespace: ns,
		Executors: map[nwv1.NodeOperationType]agent.Executor{nwv1.OperationDRBDVerify: exec}})
}

// runOperations runs ops, with an administrator's client unless it has one, until stop is
// called or the test ends.
func runOperations(t *testing.T, ops *agent.Operations) (stop func()) {
	t.Helper()
	if ops.Client == nil {
		ops.Client = env.LiteClient(t)
	}
	return run(t, ops.Run)
}

// run runs fn until stop is called or the test ends, and fails the test if fn fails.
func run(t *testing.T, fn func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("stopped with an error: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func phaseOf(t *testing.T, op *nwv1.NodeOperation, want nwv1.NodeOperationPhase) *nwv1.NodeOperation {
	t.Helper()
	got := &nwv1.NodeOperation{}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(op), got); err != nil {
			return err.Error()
		}
		if got.Status.Phase != want {
			return fmt.Sprintf("%s is %q, want %s", op.Name, got.Status.Phase, want)
		}
		return ""
	})
	return got
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// TestTheLifeOfAnOperation: an agent performs its own node's operations once, records what
// it observed, leaves the other node's alone, fails one past its deadline without starting
// it, and never performs a finished one again after a restart.
func TestTheLifeOfAnOperation(t *testing.T) {
	ns := env.Namespace(t)
	exec := &counting{calls: map[string]int{}}
	stop := startAgent(t, ns, "edge-1", exec)
	mine, theirs := operation(ns, "mine", "edge-1", time.Now().Add(time.Hour)), operation(ns, "theirs", "edge-2", time.Now().Add(time.Hour))
	late := operation(ns, "late", "edge-1", time.Now().Add(-time.Minute))
	create(t, mine, theirs, late)

	done := phaseOf(t, mine, nwv1.OperationSucceeded)
	if done.Status.StartTime == nil || done.Status.CompletionTime == nil || ptr.Deref(done.Status.Result.OutOfSyncKiB, 0) != 1 {
		t.Errorf("the record of a performed operation: %+v", done.Status)
	}
	failed := phaseOf(t, late, nwv1.OperationFailed)
	if failed.Status.Error == nil || failed.Status.Error.Reason != agent.ReasonDeadlineExceeded || exec.count("late") != 0 {
		t.Errorf("an operation past its deadline: %+v, performed %d times; want Failed DeadlineExceeded, never started", failed.Status, exec.count("late"))
	}
	stop()
	startAgent(t, ns, "edge-1", exec)
	// The restarted agent has listed its operations; a new one shows it is running.
	after := operation(ns, "after-restart", "edge-1", time.Now().Add(time.Hour))
	create(t, after)
	phaseOf(t, after, nwv1.OperationSucceeded)
	if n := exec.count("mine"); n != 1 {
		t.Errorf("a succeeded operation was performed %d times across a restart; want once", n)
	}
	got := &nwv1.NodeOperation{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(theirs), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" || exec.count("theirs") != 0 {
		t.Errorf("edge-1's agent touched edge-2's operation: %+v", got.Status)
	}
}

// TestAnInterruptedOperation: an operation an agent started and did not finish (it died) is
// performed again when its kind may be, and reported Failed (Interrupted) when it may not.
func TestAnInterruptedOperation(t *testing.T) {
	for _, resumable := range []bool{true, false} {
		t.Run(fmt.Sprintf("resumable=%v", resumable), func(t *testing.T) {
			ns := env.Namespace(t)
			op := operation(ns, "interrupted", "edge-1", time.Now().Add(time.Hour))
			create(t, op)
			// What a dead agent left: Running, started, nothing more.
			op.Status = nwv1.NodeOperationStatus{Phase: nwv1.OperationRunning, StartTime: ptr.To(metav1.Now())}
			if err := env.Client.Status().Update(context.Background(), op); err != nil {
				t.Fatal(err)
			}
			exec := &counting{calls: map[string]int{}, resumable: resumable}
			startAgent(t, ns, "edge-1", exec)
			if resumable {
				phaseOf(t, op, nwv1.OperationSucceeded)
				if n := exec.count(op.Name); n != 1 {
					t.Errorf("resumed %d times, want once", n)
				}
				return
			}
			got := phaseOf(t, op, nwv1.OperationFailed)
			if got.Status.Error == nil || got.Status.Error.Reason != agent.ReasonInterrupted || exec.count(op.Name) != 0 {
				t.Errorf("an interrupted operation that may not run twice: %+v, performed %d times", got.Status, exec.count(op.Name))
			}
		})
	}
}

// TestAnInterruptedOperationPastItsDeadline: one a dead agent left Running is not performed
// again once its deadline has passed, even when its kind may run twice.
func TestAnInterruptedOperationPastItsDeadline(t *testing.T) {
	ns := env.Namespace(t)
	op := operation(ns, "too-late", "edge-1", time.Now().Add(-time.Minute))
	create(t, op)
	op.Status = nwv1.NodeOperationStatus{Phase: nwv1.OperationRunning, StartTime: ptr.To(metav1.Now())}
	if err := env.Client.Status().Update(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	exec := &counting{calls: map[string]int{}, resumable: true}
	startAgent(t, ns, "edge-1", exec)
	got := phaseOf(t, op, nwv1.OperationFailed)
	if got.Status.Error == nil || got.Status.Error.Reason != agent.ReasonDeadlineExceeded || exec.count(op.Name) != 0 {
		t.Errorf("an interrupted operation past its deadline: %+v, performed %d times", got.Status, exec.count(op.Name))
	}
}

// TestAPanickingExecutorIsNotRetried: an executor that panics fails its operation once; the
// panic does not reach controller-runtime, whose retry would perform it again.
func TestAPanickingExecutorIsNotRetried(t *testing.T) {
	ns := env.Namespace(t)
	exec := &counting{calls: map[string]int{}, panics: true}
	startAgent(t, ns, "edge-1", exec)
	op := operation(ns, "panics", "edge-1", time.Now().Add(time.Hour))
	create(t, op)
	got := phaseOf(t, op, nwv1.OperationFailed)
	if got.Status.Error == nil || got.Status.Error.Reason != agent.ReasonPanicked || exec.count(op.Name) != 1 {
		t.Errorf("a panicking executor: %+v, performed %d times; want Failed Panicked, once", got.Status, exec.count(op.Name))
	}
}

// TestAFailedOperationSaysWhy: the executor's reason is the operation's, and a change undone
// is RolledBack.
func TestAFailedOperationSaysWhy(t *testing.T) {
	for _, rolledBack := range []bool{false, true} {
		t.Run(fmt.Sprintf("rolledBack=%v", rolledBack), func(t *testing.T) {
			ns := env.Namespace(t)
			exec := &counting{calls: map[string]int{}, fail: &agent.OperationError{Reason: "ProbeFailed", Message: "10.10.0.1 did not answer", RolledBack: rolledBack}}
			startAgent(t, ns, "edge-1", exec)
			op := operation(ns, "probe", "edge-1", time.Now().Add(time.Hour))
			create(t, op)
			want := nwv1.OperationFailed
			if rolledBack {
				want = nwv1.OperationRolledBack
			}
			got := phaseOf(t, op, want)
			if got.Status.Error == nil || got.Status.Error.Reason != "ProbeFailed" || got.Status.Error.Message != "10.10.0.1 did not answer" {
				t.Errorf("the error recorded: %+v", got.Status.Error)
			}
		})
	}
}
