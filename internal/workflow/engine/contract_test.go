package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// The engine's contract with a kind, each rule tried on a real API server with a small kind
// of two ungated steps on VMVolumeMigration objects (no controller of theirs runs here).

const stepOne, stepTwo = workflow.Step("One"), workflow.Step("Two")

type twoSteps struct{}

func (twoSteps) Forward() []workflow.Step               { return []workflow.Step{stepOne, stepTwo} }
func (twoSteps) Rollback(workflow.Step) []workflow.Step { return nil }
func (twoSteps) Irreversible(workflow.Step) bool        { return false }

// contractKind runs twoSteps with the actions and Finish a test gives it, counting the calls
// of Finish.
type contractKind struct {
	actions engine.Actions[*nwv1.VMVolumeMigration]
	finish  func(calls int, run *engine.Run[*nwv1.VMVolumeMigration]) engine.Finished

	mu       sync.Mutex
	finished int
}

func (k *contractKind) Actions() engine.Actions[*nwv1.VMVolumeMigration] { return k.actions }

func (k *contractKind) Finish(_ context.Context, run *engine.Run[*nwv1.VMVolumeMigration]) (engine.Finished, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.finished++
	if k.finish == nil {
		return engine.Tidied("nothing to tidy"), nil
	}
	return k.finish(k.finished, run), nil
}

func (k *contractKind) finishes() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.finished
}

const (
	contractName = "nodewright.spectrocloud.com/contract-test"
	contractUID  = "nodewright.spectrocloud.com/contract-test-uid"
)

func contractDescriptor(name string) *engine.Descriptor[*nwv1.VMVolumeMigration] {
	return &engine.Descriptor[*nwv1.VMVolumeMigration]{
		Kind: workflow.Kind{Name: "VMVolumeMigration", AuditAction: "ContractTransition", Succeeded: "done", RolledBack: "rolled back",
			Cancelled: "deleted", Noun: "migration"},
		Controller: name,
		New:        func() *nwv1.VMVolumeMigration { return &nwv1.VMVolumeMigration{} },
		NewList:    func() client.ObjectList { return &nwv1.VMVolumeMigrationList{} },
		Plan:       func(*nwv1.VMVolumeMigration) workflow.Plan { return twoSteps{} },
		Plans:      func() []workflow.Plan { return []workflow.Plan{twoSteps{}} },
		Finalizer:  "nodewright.spectrocloud.com/contract-test",
		NameLabel:  contractName,
		UIDLabel:   contractUID,
	}
}

// runContract starts a manager running k as described by d on the migrations of namespace
// ns alone: those of the other tests, left behind, are not this kind's.
func runContract(t *testing.T, ns string, d *engine.Descriptor[*nwv1.VMVolumeMigration], k *contractKind, discovery servedapis.Discovery) {
	t.Helper()
	env.StartManagerWithCache(t, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}, func(_ context.Context, mgr manager.Manager) error {
		e := engine.New(d, k, engine.Deps{Recorder: mgr.GetEventRecorderFor("contract-test"), Clock: clock.RealClock{}, Discovery: discovery})
		_, err := e.Setup(mgr)
		return err
	})
}

// newMigration creates a migration in namespace ns (only its workflow status is read here).
func newMigration(t *testing.T, ns, name string) *nwv1.VMVolumeMigration {
	t.Helper()
	m := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nwv1.VMVolumeMigrationSpec{VMName: "vm", VolumeName: "disk", Target: nwv1.MigrationTarget{StorageClassName: "fast"}}}
	if err := env.Client.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func succeed(_ context.Context, run *engine.Run[*nwv1.VMVolumeMigration]) (engine.Outcome, error) {
	return engine.Succeeded("%s done", run.State.Step), nil
}

