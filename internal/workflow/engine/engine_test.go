package engine_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/internal/workflow/workflowtest"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// waitLimit bounds every wait: only a stuck test reaches it.
const waitLimit = 3 * time.Minute

// The test's plan: a preflight that changes nothing, then two steps that change a node, each
// undone by a rollback step.
const (
	preflight = workflow.Step("Preflight")
	change1   = workflow.Step("ChangeNode1")
	change2   = workflow.Step("ChangeNode2")
	undo1     = workflow.Step("UndoNode1")
	undo2     = workflow.Step("UndoNode2")
)

type plan struct{}

func (plan) Forward() []workflow.Step { return []workflow.Step{preflight, change1, change2} }
func (plan) Rollback(failed workflow.Step) []workflow.Step {
	switch failed {
	case change1:
		return []workflow.Step{undo1}
	case change2:
		return []workflow.Step{undo2, undo1}
	}
	return nil
}
func (plan) Irreversible(workflow.Step) bool { return false }
func (plan) Gates(s workflow.Step) workflow.Gates {
	switch s {
	case preflight:
		return workflow.GatesPreflight
	case change1, change2:
		return workflow.GatesNodeChange
	}
	return 0
}

func TestThePlanConforms(t *testing.T) { workflowtest.Conformance(t, plan{}) }

var testKind = func(name string) workflow.Kind {
	return workflow.Kind{Name: name, AuditAction: name + "Transition", Succeeded: "done", RolledBack: "rolled back",
		Cancelled: "deleted", Noun: "test workflow"}
}

// testWorkflow performs the plan's steps by recording them. A step the test holds waits
// until it is let go. Every action checks that its workflow holds the cluster-wide claim.
type testWorkflow[O engine.GatedObject] struct {
	kind    string
	newObj  func() O
	newList func() client.ObjectList
	reader  client.Reader
	lockNS  string

	// extra adds watches (engine.Watcher).
	extra func(*builder.Builder) *builder.Builder

	mu         sync.Mutex
	acted      map[string][]workflow.Step
	held       map[workflow.Step]bool
	violations []string
}

// descriptor is the test kind's.
func (w *testWorkflow[O]) descriptor() *engine.Descriptor[O] {
	return &engine.Descriptor[O]{Kind: testKind(w.kind), Controller: "test-" + w.kind,
		New: w.newObj, NewList: w.newList,
		Plan: func(O) workflow.Plan { return plan{} }, Plans: func() []workflow.Plan { return []workflow.Plan{plan{}} },
		Finalizer: "nodewright.spectrocloud.com/engine-test", ClusterWide: true, ClusterPhases: []nwv1.ClusterPhase{nwv1.ClusterMultiNode}}
}

func (w *testWorkflow[O]) Actions() engine.Actions[O] {
	actions := engine.Actions[O]{}
	for _, s := range workflow.Steps(plan{}) {
		actions[s] = w.Act
	}
	return actions
}

func (w *testWorkflow[O]) Watches(b *builder.Builder, _ *engine.Engine[O]) *builder.Builder {
	if w.extra != nil {
		return w.extra(b)
	}
	return b
}

func (w *testWorkflow[O]) Finish(context.Context, *engine.Run[O]) (engine.Finished, error) {
	return engine.Tidied("nothing to tidy"), nil
}

func (w *testWorkflow[O]) Act(ctx context.Context, run *engine.Run[O]) (engine.Outcome, error) {
	var lease coordinationv1.Lease
	if err := w.reader.Get(ctx, client.ObjectKey{Namespace: w.lockNS, Name: engine.LockName}, &lease); err != nil {
		return engine.Outcome{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	me := fmt.Sprintf("%s/%s/%s", w.kind, run.Object.GetName(), run.Object.GetUID())
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != me {
		w.violations = append(w.violations, fmt.Sprintf("%s acted in %s while the claim was %q", me, run.State.Step, holder))
	}
	name := run.Object.GetName()
	if !slices.Contains(w.acted[name], run.State.Step) {
		w.acted[name] = append(w.acted[name], run.State.Step)
	}
	if w.held[run.State.Step] {
		return engine.Waiting(200*time.Millisecond, "held by the test"), nil
	}
	return engine.Succeeded("%s done", run.State.Step), nil
}

func (w *testWorkflow[O]) hold(s workflow.Step, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held[s] = on
}

func (w *testWorkflow[O]) actedOn(name string) []workflow.Step {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acted[name])
}

func (w *testWorkflow[O]) problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.violations)
}

