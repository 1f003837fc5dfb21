package nodewrightcluster_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/controller/nodewrightcluster"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// wait bounds every wait on observed state: long enough for a busy CI machine, and no
// cost to a passing test, which goes on as soon as the state holds.
const wait = 2 * time.Minute

// expect waits until the cluster's status satisfies check (which says what is wrong).
func expect(f *bt.Fixture, check func(*nwv1.NodewrightCluster) string) {
	f.T.Helper()
	bt.Eventually(f.T, wait, func() string { return check(f.Status()) })
}

func phaseIs(phase nwv1.ClusterPhase, state legacy.State) func(*nwv1.NodewrightCluster) string {
	return func(c *nwv1.NodewrightCluster) string {
		if c.Status.Phase != phase || c.Status.LegacyState != state {
			return fmt.Sprintf("phase %q state %q, want %q %q", c.Status.Phase, c.Status.LegacyState, phase, state)
		}
		return ""
	}
}

func condition(c *nwv1.NodewrightCluster, t string) metav1.Condition {
	if cond := meta.FindStatusCondition(c.Status.Conditions, t); cond != nil {
		return *cond
	}
	return metav1.Condition{}
}

// TestEveryStateReachesItsPhase walks the 21 states in the contract's order and checks the
// phase each shows, with every node fresh.
func TestEveryStateReachesItsPhase(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1), f.Node(2))
	for _, s := range legacy.States() {
		f.Transition(s)
		expect(f, phaseIs(legacy.PhaseOf(s), s))
	}
	c := f.Status()
	if c.Status.Nodes != (nwv1.NodeCounts{Ready: 2, Total: 2}) || c.Status.LegacyGeneration != 21 {
		t.Errorf("nodes %+v generation %d", c.Status.Nodes, c.Status.LegacyGeneration)
	}
	if cond := condition(c, nwv1.ConditionStateRecognized); cond.Status != metav1.ConditionTrue {
		t.Errorf("StateRecognized = %+v", cond)
	}
}

func TestUnknownStateNamesTheValue(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1))
	f.Transition(legacy.SingleNodeReady)
	expect(f, phaseIs(nwv1.ClusterSingleNode, legacy.SingleNodeReady))

	f.Transition("DANCING")
	expect(f, func(c *nwv1.NodewrightCluster) string {
		cond := condition(c, nwv1.ConditionStateRecognized)
		if c.Status.Phase != nwv1.ClusterUnknown || cond.Status != metav1.ConditionFalse ||
			!strings.Contains(cond.Message, `key "state", value "DANCING": not one of the 21 states`) {
			return fmt.Sprintf("phase %s, StateRecognized %+v", c.Status.Phase, cond)
		}
		return ""
	})

	f.Data["node."+f.Node(1)+".drbd"] = "garbage"
	f.Transition(legacy.SingleNodeReady)
	expect(f, func(c *nwv1.NodewrightCluster) string {
		cond := condition(c, nwv1.ConditionStateRecognized)
		if c.Status.Phase != nwv1.ClusterUnknown || !strings.Contains(cond.Message, fmt.Sprintf(`key "node.%s.drbd", value "garbage"`, f.Node(1))) {
			return fmt.Sprintf("phase %s, StateRecognized %+v", c.Status.Phase, cond)
		}
		return ""
	})
}

// TestStaleHeartbeatDegradesTheCluster lets the heartbeats age past the threshold with no
// further write, so only the controller's own deadline can wake it, and expects it to report
// the stale nodes; a fresh heartbeat brings the cluster back.
func TestStaleHeartbeatDegradesTheCluster(t *testing.T) {
	f := bt.New(t, env, 2*time.Second)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1), f.Node(2))
	f.Transition(legacy.MultiNodeReady)
	multiNode := func() string { return phaseIs(nwv1.ClusterMultiNode, legacy.MultiNodeReady)(f.Status()) }
	f.EventuallyFresh(wait, multiNode, f.Node(1), f.Node(2))

	expect(f, func(c *nwv1.NodewrightCluster) string {
		cond := condition(c, nwv1.ConditionHeartbeatsFresh)
		if c.Status.Phase != nwv1.ClusterDegraded || c.Status.Nodes.Ready != 0 || cond.Status != metav1.ConditionFalse ||
			!strings.Contains(cond.Message, f.Node(1)+" (last heartbeat") || !strings.Contains(cond.Message, f.Node(2)+" (last heartbeat") {
			return fmt.Sprintf("phase %s ready %d HeartbeatsFresh %+v", c.Status.Phase, c.Status.Nodes.Ready, cond)
		}
		return ""
	})

	f.EventuallyFresh(wait, multiNode, f.Node(1), f.Node(2))
}

