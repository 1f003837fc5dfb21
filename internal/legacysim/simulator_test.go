package legacysim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// oldHeartbeat is a heartbeat written by hand, long before any the simulator writes.
const oldHeartbeat = "2001-01-01T00:00:00Z"

var siteSeq atomic.Int32

// newSite configures a simulator in a namespace that does not exist yet, as on a fresh
// cluster, and sets it up. The component is unique so the test finds its own Events among
// those other tests leave in "default".
func newSite(t *testing.T) (*Simulator, Config) {
	t.Helper()
	ns := env.Namespace(t) + "-legacy"
	component := fmt.Sprintf("node-init-%d", siteSeq.Add(1))
	cfg := Config{
		Client:    env.Client,
		ConfigMap: types.NamespacedName{Namespace: ns, Name: "node-init-state"},
		DaemonSet: types.NamespacedName{Namespace: ns, Name: "node-init"},
		Component: component,
		Nodes: []NodeSpec{
			{Name: "edge-1", Role: nwv1.NodeRolePrimary, BondMode: nwv1.BondModeActiveBackup},
			{Name: "edge-2", Role: nwv1.NodeRoleSecondary, BondMode: nwv1.BondModeActiveBackup},
			{Name: "edge-3", Role: nwv1.NodeRoleTiebreaker},
		},
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
	sim, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	return sim, cfg
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func data(t *testing.T, cfg Config) map[string]string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), cfg.ConfigMap, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

func mustParse(t *testing.T, d map[string]string) legacy.Observation {
	t.Helper()
	obs, problems := legacy.Parse(d)
	if len(problems) > 0 {
		t.Fatalf("the ConfigMap does not parse cleanly: %v", problems)
	}
	return obs
}

func TestSetupCreatesConfigMapAndDaemonSet(t *testing.T) {
	sim, cfg := newSite(t)
	ctx := context.Background()

	d := data(t, cfg)
	obs := mustParse(t, d)
	if obs.State != legacy.Init || obs.Generation != 1 || obs.PreviousState != "" {
		t.Errorf("initial state %s, generation %d, previous %q; want INIT, 1, empty", obs.State, obs.Generation, obs.PreviousState)
	}
	if _, ok := d[legacy.KeyPreviousState]; !ok {
		t.Error("previousState is not written")
	}
	if len(obs.Nodes) != 1 || obs.Nodes[0].Name != "edge-1" || obs.Nodes[0].Role != nwv1.NodeRolePrimary ||
		obs.Nodes[0].Heartbeat.IsZero() || obs.Nodes[0].BondMode != nwv1.BondModeActiveBackup {
		t.Errorf("initial nodes %+v, want edge-1 alone as a heartbeating primary", obs.Nodes)
	}

	ds := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, cfg.DaemonSet, ds); err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	if pod.NodeSelector["type"] != "kwok" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "kwok.x-k8s.io/node" ||
		pod.Tolerations[0].Effect != corev1.TaintEffectNoSchedule || pod.Containers[0].Image != DefaultImage {
		t.Errorf("DaemonSet pod spec cannot run on kwok: %+v", pod)
	}

	// Setup again on a running site changes nothing.
	if err := sim.Transition(ctx, legacy.NetworkConfiguring); err != nil {
		t.Fatal(err)
	}
	if err := sim.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := data(t, cfg)[legacy.KeyState]; got != string(legacy.NetworkConfiguring) {
		t.Errorf("a second Setup reset the state to %s", got)
	}
}

func TestTransitionBumpsGenerationAndWritesPreviousState(t *testing.T) {
	sim, cfg := newSite(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	prev, gen := legacy.Init, int64(1)
	for _, to := range []legacy.State{legacy.NetworkConfiguring, legacy.StorageBootstrapping, legacy.Failed, legacy.Init} {
		if err := sim.Transition(ctx, to); err != nil {
			t.Fatal(err)
		}
		gen++
		obs := mustParse(t, data(t, cfg))
		if obs.State != to || obs.PreviousState != prev || obs.Generation != gen {
			t.Errorf("after -> %s: state %s, previous %s, generation %d; want %s, %s, %d",
				to, obs.State, obs.PreviousState, obs.Generation, to, prev, gen)
		}
		if obs.Since.Before(before) {
			t.Errorf("stateSince %s is older than the transition", obs.Since)
		}
		prev = to
	}

	err := sim.Transition(ctx, legacy.MultiNodeReady)
	if !errors.Is(err, ErrForbidden) {
		t.Errorf("INIT -> MULTI_NODE_READY: %v, want ErrForbidden", err)
	}
	if obs := mustParse(t, data(t, cfg)); obs.State != legacy.Init || obs.Generation != gen {
		t.Errorf("a refused transition wrote: state %s, generation %d", obs.State, obs.Generation)
	}
}

// events lists the Events of this site's component in a namespace.
func events(t *testing.T, cfg Config, namespace string) []corev1.Event {
	t.Helper()
	list := &corev1.EventList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(e corev1.Event) bool { return e.Source.Component != cfg.Component })
}