func newFlips(lockNS string) *testWorkflow[*nwv1.BondModeFlipPlan] {
	return &testWorkflow[*nwv1.BondModeFlipPlan]{kind: "BondModeFlipPlan", lockNS: lockNS, reader: env.Client,
		newObj:  func() *nwv1.BondModeFlipPlan { return &nwv1.BondModeFlipPlan{} },
		newList: func() client.ObjectList { return &nwv1.BondModeFlipPlanList{} },
		acted:   map[string][]workflow.Step{}, held: map[workflow.Step]bool{}}
}

func newUpgrades(lockNS string) *testWorkflow[*nwv1.ReplicationUpgrade] {
	return &testWorkflow[*nwv1.ReplicationUpgrade]{kind: "ReplicationUpgrade", lockNS: lockNS, reader: env.Client,
		newObj:  func() *nwv1.ReplicationUpgrade { return &nwv1.ReplicationUpgrade{} },
		newList: func() client.ObjectList { return &nwv1.ReplicationUpgradeList{} },
		acted:   map[string][]workflow.Step{}, held: map[workflow.Step]bool{}}
}

// register runs w's engine in mgr.
func register[O engine.GatedObject](mgr manager.Manager, w *testWorkflow[O], clk clock.PassiveClock, extra func(*builder.Builder) *builder.Builder) error {
	return registerWith(mgr, nil, nil, w, clk, extra)
}

// registerWith runs w's engine in mgr with client c and API reader r (the manager's when nil).
func registerWith[O engine.GatedObject](mgr manager.Manager, c client.Client, r client.Reader, w *testWorkflow[O], clk clock.PassiveClock, extra func(*builder.Builder) *builder.Builder) error {
	w.extra = extra
	e := engine.New(w.descriptor(), w, engine.Deps{Recorder: mgr.GetEventRecorderFor("engine-test"), Clock: clk, LockNamespace: w.lockNS})
	e.Client, e.APIReader = c, r
	_, err := e.Setup(mgr)
	return err
}

// healthyCluster makes the NodewrightCluster say phase, with fresh heartbeats or not, in the
// Managed mode (as its controller writes it once the handover took effect).
func healthyCluster(t *testing.T, phase nwv1.ClusterPhase, fresh bool) {
	t.Helper()
	clusterAs(t, nwv1.ManagementManaged, phase, fresh)
}

// clusterAs makes the NodewrightCluster ask for mode and be in it, with phase and fresh
// heartbeats or not. No controller runs here: the status is written as the NodewrightCluster
// controller would.
func clusterAs(t *testing.T, mode nwv1.ManagementMode, phase nwv1.ClusterPhase, fresh bool) {
	t.Helper()
	ctx := context.Background()
	c := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{Management: mode, Legacy: nwv1.LegacySource{
			ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"},
			DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"},
			EventComponent: "absent"}}}
	if err := env.Client.Create(ctx, c); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), c) })
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.Management != mode {
		c.Spec.Management = mode
		if err := env.Client.Update(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	status, reason := metav1.ConditionTrue, nwv1.ReasonHeartbeatsFresh
	if !fresh {
		status, reason = metav1.ConditionFalse, nwv1.ReasonHeartbeatsStale
	}
	c.Status.Phase = phase
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: nwv1.ConditionHeartbeatsFresh, Status: status,
		Reason: reason, Message: "edge-2's heartbeat is 5m old"})
	c.Status.Management = mode
	handover := metav1.Condition{Type: nwv1.ConditionManagementApplied, Status: metav1.ConditionTrue, Reason: nwv1.ReasonHandedOver,
		Message: "Nodewright manages the nodes"}
	if mode != nwv1.ManagementManaged {
		handover.Reason, handover.Message = nwv1.ReasonObserving, "the legacy DaemonSet decides"
	}
	meta.SetStatusCondition(&c.Status.Conditions, handover)
	if err := env.Client.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
}