func stepSays(step workflow.Step, state nwv1.StepState, text string) func(*nwv1.VMVolumeMigration) string {
	return func(m *nwv1.VMVolumeMigration) string {
		s := stepOf(m, step)
		if s.State != state || !strings.Contains(s.Message, text) {
			return fmt.Sprintf("step %s is %s saying %q; want %s saying %q", step, s.State, s.Message, state, text)
		}
		return ""
	}
}

// TestAnActionThatChangesMoreThanTheStatusFailsTheStep: the engine writes the status alone;
// an action that changed the object's spec or labels would have them dropped without a word,
// so the step fails saying so, and nothing of the change reaches the API server.
func TestAnActionThatChangesMoreThanTheStatusFailsTheStep(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	k := &contractKind{actions: engine.Actions[*nwv1.VMVolumeMigration]{
		stepOne: func(_ context.Context, run *engine.Run[*nwv1.VMVolumeMigration]) (engine.Outcome, error) {
			run.Object.Spec.VMName = "another-vm"
			run.Object.Labels = map[string]string{"changed": "by-the-action"}
			return engine.Succeeded("changed the spec"), nil
		},
		stepTwo: succeed,
	}}
	runContract(t, ns, contractDescriptor("contract-spec"), k, nil)
	m := newMigration(t, ns, "changes-spec")
	waitFor(t, m, phaseIs[*nwv1.VMVolumeMigration](nwv1.WorkflowRolledBack))
	if s := stepOf(m, stepOne); s.State != nwv1.StepFailed || !strings.Contains(s.Message, "changed the migration's spec or metadata") {
		t.Errorf("step One is %s saying %q; want Failed, naming the change the engine does not write", s.State, s.Message)
	}
	if m.Spec.VMName != "vm" || m.Labels["changed"] != "" {
		t.Errorf("the action's change reached the API server: spec %+v, labels %v", m.Spec, m.Labels)
	}
}

// TestAnOutcomeThatSaysNothingIsAnError: the zero Outcome once meant "wait, silently"; it is
// retried as an error whose message the step shows.
func TestAnOutcomeThatSaysNothingIsAnError(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	k := &contractKind{actions: engine.Actions[*nwv1.VMVolumeMigration]{
		stepOne: func(context.Context, *engine.Run[*nwv1.VMVolumeMigration]) (engine.Outcome, error) {
			return engine.Outcome{}, nil
		},
		stepTwo: succeed,
	}}
	runContract(t, ns, contractDescriptor("contract-silent"), k, nil)
	m := newMigration(t, ns, "says-nothing")
	waitFor(t, m, stepSays(stepOne, nwv1.StepRunning, "its action said nothing"))
}

// TestAStepWithoutAnActionFails: a plan's step that the kind's table lacks fails at once,
// naming it, rather than being retried for ever (the conformance test catches it before).
func TestAStepWithoutAnActionFails(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	k := &contractKind{actions: engine.Actions[*nwv1.VMVolumeMigration]{stepOne: succeed}}
	runContract(t, ns, contractDescriptor("contract-missing"), k, nil)
	m := newMigration(t, ns, "no-action")
	waitFor(t, m, phaseIs[*nwv1.VMVolumeMigration](nwv1.WorkflowRolledBack))
	if s := stepOf(m, stepTwo); s.State != nwv1.StepFailed || !strings.Contains(s.Message, "step Two has no action") {
		t.Errorf("step Two is %s saying %q; want Failed, saying it has no action", s.State, s.Message)
	}
}