func TestEventsCarryComponentAndType(t *testing.T) {
	sim, cfg := newSite(t)
	ctx := context.Background()
	for _, to := range []legacy.State{legacy.NetworkConfiguring, legacy.Failed} {
		if err := sim.Transition(ctx, to); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.JoinNode(ctx, cfg.Nodes[1]); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{"NETWORK_CONFIGURING": corev1.EventTypeNormal, "FAILED": corev1.EventTypeWarning}
	got := map[string]string{}
	for _, e := range events(t, cfg, cfg.ConfigMap.Namespace) {
		if e.ReportingController != cfg.Component || e.InvolvedObject.Kind != "ConfigMap" ||
			e.InvolvedObject.Name != cfg.ConfigMap.Name || e.Reason != ReasonStateChanged {
			t.Errorf("unexpected Event %+v", e)
		}
		for state := range want {
			if strings.Contains(e.Message, "-> "+state+" ") {
				got[state] = e.Type
			}
		}
	}
	for state, typ := range want {
		if got[state] != typ {
			t.Errorf("Event for the move to %s has type %q, want %q", state, got[state], typ)
		}
	}

	var joined bool
	for _, e := range events(t, cfg, "default") {
		if e.Reason == ReasonNodeJoined && e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == "edge-2" &&
			e.Type == corev1.EventTypeNormal && e.ReportingController == cfg.Component {
			joined = true
		}
	}
	if !joined {
		t.Error("no NodeJoined Event about Node edge-2")
	}
}

func TestEventType(t *testing.T) {
	for _, s := range legacy.States() {
		want := corev1.EventTypeNormal
		if slices.Contains([]legacy.State{legacy.PeerLost, legacy.DRBDDegraded, legacy.SplitBrain, legacy.Failed}, s) {
			want = corev1.EventTypeWarning
		}
		if got := EventType(s); got != want {
			t.Errorf("EventType(%s) = %s, want %s", s, got, want)
		}
	}
}

// age writes an old heartbeat for a node by hand, so a refresh is visible.
func age(t *testing.T, sim *Simulator, node string) {
	t.Helper()
	if err := sim.WriteGarbage(context.Background(), legacy.NodeKey(node, legacy.FieldHeartbeat), oldHeartbeat); err != nil {
		t.Fatal(err)
	}
}

func joinAll(t *testing.T, sim *Simulator, cfg Config) {
	t.Helper()
	for _, n := range cfg.Nodes[1:] {
		if err := sim.JoinNode(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHeartbeatRefreshesOnlyNonSilencedNodes(t *testing.T) {
	sim, cfg := newSite(t)
	ctx := context.Background()
	joinAll(t, sim, cfg)
	for _, n := range []string{"edge-1", "edge-2", "edge-3"} {
		age(t, sim, n)
	}
	if err := sim.Silence(ctx, "edge-2"); err != nil {
		t.Fatal(err)
	}
	beat, err := sim.Heartbeat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(beat, []string{"edge-1", "edge-3"}) {
		t.Errorf("Heartbeat refreshed %v, want edge-1 and edge-3", beat)
	}
	d := data(t, cfg)
	for node, stale := range map[string]bool{"edge-1": false, "edge-2": true, "edge-3": false} {
		if got := d[legacy.NodeKey(node, legacy.FieldHeartbeat)] == oldHeartbeat; got != stale {
			t.Errorf("%s heartbeat %s, stale=%v wanted", node, d[legacy.NodeKey(node, legacy.FieldHeartbeat)], stale)
		}
	}
	if err := sim.Silence(ctx, "edge-9"); err == nil {
		t.Error("silencing a node the ConfigMap does not list was accepted")
	}
}

// A heartbeat loop honours a silence and a resume written by another simulator (another
// process, in the demo) through the annotation.
func TestRunningHeartbeatsHonourAnnotation(t *testing.T) {
	sim, cfg := newSite(t)
	joinAll(t, sim, cfg)
	other, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sim.RunHeartbeats(ctx, 10*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	if err := other.Silence(context.Background(), "edge-3"); err != nil {
		t.Fatal(err)
	}
	if got := cmAnnotation(t, cfg); got != "edge-3" {
		t.Errorf("annotation %q, want edge-3", got)
	}
	age(t, other, "edge-3")
	age(t, other, "edge-1")
	waitFor(t, "edge-1's heartbeat to be refreshed", func(d map[string]string) bool {
		return d[legacy.NodeKey("edge-1", legacy.FieldHeartbeat)] != oldHeartbeat
	}, cfg)
	time.Sleep(50 * time.Millisecond)
	if got := data(t, cfg)[legacy.NodeKey("edge-3", legacy.FieldHeartbeat)]; got != oldHeartbeat {
		t.Errorf("silenced edge-3 got a heartbeat: %s", got)
	}

	if err := other.Resume(context.Background(), "edge-3"); err != nil {
		t.Fatal(err)
	}
	if got := cmAnnotation(t, cfg); got != "" {
		t.Errorf("annotation after resume %q, want none", got)
	}
	age(t, other, "edge-3")
	waitFor(t, "resumed edge-3's heartbeat to be refreshed by the loop", func(d map[string]string) bool {
		return d[legacy.NodeKey("edge-3", legacy.FieldHeartbeat)] != oldHeartbeat
	}, cfg)
}

func cmAnnotation(t *testing.T, cfg Config) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), cfg.ConfigMap, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Annotations[SilencedAnnotation]
}

func waitFor(t *testing.T, what string, cond func(map[string]string) bool, cfg Config) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond(data(t, cfg)) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMisbehaviours(t *testing.T) {
	sim, cfg := newSite(t)
	ctx := context.Background()

	if err := sim.ForceState(ctx, "NOT_A_STATE"); err != nil {
		t.Fatal(err)
	}
	d := data(t, cfg)
	if d[legacy.KeyState] != "NOT_A_STATE" || d[legacy.KeyPreviousState] != "INIT" || d[legacy.KeyGeneration] != "2" {
		t.Errorf("forced unknown state: %v", d)
	}
	if _, problems := legacy.Parse(d); len(problems) != 1 || problems[0].Key != legacy.KeyState {
		t.Errorf("problems %v, want one about the state", problems)
	}

	if err := sim.ForceState(ctx, legacy.Init); err != nil {
		t.Fatal(err)
	}
	to, err := sim.ForbiddenJump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	obs := mustParse(t, data(t, cfg))
	if obs.State != to || obs.PreviousState != legacy.Init || legacy.Allowed(legacy.Init, to) || obs.Generation != 4 {
		t.Errorf("forbidden jump wrote %s -> %s at generation %d (returned %s)", obs.PreviousState, obs.State, obs.Generation, to)
	}
	if anomalies := legacy.Check(obs, 3); len(anomalies) != 1 || anomalies[0].Kind != legacy.ForbiddenTransition {
		t.Errorf("anomalies %v, want a forbidden transition", anomalies)
	}

	if err := sim.JumpGeneration(ctx, 5); err != nil {
		t.Fatal(err)
	}
	obs = mustParse(t, data(t, cfg))
	if obs.Generation != 9 || obs.State != to {
		t.Errorf("after a jump of 5: generation %d, state %s; want 9, %s", obs.Generation, obs.State, to)
	}
	if anomalies := legacy.Check(obs, 4); len(anomalies) == 0 || anomalies[len(anomalies)-1].Kind != legacy.GenerationJump {
		t.Errorf("anomalies %v, want a generation jump", anomalies)
	}
	if err := sim.JumpGeneration(ctx, -100); err == nil {
		t.Error("a jump to a negative generation was accepted")
	}

	garbage := map[string]string{
		legacy.KeyGeneration:                           "many",
		legacy.NodeKey("edge-1", legacy.FieldDRBD):     "{not json",
		legacy.NodeKey("edge-1", legacy.FieldBondMode): "carrier-pigeon",
		"unrelated.key":                                "x",
	}
	for key, value := range garbage {
		if err := sim.WriteGarbage(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	d = data(t, cfg)
	for key, value := range garbage {
		if d[key] != value {
			t.Errorf("%s = %q, want %q", key, d[key], value)
		}
	}
	if err := sim.WriteGarbage(ctx, "bad key!", "x"); err == nil {
		t.Error("an invalid ConfigMap key was accepted")
	}
	// With the generation garbage, the simulator cannot count: it says so.
	if err := sim.Transition(ctx, legacy.Recovering); err == nil {
		t.Error("a transition over a garbage generation succeeded")
	}
}

func TestNodesDRBDAndBondMode(t *testing.T) {
	sim, cfg := newSite(t)
	ctx := context.Background()
	joinAll(t, sim, cfg)
	want := legacy.DRBD{Resources: 4, Connected: 3, UpToDate: 2, OutOfSyncKiB: 1024}
	if err := sim.SetDRBD(ctx, "edge-2", want); err != nil {
		t.Fatal(err)
	}
	if err := sim.SetBondMode(ctx, "edge-3", nwv1.BondMode8023AD); err != nil {
		t.Fatal(err)
	}
	obs := mustParse(t, data(t, cfg))
	if len(obs.Nodes) != 3 || obs.Nodes[1].DRBD == nil || *obs.Nodes[1].DRBD != want ||
		obs.Nodes[2].BondMode != nwv1.BondMode8023AD || obs.Nodes[2].Role != nwv1.NodeRoleTiebreaker {
		t.Errorf("nodes %+v", obs.Nodes)
	}
	if err := sim.SetDRBD(ctx, "edge-2", legacy.DRBD{Resources: 1, Connected: 2}); err == nil {
		t.Error("inconsistent DRBD counts were accepted")
	}

	if err := sim.RemoveNode(ctx, "edge-2"); err != nil {
		t.Fatal(err)
	}
	d := data(t, cfg)
	if d[legacy.KeyNodes] != "edge-1,edge-3" {
		t.Errorf("nodes after removing edge-2: %q", d[legacy.KeyNodes])
	}
	for key := range d {
		if strings.HasPrefix(key, "node.edge-2.") {
			t.Errorf("key %s left behind", key)
		}
	}
	if err := sim.SetDRBD(ctx, "edge-2", want); err == nil {
		t.Error("DRBD for a removed node was accepted")
	}
}

// The full scenario, played twice as --loop does, with a heartbeat loop running alongside.
func TestPlayFullScenarioTwice(t *testing.T) {
	sim, cfg := newSite(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sim.RunHeartbeats(ctx, 5*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	sc, err := BuiltIn(ScenarioFull, []string{"edge-1", "edge-2", "edge-3"})
	if err != nil {
		t.Fatal(err)
	}
	transitions := 0
	for _, st := range sc.Steps {
		if st.Kind == StepTransition {
			transitions++
		}
	}
	for round := 1; round <= 2; round++ {
		if err := sim.Play(ctx, sc, 10*time.Millisecond); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		obs := mustParse(t, data(t, cfg))
		if obs.State != legacy.MultiNodeReady || len(obs.Nodes) != 3 {
			t.Fatalf("round %d ended in %s with %d nodes", round, obs.State, len(obs.Nodes))
		}
		if round == 1 && obs.Generation != int64(1+transitions) {
			t.Errorf("generation %d after %d transitions from 1", obs.Generation, transitions)
		}
		for _, n := range obs.Nodes {
			if n.DRBD == nil || n.DRBD.UpToDate != n.DRBD.Resources || n.DRBD.OutOfSyncKiB != 0 || n.Heartbeat.IsZero() {
				t.Errorf("round %d: node %+v is not healthy", round, n)
			}
		}
		if silenced, _ := sim.Silenced(ctx); len(silenced) != 0 {
			t.Errorf("round %d left %v silenced", round, silenced)
		}
	}
}

// A scenario that starts later than INIT gets the site there first.
func TestPlayPreparesTheStart(t *testing.T) {
	sim, _ := newSite(t)
	ctx := context.Background()
	sc, err := BuiltIn(ScenarioPeerLost, []string{"edge-1", "edge-2", "edge-3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Play(ctx, sc, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	obs, problems, err := sim.Observe(ctx)
	if err != nil || len(problems) > 0 {
		t.Fatalf("Observe: %v, problems %v", err, problems)
	}
	if obs.State != legacy.MultiNodeReady || len(obs.Nodes) != 3 {
		t.Errorf("ended in %s with %d nodes", obs.State, len(obs.Nodes))
	}
}

// A cancelled context is an error, never a write that silently did not happen.
func TestCancelledContextIsAnError(t *testing.T) {
	sim, _ := newSite(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sim.Transition(ctx, legacy.NetworkConfiguring); !errors.Is(err, context.Canceled) {
		t.Errorf("Transition with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := sim.Heartbeat(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Heartbeat with a cancelled context: %v, want context.Canceled", err)
	}
}

// A custom scenario with every kind of step, misbehaviours included.
func TestPlayCustomScenario(t *testing.T) {
	sim, cfg := newSite(t)
	sc := Scenario{
		Name: "custom", From: legacy.Init, Joined: []string{"edge-1"},
		Steps: []Step{
			Join("edge-2"), SetBondMode("edge-2", nwv1.BondModeBalanceXOR), Wait(time.Millisecond),
			Silence("edge-2"), Resume("edge-2"), Remove("edge-2"),
			Force(legacy.MultiNodeReady), JumpGeneration(3), Garbage("unrelated", "x"),
		},
	}
	if err := sim.Play(context.Background(), sc, 0); err != nil {
		t.Fatal(err)
	}
	d := data(t, cfg)
	if d[legacy.KeyState] != string(legacy.MultiNodeReady) || d[legacy.KeyGeneration] != "5" || d[legacy.KeyNodes] != "edge-1" ||
		d["unrelated"] != "x" || d[legacy.NodeKey("edge-2", legacy.FieldBondMode)] != "" {
		t.Errorf("after the custom scenario: %v", d)
	}
}