func flip(name string, approval nwv1.Approval, window *nwv1.MaintenanceWindow) *nwv1.BondModeFlipPlan {
	return &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, Approval: approval, MaintenanceWindow: window}}
}

// create makes o and deletes it when the test ends, waiting until its finalizer let it go:
// call it after starting the operator, whose cleanup must run after this one.
func create(t *testing.T, o client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, o) })
}

func deleteAndWait(t *testing.T, o client.Object) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
		return
	}
	testenv.Eventually(t, waitLimit, func() string {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("%s still exists (finalizers %v)", o.GetName(), o.GetFinalizers())
		}
		return ""
	})
}

// stepState is the state of step in o's status, and its step.
func stepOf(o engine.Object, step workflow.Step) nwv1.WorkflowStep {
	for _, s := range o.GetWorkflowStatus().Steps {
		if s.Name == string(step) {
			return s
		}
	}
	return nwv1.WorkflowStep{}
}

// waitFor polls o until check says nothing.
func waitFor[O engine.Object](t *testing.T, o O, check func(O) string) {
	t.Helper()
	testenv.Eventually(t, waitLimit, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
			return err.Error()
		}
		return check(o)
	})
}

// heldBy says why o's Waiting step waits, or "" when it is not held.
func heldBy(o engine.Object) (step, reason, message string) {
	st := o.GetWorkflowStatus()
	c := meta.FindStatusCondition(st.Conditions, nwv1.ConditionHeld)
	for _, s := range st.Steps {
		if s.State == nwv1.StepWaiting && c != nil && c.Status == metav1.ConditionTrue {
			return s.Name, c.Reason, c.Message
		}
	}
	return "", "", ""
}

func phaseIs[O engine.Object](p nwv1.WorkflowPhase) func(O) string {
	return func(o O) string {
		if got := o.GetWorkflowStatus().Phase; got != p {
			return fmt.Sprintf("%s is %s, want %s (steps %+v)", o.GetName(), got, p, o.GetWorkflowStatus().Steps)
		}
		return ""
	}
}

// TestOneClusterWideWorkflowAtATime: two flips and an upgrade created at once, with two
// operator replicas running the controllers: exactly one runs, the others wait and say which
// workflow holds the cluster; each then runs in turn, and no action ever runs without the claim.
func TestOneClusterWideWorkflowAtATime(t *testing.T) {
	healthyCluster(t, nwv1.ClusterMultiNode, true)
	lockNS := env.Namespace(t)
	flips, upgrades := newFlips(lockNS), newUpgrades(lockNS)
	flips.hold(change1, true)
	upgrades.hold(change1, true)
	for range 2 { // two replicas
		env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
			if err := register(mgr, flips, clock.RealClock{}, nil); err != nil {
				return err
			}
			return register(mgr, upgrades, clock.RealClock{}, nil)
		})
	}
	a, b := flip("at-once-a", nwv1.ApprovalAutomatic, nil), flip("at-once-b", nwv1.ApprovalAutomatic, nil)
	c := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "at-once-c"},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"edge-2"}, ReplicaCount: 2}}
	var wg sync.WaitGroup
	for _, o := range []client.Object{a, b, c} {
		wg.Go(func() { create(t, o) })
	}
	wg.Wait()

	// Exactly one gets past its preflight gate; the two others wait, naming it.
	objects := []engine.Object{a, b, c}
	testenv.Eventually(t, waitLimit, func() string {
		running, waiting := 0, 0
		var holder string
		for _, o := range objects {
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
				return err.Error()
			}
			if stepOf(o, change1).State == nwv1.StepRunning {
				running++
				holder = o.GetName()
			}
		}
		for _, o := range objects {
			if step, reason, msg := heldBy(o); step == string(preflight) && reason == nwv1.ReasonAnotherWorkflowRunning && holder != "" && strings.Contains(msg, holder) {
				waiting++
			}
		}
		if running != 1 || waiting != 2 {
			return fmt.Sprintf("%d past their preflight (want 1), %d waiting for it (want 2)", running, waiting)
		}
		return ""
	})
	flips.hold(change1, false)
	upgrades.hold(change1, false)
	waitFor(t, a, phaseIs[*nwv1.BondModeFlipPlan](nwv1.WorkflowSucceeded))
	waitFor(t, b, phaseIs[*nwv1.BondModeFlipPlan](nwv1.WorkflowSucceeded))
	waitFor(t, c, phaseIs[*nwv1.ReplicationUpgrade](nwv1.WorkflowSucceeded))
	if v := append(flips.problems(), upgrades.problems()...); len(v) > 0 {
		t.Fatalf("actions without the claim: %v", v)
	}
	claimReleased(t, lockNS)
}