// TestFinishRunsUntilDoneAndSaysSo: Finish runs until it is done, its messages in the
// CleanedUp condition; once done it is not called again until the workflow is deleted, when
// it runs once more and the finalizer goes.
func TestFinishRunsUntilDoneAndSaysSo(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	k := &contractKind{actions: engine.Actions[*nwv1.VMVolumeMigration]{stepOne: succeed, stepTwo: succeed},
		finish: func(calls int, run *engine.Run[*nwv1.VMVolumeMigration]) engine.Finished {
			switch {
			case run.Deleting:
				return engine.Tidied("let go after %d calls", calls)
			case calls < 3:
				return engine.Tidying(0, "still tidying (call %d)", calls)
			}
			return engine.Tidied("tidied after %d calls", calls)
		}}
	d := contractDescriptor("contract-finish")
	runContract(t, ns, d, k, nil)
	m := newMigration(t, ns, "finishes")
	cleaned := func(status metav1.ConditionStatus, text string) func(*nwv1.VMVolumeMigration) string {
		return func(m *nwv1.VMVolumeMigration) string {
			c := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionCleanedUp)
			if c == nil || c.Status != status || !strings.Contains(c.Message, text) {
				return fmt.Sprintf("CleanedUp is %+v; want %s saying %q", c, status, text)
			}
			return ""
		}
	}
	waitFor(t, m, cleaned(metav1.ConditionTrue, "tidied after 3 calls"))
	// Reconciles of the finished workflow: Finish, done, is not called again.
	calls := k.finishes()
	direct := engine.New(d, k, engine.Deps{Clock: clock.RealClock{}})
	direct.Client, direct.APIReader = env.Client, env.Client
	for range 3 {
		if _, err := direct.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	testenvGone(t, m)
	if got := k.finishes(); got != calls+1 || calls != 3 {
		t.Errorf("Finish ran %d times before the deletion and %d in all; want 3, then once more for the deletion", calls, got)
	}
}

// testenvGone waits until o is gone: its finalizer let go.
func testenvGone(t *testing.T, o client.Object) {
	t.Helper()
	testenv.Eventually(t, waitLimit, func() string {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o)
		switch {
		case apierrors.IsNotFound(err):
			return ""
		case err != nil:
			return err.Error()
		}
		return fmt.Sprintf("%s still exists, finalizers %v", o.GetName(), o.GetFinalizers())
	})
}

// TestAChildIsLabelledAndWakesItsOwner: children.Ensure labels a child as its owner's,
// whatever labels the action gave it, and a change to the child wakes its owner through
// the descriptor's watch (OwnerOf), not a timer: the step waits an hour otherwise.
func TestAChildIsLabelledAndWakesItsOwner(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	d := contractDescriptor("contract-child")
	d.Children = []engine.Child{{Object: &corev1.ConfigMap{}}}
	k := &contractKind{actions: engine.Actions[*nwv1.VMVolumeMigration]{
		stepOne: func(ctx context.Context, run *engine.Run[*nwv1.VMVolumeMigration]) (engine.Outcome, error) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: run.Object.Namespace, Name: run.Object.Name + "-child",
				Labels: map[string]string{"made-by": "step-one"}}}
			if err := children.Ensure(ctx, env.Client, env.Client, d.Owner(run.Object), "ConfigMap", cm); err != nil {
				return engine.Outcome{}, err
			}
			if cm.Data["go"] != "on" {
				return engine.Waiting(time.Hour, "waiting for the child to say go on"), nil
			}
			return engine.Succeeded("the child said go on"), nil
		},
		stepTwo: succeed,
	}}
	runContract(t, ns, d, k, nil)
	m := newMigration(t, ns, "parent")
	waitFor(t, m, stepSays(stepOne, nwv1.StepRunning, "waiting for the child"))
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "parent-child"}, cm); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{children.LabelManagedBy: children.ManagedBy, contractName: "parent", contractUID: string(m.UID), "made-by": "step-one"} {
		if cm.Labels[k] != v {
			t.Errorf("the child's labels are %v; want %s=%s", cm.Labels, k, v)
		}
	}
	cm.Data = map[string]string{"go": "on"}
	if err := env.Client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, phaseIs[*nwv1.VMVolumeMigration](nwv1.WorkflowSucceeded))
}