func TestConfigMapDeletedAndRecreated(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1))
	f.Transition(legacy.SingleNodeReady)
	expect(f, phaseIs(nwv1.ClusterSingleNode, legacy.SingleNodeReady))

	f.DeleteConfigMap()
	expect(f, func(c *nwv1.NodewrightCluster) string {
		cond := condition(c, nwv1.ConditionObserved)
		if c.Status.Phase != nwv1.ClusterUnknown || cond.Reason != nwv1.ReasonConfigMapNotFound ||
			!strings.Contains(cond.Message, f.Namespace+"/"+bt.ConfigMapName+" not found") {
			return fmt.Sprintf("phase %s Observed %+v", c.Status.Phase, cond)
		}
		return ""
	})

	f.Write()
	expect(f, phaseIs(nwv1.ClusterSingleNode, legacy.SingleNodeReady))
}

// TestContractViolationsAreWarned checks that a forbidden transition and a generation jump
// each raise a Warning Event on the cluster and a recent warning, once.
func TestContractViolationsAreWarned(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1))
	f.Transition(legacy.Init)
	expect(f, phaseIs(nwv1.ClusterBootstrap, legacy.Init))

	f.Transition(legacy.MultiNodeReady) // INIT → MULTI_NODE_READY is not allowed
	expect(f, hasWarning(nwv1.WarningFromTransition, string(legacy.ForbiddenTransition), "from INIT to MULTI_NODE_READY"))
	f.JumpTo(legacy.PeerDetected, 4)
	expect(f, hasWarning(nwv1.WarningFromTransition, string(legacy.GenerationJump), "3 transition(s) were not observed"))

	bt.Eventually(t, wait, func() string {
		reasons := clusterEventReasons(t, f.Cluster.UID)
		if reasons[string(legacy.ForbiddenTransition)] != 1 || reasons[string(legacy.GenerationJump)] != 1 {
			return fmt.Sprintf("Warning Events on the cluster: %v", reasons)
		}
		return ""
	})
}

func hasWarning(source nwv1.WarningSource, reason, text string) func(*nwv1.NodewrightCluster) string {
	return func(c *nwv1.NodewrightCluster) string {
		for _, w := range c.Status.RecentWarnings {
			if w.Source == source && w.Reason == reason && strings.Contains(w.Message, text) {
				return ""
			}
		}
		return fmt.Sprintf("no %s warning %s %q in %+v", source, reason, text, c.Status.RecentWarnings)
	}
}

// clusterEventReasons counts the Warning Events recorded on this test's NodewrightCluster by
// reason.
func clusterEventReasons(t *testing.T, uid types.UID) map[string]int32 {
	t.Helper()
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int32{}
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == uid && ev.Type == corev1.EventTypeWarning {
			reasons[ev.Reason] += max(ev.Count, 1)
		}
	}
	return reasons
}

func TestLegacyWarningEventsAreRolledUp(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1))
	f.Transition(legacy.SingleNodeReady)
	// Events about a cluster-scoped object (a Node) live in the default namespace.
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "legacy-"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: f.Node(1)},
		Type:           corev1.EventTypeWarning, Reason: "BondLinkDown", Message: "bond0: eth1 lost carrier",
		Source: corev1.EventSource{Component: bt.Component}, LastTimestamp: metav1.Now(),
	}
	if err := env.Client.Create(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ev) })
	expect(f, hasWarning(nwv1.WarningFromEvent, "BondLinkDown", "Node "+f.Node(1)+": bond0: eth1 lost carrier"))
}

func TestDaemonSetAvailability(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1))
	f.Transition(legacy.SingleNodeReady)
	expect(f, conditionIs(nwv1.ConditionDaemonSetAvailable, metav1.ConditionFalse, nwv1.ReasonDaemonSetNotFound))

	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: bt.DaemonSetName},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "node-init"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "node-init"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "node-init", Image: "node-init:1"}}},
			},
		},
	}
	ctx := context.Background()
	if err := env.Client.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, NumberReady: 2}
	if err := env.Client.Status().Update(ctx, ds); err != nil {
		t.Fatal(err)
	}
	expect(f, conditionIs(nwv1.ConditionDaemonSetAvailable, metav1.ConditionFalse, nwv1.ReasonPodsNotReady, "2 of 3 pods ready"))
	ds.Status.NumberReady = 3
	if err := env.Client.Status().Update(ctx, ds); err != nil {
		t.Fatal(err)
	}
	expect(f, conditionIs(nwv1.ConditionDaemonSetAvailable, metav1.ConditionTrue, nwv1.ReasonAllPodsReady, "3 of 3 pods ready"))
}