// claimReleased waits until no workflow holds the claim (a finished workflow releases it in
// the reconcile after its last transition).
func claimReleased(t *testing.T, lockNS string) {
	t.Helper()
	testenv.Eventually(t, waitLimit, func() string {
		var lease coordinationv1.Lease
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: lockNS, Name: engine.LockName}, &lease); err != nil {
			return err.Error()
		}
		if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != "" {
			return fmt.Sprintf("the claim is still held by %q after every workflow finished", h)
		}
		return ""
	})
}

// TestManualApprovalPausesEachNodeStep: an unhealthy cluster holds the preflight; then each
// step that changes a node waits for a person, who may approve only with the right to update
// the flip; the step records who approved it, and so does its audit record.
func TestManualApprovalPausesEachNodeStep(t *testing.T) {
	healthyCluster(t, nwv1.ClusterDegraded, false)
	lockNS := env.Namespace(t)
	flips := newFlips(lockNS)
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		return register(mgr, flips, clock.RealClock{}, nil)
	})
	f := flip("manual", nwv1.ApprovalManual, nil)
	create(t, f)
	waitFor(t, f, func(f *nwv1.BondModeFlipPlan) string {
		if step, reason, msg := heldBy(f); step != string(preflight) || reason != nwv1.ReasonClusterNotReady || !strings.Contains(msg, "Degraded") {
			return fmt.Sprintf("held at %q by %q (%s); want Preflight by ClusterNotReady", step, reason, msg)
		}
		return ""
	})
	healthyCluster(t, nwv1.ClusterMultiNode, true)
	waitFor(t, f, func(f *nwv1.BondModeFlipPlan) string {
		if step, reason, _ := heldBy(f); step != string(change1) || reason != nwv1.ReasonAwaitingApproval {
			return fmt.Sprintf("held at %q by %q; want ChangeNode1 awaiting approval", step, reason)
		}
		return ""
	})
	if got := flips.actedOn(f.Name); !slices.Equal(got, []workflow.Step{preflight}) {
		t.Fatalf("acted on %v before any approval; want only the preflight", got)
	}

	// A user who may read the flip but not update it cannot approve.
	mallory := readOnlyUser(t, "mallory")
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nwv1.AnnotationApprove, change1)))
	if err := mallory.Patch(context.Background(), f.DeepCopy(), patch); !apierrors.IsForbidden(err) {
		t.Fatalf("a user without update rights approved: %v", err)
	}
	approve(t, f, change1, "alice")
	waitFor(t, f, func(f *nwv1.BondModeFlipPlan) string {
		if s := stepOf(f, change1); s.State != nwv1.StepSucceeded || s.ApprovedBy != "alice" {
			return fmt.Sprintf("ChangeNode1 is %s approved by %q", s.State, s.ApprovedBy)
		}
		if step, reason, _ := heldBy(f); step != string(change2) || reason != nwv1.ReasonAwaitingApproval {
			return fmt.Sprintf("held at %q by %q; want ChangeNode2 awaiting approval", step, reason)
		}
		return ""
	})
	approve(t, f, change2, "bob")
	waitFor(t, f, phaseIs[*nwv1.BondModeFlipPlan](nwv1.WorkflowSucceeded))
	records := engine.TransitionRecords(f, plan{}, testKind("BondModeFlipPlan"), "operator")
	approvers := map[string]string{}
	for _, r := range records {
		for _, d := range r.Details {
			if d.Name == "approvedBy" {
				approvers[r.From] = d.Value
			}
		}
	}
	if approvers["Running/ChangeNode1"] != "alice" || approvers["Running/ChangeNode2"] != "bob" {
		t.Errorf("the audit records name the approvers %v; want ChangeNode1 by alice, ChangeNode2 by bob", approvers)
	}
}