// TestAGateCheckTakesNoClaim: checking the gates only reads. A flip held by the cluster's
// health never took the claim (it was taken while "checking", before the health gate): a
// workflow that cannot start holds nothing another needs.
func TestAGateCheckTakesNoClaim(t *testing.T) {
	clusterAs(t, nwv1.ManagementManaged, nwv1.ClusterMultiNode, false)
	lockNS := env.Namespace(t)
	flips := newFlips(lockNS)
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		return register(mgr, flips, clock.RealClock{}, nil)
	})
	f := flip("held-by-health", nwv1.ApprovalAutomatic, nil)
	create(t, f)
	waitFor(t, f, func(f *nwv1.BondModeFlipPlan) string {
		if step, reason, _ := heldBy(f); step != string(preflight) || reason != nwv1.ReasonClusterNotReady {
			return fmt.Sprintf("held at %q for %q; want Preflight, ClusterNotReady", step, reason)
		}
		return ""
	})
	var lease coordinationv1.Lease
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: lockNS, Name: engine.LockName}, &lease); !apierrors.IsNotFound(err) {
		t.Fatalf("a flip held by the cluster's health holds the claim (%v, holder %v); checking a gate must write nothing", err, lease.Spec.HolderIdentity)
	}
	healthyCluster(t, nwv1.ClusterMultiNode, true)
	waitFor(t, f, phaseIs[*nwv1.BondModeFlipPlan](nwv1.WorkflowSucceeded))
}

// widgets is the API of TestAKindWaitsForItsAPIsAndStartsOnceServed: served by no one
// until the test installs its CustomResourceDefinition.
var widgets = schema.GroupVersionKind{Group: "widgets.engine-test.nodewright.io", Version: "v1", Kind: "Widget"}

// TestAKindWaitsForItsAPIsAndStartsOnceServed: a kind that needs an API the cluster does not
// serve waits, naming it, with the Succeeded condition Unknown for APIsMissing and a Warning
// Event; once its CustomResourceDefinition is installed, with the operator running, the
// workflow starts and ends, with no restart.
func TestAKindWaitsForItsAPIsAndStartsOnceServed(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	d := contractDescriptor("contract-apis")
	d.APIs = servedapis.Kinds{widgets}
	k := &contractKind{actions: engine.Actions[*nwv1.VMVolumeMigration]{stepOne: succeed, stepTwo: succeed}}
	runContract(t, ns, d, k, nil)
	m := newMigration(t, ns, "needs-widgets")
	waitFor(t, m, func(m *nwv1.VMVolumeMigration) string {
		c := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded)
		if m.Status.Phase != nwv1.WorkflowPending || c == nil || c.Reason != nwv1.ReasonAPIsMissing || !strings.Contains(c.Message, "Widget") {
			return fmt.Sprintf("phase %q, Succeeded %+v; want Pending, APIsMissing naming Widget", m.Status.Phase, c)
		}
		return ""
	})
	testenvEvent(t, m, corev1.EventTypeWarning, nwv1.ReasonAPIsMissing)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + widgets.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: widgets.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: widgets.Kind, ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: widgets.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					XPreserveUnknownFields: ptrTo(true)}}}}},
	}
	if err := env.Client.Create(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crd) })
	waitFor(t, m, phaseIs[*nwv1.VMVolumeMigration](nwv1.WorkflowSucceeded))
}

func ptrTo[T any](v T) *T { return &v }

// testenvEvent waits for an Event of type and reason on o.
func testenvEvent(t *testing.T, o client.Object, eventType, reason string) {
	t.Helper()
	waitFor(t, o.(*nwv1.VMVolumeMigration), func(*nwv1.VMVolumeMigration) string {
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events, client.InNamespace(o.GetNamespace())); err != nil {
			return err.Error()
		}
		for _, e := range events.Items {
			if e.InvolvedObject.UID == o.GetUID() && e.Type == eventType && e.Reason == reason {
				return ""
			}
		}
		return fmt.Sprintf("no %s Event %s on %s", eventType, reason, o.GetName())
	})
}