func conditionIs(t string, s metav1.ConditionStatus, reason string, text ...string) func(*nwv1.NodewrightCluster) string {
	return func(c *nwv1.NodewrightCluster) string {
		cond := condition(c, t)
		if cond.Status != s || cond.Reason != reason || (len(text) > 0 && !strings.Contains(cond.Message, text[0])) {
			return fmt.Sprintf("%s = %+v, want %s %s %v", t, cond, s, reason, text)
		}
		return ""
	}
}

// TestSteadyStateWritesNothing ticks heartbeats and restarts the operator, and expects no
// write to the cluster's status and no new warning.
func TestSteadyStateWritesNothing(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	stop := env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1), f.Node(2))
	f.Transition(legacy.SingleNodeReady)
	f.Transition(legacy.PeerDetected)
	expect(f, phaseIs(nwv1.ClusterUpgrading, legacy.PeerDetected))
	settled := f.Status()

	for i := 0; i < 4; i++ {
		time.Sleep(300 * time.Millisecond)
		f.Heartbeat(f.Node(1), f.Node(2))
	}
	stop()
	env.StartManager(t, operator.SetupControllers)
	for i := 0; i < 4; i++ {
		time.Sleep(300 * time.Millisecond)
		f.Heartbeat(f.Node(1), f.Node(2))
	}
	// The restarted operator has had time to reconcile the ticks above; the only legal
	// change from here is none.
	time.Sleep(time.Second)
	if now := f.Status(); now.ResourceVersion != settled.ResourceVersion {
		t.Errorf("the status was written at steady state: %+v", now.Status)
	}
	if reasons := clusterEventReasons(t, f.Cluster.UID); len(reasons) != 0 {
		t.Errorf("spurious warnings after a restart: %v", reasons)
	}
}

// TestContractViolationIsEventedOnceWhenTheWriteConflicts makes the status write that
// records a forbidden transition fail once, as it does when the cache was stale, and expects
// the retry not to raise the Warning Event a second time.
func TestContractViolationIsEventedOnceWhenTheWriteConflicts(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	recorder := record.NewFakeRecorder(100)
	var conflicting *bt.ConflictingStatus
	env.StartManager(t, func(ctx context.Context, mgr manager.Manager) error {
		conflicting = &bt.ConflictingStatus{Client: mgr.GetClient()}
		return (&nodewrightcluster.Reconciler{Client: conflicting, Recorder: recorder}).SetupWithManager(ctx, mgr)
	})
	f.SetNodes(f.Node(1))
	f.Transition(legacy.Init)
	expect(f, phaseIs(nwv1.ClusterBootstrap, legacy.Init))

	conflicting.FailNextStatusPatches(1)
	f.Transition(legacy.MultiNodeReady) // INIT → MULTI_NODE_READY is not allowed
	expect(f, hasWarning(nwv1.WarningFromTransition, string(legacy.ForbiddenTransition), "from INIT to MULTI_NODE_READY"))
	// A heartbeat makes the controller look again; nothing new may be raised.
	f.Heartbeat(f.Node(1))
	expect(f, func(c *nwv1.NodewrightCluster) string {
		if len(c.Status.RecentWarnings) != 1 {
			return fmt.Sprintf("want one recent warning, got %+v", c.Status.RecentWarnings)
		}
		return ""
	})
	// The Event follows the write; a duplicate from the failed attempt would precede it.
	var seen []string
	count := func() int {
		return bt.CountEvents(recorder.Events, &seen, corev1.EventTypeWarning, string(legacy.ForbiddenTransition))
	}
	bt.Eventually(t, wait, func() string {
		if count() == 0 {
			return "no ForbiddenTransition Event"
		}
		return ""
	})
	if n := count(); n != 1 {
		t.Errorf("the forbidden transition raised %d Warning Events, want 1: %q", n, seen)
	}
}