// approve approves step as the webhook would stamp user (no webhook runs here).
func approve(t *testing.T, o client.Object, step workflow.Step, user string) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
		nwv1.AnnotationApprove, step, nwv1.AnnotationApprovedBy, user)))
	if err := env.Client.Patch(context.Background(), o, patch); err != nil {
		t.Fatal(err)
	}
}

// readOnlyUser is a client for a user who may get, list and watch BondModeFlipPlans only.
func readOnlyUser(t *testing.T, name string) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "engine-test-" + name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"bondmodeflipplans"},
			Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "engine-test-" + name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	c, err := client.New(env.User(t, name), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAClosingWindowHoldsTheNextStep: a step that started inside the window runs to its end
// after the window closed; the next waits, and the status says when the next window opens.
func TestAClosingWindowHoldsTheNextStep(t *testing.T) {
	healthyCluster(t, nwv1.ClusterMultiNode, true)
	lockNS := env.Namespace(t)
	monday10 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC) // a Monday
	clk := clocktesting.NewFakePassiveClock(monday10)
	flips := newFlips(lockNS)
	flips.hold(change1, true)
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		return register(mgr, flips, clk, nil)
	})
	f := flip("windowed", nwv1.ApprovalAutomatic, &nwv1.MaintenanceWindow{
		Days: []nwv1.Weekday{"Monday"}, Start: "09:00", End: "11:00", TimeZone: "UTC"})
	create(t, f)
	waitFor(t, f, func(f *nwv1.BondModeFlipPlan) string {
		if s := stepOf(f, change1); s.State != nwv1.StepRunning {
			return fmt.Sprintf("ChangeNode1 is %q, want Running inside the window", s.State)
		}
		return ""
	})
	clk.SetTime(monday10.Add(90 * time.Minute)) // 11:30: the window has closed
	flips.hold(change1, false)
	next := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	waitFor(t, f, func(f *nwv1.BondModeFlipPlan) string {
		if s := stepOf(f, change1); s.State != nwv1.StepSucceeded {
			return fmt.Sprintf("ChangeNode1 is %q: the step that started in the window must finish", s.State)
		}
		if step, reason, _ := heldBy(f); step != string(change2) || reason != nwv1.ReasonOutsideWindow {
			return fmt.Sprintf("held at %q by %q; want ChangeNode2 outside the window", step, reason)
		}
		if w := f.Status.NextWindowStart; w == nil || !w.Time.Equal(next) {
			return fmt.Sprintf("status.nextWindowStart is %v, want %s", w, next)
		}
		return ""
	})
	if got := flips.actedOn(f.Name); slices.Contains(got, change2) {
		t.Fatalf("ChangeNode2 acted outside the window: %v", got)
	}
	clk.SetTime(next.Add(time.Minute))
	// The real wake is a requeue at the opening, by the real clock; this clock is the test's.
	if err := env.Client.Patch(context.Background(), f, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"poke":"1"}}}`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f, phaseIs[*nwv1.BondModeFlipPlan](nwv1.WorkflowSucceeded))
	if f.Status.NextWindowStart != nil {
		t.Errorf("status.nextWindowStart is still %v after the step started", f.Status.NextWindowStart)
	}
}

// TestAPredicateCannotStallAWorkflow: a GenerationChangedPredicate on the workflow's own
// events filters out its status writes; the engine goes on after them all the same.
func TestAPredicateCannotStallAWorkflow(t *testing.T) {
	healthyCluster(t, nwv1.ClusterMultiNode, true)
	lockNS := env.Namespace(t)
	flips := newFlips(lockNS)
	ownEvents := predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, flip := o.(*nwv1.BondModeFlipPlan)
		return !flip
	}))
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		return register(mgr, flips, clock.RealClock{}, func(b *builder.Builder) *builder.Builder {
			return b.WithEventFilter(ownEvents)
		})
	})
	f := flip("filtered", nwv1.ApprovalAutomatic, nil)
	create(t, f)
	waitFor(t, f, phaseIs[*nwv1.BondModeFlipPlan](nwv1.WorkflowSucceeded))
}

// TestDeletedWhileWaitingIsCancelledBeforeTheStep: a flip deleted while a step waits for
// approval never performs that step; it rolls back and goes.
func TestDeletedWhileWaitingIsCancelledBeforeTheStep(t *testing.T) {
	healthyCluster(t, nwv1.ClusterMultiNode, true)
	lockNS := env.Namespace(t)
	flips := newFlips(lockNS)
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		return register(mgr, flips, clock.RealClock{}, nil)
	})
	f := flip("abandoned", nwv1.ApprovalManual, nil)
	if err := env.Client.Create(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	waitFor(t, f, func(f *nwv1.BondModeFlipPlan) string {
		if step, reason, _ := heldBy(f); step != string(change1) || reason != nwv1.ReasonAwaitingApproval {
			return fmt.Sprintf("held at %q by %q; want ChangeNode1 awaiting approval", step, reason)
		}
		return ""
	})
	deleteAndWait(t, f)
	if got := flips.actedOn(f.Name); !slices.Equal(got, []workflow.Step{preflight, undo1}) {
		t.Errorf("acted on %v; want the preflight, then only the undo of the step that never started", got)
	}
	claimReleased(t, lockNS)
}

// TestCrashAtEveryGateBoundary kills the operator right after each write of a gated flip (the
// claim, each step waiting and started, the end) and starts a new one: the flip still ends
// Succeeded, each action ran only under the claim, and the claim is released.
func TestCrashAtEveryGateBoundary(t *testing.T) {
	healthyCluster(t, nwv1.ClusterMultiNode, true)
	isLease := func(w testenv.Write) bool { _, ok := w.Object.(*coordinationv1.Lease); return ok }
	stepIs := func(step workflow.Step, state nwv1.StepState) func(testenv.Write) bool {
		return func(w testenv.Write) bool {
			f, ok := w.Object.(*nwv1.BondModeFlipPlan)
			return ok && w.SubResource == "status" && stepOf(f, step).State == state
		}
	}
	cases := map[string]func(testenv.Write) bool{
		"claimed": func(w testenv.Write) bool {
			return isLease(w) && ptr.Deref(w.Object.(*coordinationv1.Lease).Spec.HolderIdentity, "") != ""
		},
		"preflight-waiting": stepIs(preflight, nwv1.StepWaiting),
		"preflight-started": stepIs(preflight, nwv1.StepRunning),
		"change1-waiting":   stepIs(change1, nwv1.StepWaiting),
		"change1-started":   stepIs(change1, nwv1.StepRunning),
		"change2-started":   stepIs(change2, nwv1.StepRunning),
		"succeeded": func(w testenv.Write) bool {
			f, ok := w.Object.(*nwv1.BondModeFlipPlan)
			return ok && w.SubResource == "status" && f.Status.Phase == nwv1.WorkflowSucceeded
		},
	}
	for name, at := range cases {
		t.Run(name, func(t *testing.T) {
			lockNS := env.Namespace(t)
			flips := newFlips(lockNS)
			f := flip("crash-"+name, nwv1.ApprovalManual, nil)
			if err := env.Client.Create(context.Background(), f); err != nil {
				t.Fatal(err)
			}
			k := testenv.NewCrash(at)
			// A person approves each step as it waits, whichever operator is running.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go approveAsItWaits(ctx, f.Name, map[workflow.Step]string{change1: "alice", change2: "bob"})
			env.RunUntilCrash(t, k, cache.Options{}, func(_ context.Context, mgr manager.Manager, c client.Client, r client.Reader) error {
				return registerWith(mgr, c, r, flips, clock.RealClock{}, nil)
			})
			env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
				return register(mgr, flips, clock.RealClock{}, nil)
			})
			t.Cleanup(func() { deleteAndWait(t, f) }) // before the operator stops
			waitFor(t, f, phaseIs[*nwv1.BondModeFlipPlan](nwv1.WorkflowSucceeded))
			if s := stepOf(f, change1); s.ApprovedBy != "alice" {
				t.Errorf("ChangeNode1 approved by %q, want alice", s.ApprovedBy)
			}
			if v := flips.problems(); len(v) > 0 {
				t.Errorf("actions without the claim: %v", v)
			}
			claimReleased(t, lockNS)
		})
	}
}

// approveAsItWaits approves each step of the flip that waits for approval, as approvers
// names, until ctx ends.
func approveAsItWaits(ctx context.Context, name string, approvers map[workflow.Step]string) {
	for ctx.Err() == nil {
		f := &nwv1.BondModeFlipPlan{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, f); err == nil {
			if step, reason, _ := heldBy(f); reason == nwv1.ReasonAwaitingApproval && f.Annotations[nwv1.AnnotationApprove] != step {
				patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
					nwv1.AnnotationApprove, step, nwv1.AnnotationApprovedBy, approvers[workflow.Step(step)])))
				_ = env.Client.Patch(ctx, f, patch)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestObserveHoldsAWorkflowBeforeEachStep: while the cluster is observed (the legacy
// DaemonSet decides), a flip waits at its preflight, takes no claim and changes nothing; once
// Managed it runs; switched back to Observe mid-flight, the step that runs finishes and the
// next one waits, until the cluster is Managed again.
func TestObserveHoldsAWorkflowBeforeEachStep(t *testing.T) {
	clusterAs(t, nwv1.ManagementObserve, nwv1.ClusterMultiNode, true)
	lockNS := env.Namespace(t)
	flips := newFlips(lockNS)
	flips.hold(change1, true)
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		return register(mgr, flips, clock.RealClock{}, nil)
	})
	f := flip("observed", nwv1.ApprovalAutomatic, nil)
	create(t, f)
	heldAt := func(step workflow.Step) func(*nwv1.BondModeFlipPlan) string {
		return func(f *nwv1.BondModeFlipPlan) string {
			if s, reason, msg := heldBy(f); s != string(step) || reason != nwv1.ReasonNotManaged ||
				!strings.Contains(msg, "NodewrightCluster nodewright is in the Observe mode (spec.management)") {
				return fmt.Sprintf("held at %q by %q (%s); want %s by NotManaged", s, reason, msg, step)
			}
			return ""
		}
	}
	waitFor(t, f, heldAt(preflight))
	if got := flips.actedOn(f.Name); len(got) > 0 {
		t.Fatalf("acted on %v while the cluster was observed", got)
	}
	var lease coordinationv1.Lease
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: lockNS, Name: engine.LockName}, &lease); !apierrors.IsNotFound(err) {
		t.Fatalf("a workflow held by the management mode took the claim: %v %v", lease.Spec.HolderIdentity, err)
	}

	clusterAs(t, nwv1.ManagementManaged, nwv1.ClusterMultiNode, true)
	waitFor(t, f, func(f *nwv1.BondModeFlipPlan) string {
		if s := stepOf(f, change1); s.State != nwv1.StepRunning {
			return fmt.Sprintf("ChangeNode1 is %q, want Running once Managed", s.State)
		}
		return ""
	})
	// Back to Observe mid-flight: the running step finishes, the next one waits.
	clusterAs(t, nwv1.ManagementObserve, nwv1.ClusterMultiNode, true)
	flips.hold(change1, false)
	waitFor(t, f, heldAt(change2))
	if s := stepOf(f, change1); s.State != nwv1.StepSucceeded {
		t.Fatalf("ChangeNode1 is %q: the step that started while Managed must finish", s.State)
	}
	if got := flips.actedOn(f.Name); slices.Contains(got, change2) {
		t.Fatalf("ChangeNode2 acted while the cluster was observed: %v", got)
	}
	clusterAs(t, nwv1.ManagementManaged, nwv1.ClusterMultiNode, true)
	waitFor(t, f, phaseIs[*nwv1.BondModeFlipPlan](nwv1.WorkflowSucceeded))
}

// TestAGoneWorkflowEndsTheReconcile: the reconcile of a workflow that no longer exists (the
// last event of every deleted one) ends there, without an error.
func TestAGoneWorkflowEndsTheReconcile(t *testing.T) {
	flips := newFlips(env.Namespace(t))
	e := engine.New(flips.descriptor(), flips, engine.Deps{Clock: clock.RealClock{}})
	e.Client, e.APIReader = env.Client, env.Client
	result, err := e.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "never-was"}})
	if err != nil || !result.IsZero() {
		t.Fatalf("reconciling a workflow that does not exist: %+v, %v; want nothing to do", result, err)
	}
}
