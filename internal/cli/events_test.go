package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/profile"
)

func TestTheOperatorsEventSource(t *testing.T) {
	if operatorEventSource != operator.EventSource {
		t.Fatalf("events looks for %q, the operator writes %q", operatorEventSource, operator.EventSource)
	}
}

var eventsT0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

// event creates an Event; the test's cleanup deletes it (envtest runs no namespace controller,
// so a deleted namespace keeps its Events).
func event(t *testing.T, ns, name string, edit func(*corev1.Event)) {
	t.Helper()
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.EventTypeNormal}
	edit(e)
	if err := env.Client.Create(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), e) })
}

func at(d time.Duration) metav1.Time { return metav1.NewTime(eventsT0.Add(d)) }

func TestEventsMergedNewestLast(t *testing.T) {
	// Events about cluster-scoped objects (Nodes, the NodewrightCluster) are in default.
	legacyNS, otherNS := env.Namespace(t), metav1.NamespaceDefault
	createCluster(t, nwv1.NodewrightClusterSpec{Legacy: legacySource(legacyNS)}, nwv1.NodewrightClusterStatus{Phase: nwv1.ClusterMultiNode})

	// The legacy DaemonSet, through the old API (source.component) ...
	event(t, legacyNS, "state-changed", func(e *corev1.Event) {
		e.Source.Component = "node-init"
		e.InvolvedObject = corev1.ObjectReference{Kind: "ConfigMap", Namespace: legacyNS, Name: "node-init-state"}
		e.Reason, e.Message, e.LastTimestamp = "StateChanged", "MULTI_NODE_READY -> DRBD_DEGRADED", at(time.Minute)
	})
	// ... and the new one (reportingController, eventTime).
	event(t, otherNS, "drbd-standalone", func(e *corev1.Event) {
		e.ReportingController, e.ReportingInstance, e.Action = "node-init", "node-init-node-b", "Observe"
		e.Type, e.InvolvedObject = corev1.EventTypeWarning, corev1.ObjectReference{Kind: "Node", Name: "node-b"}
		e.Reason, e.Message, e.EventTime = "DRBDStandAlone", "resource pvc-1 is StandAlone", metav1.NewMicroTime(eventsT0.Add(3*time.Minute))
	})
	// Nodewright's.
	event(t, otherNS, "unexpected-transition", func(e *corev1.Event) {
		e.Source.Component, e.ReportingController = operator.EventSource, operator.EventSource
		e.Type, e.InvolvedObject = corev1.EventTypeWarning, corev1.ObjectReference{Kind: "NodewrightCluster", Name: "nodewright"}
		e.Reason, e.Message, e.LastTimestamp = "UnexpectedTransition", "MULTI_NODE_READY -> DRBD_DEGRADED is not a transition\nthe DaemonSet makes", at(2*time.Minute)
	})
	event(t, legacyNS, "step-succeeded", func(e *corev1.Event) {
		e.Source.Component = operator.EventSource
		e.InvolvedObject = corev1.ObjectReference{Kind: "VMVolumeMigration", Namespace: legacyNS, Name: "move-web"}
		e.Reason, e.Message, e.FirstTimestamp, e.LastTimestamp, e.Count = "StepSucceeded", "Validate", at(-time.Minute), at(0), 3
	})
	// Someone else's.
	event(t, legacyNS, "kubelet", func(e *corev1.Event) {
		e.Source.Component, e.Type = "kubelet", corev1.EventTypeWarning
		e.InvolvedObject = corev1.ObjectReference{Kind: "Pod", Namespace: legacyNS, Name: "p"}
		e.Reason, e.Message, e.LastTimestamp = "BackOff", "restarting", at(30*time.Second)
	})

	// Every namespace with -A (-n or not).
	r := plugin(t, runOpts{}, "events", "-A")
	r.wantCode(t, ExitOK)
	// The columns' widths depend on the namespace's name: compare the words of each row.
	want := `TIME TYPE SOURCE NAMESPACE OBJECT REASON MESSAGE
2026-11-21T09:00:00Z Normal nodewright-operator LEGACY vmvolumemigration/move-web StepSucceeded Validate (x3)
2026-11-21T09:01:00Z Normal node-init LEGACY configmap/node-init-state StateChanged MULTI_NODE_READY -> DRBD_DEGRADED
2026-11-21T09:02:00Z Warning nodewright-operator - nodewrightcluster/nodewright UnexpectedTransition MULTI_NODE_READY -> DRBD_DEGRADED is not a transition the DaemonSet makes
2026-11-21T09:03:00Z Warning node-init - node/node-b DRBDStandAlone resource pvc-1 is StandAlone`
	if got := words(strings.ReplaceAll(r.stdout, legacyNS, "LEGACY")); got != want {
		t.Errorf("events -A:\n%s\nwant (the words of each row):\n%s", r.stdout, want)
	}
	if r2 := plugin(t, runOpts{}, "events", "--all-namespaces", "-n", legacyNS); r2.stdout != r.stdout {
		t.Errorf("events --all-namespaces -n %s:\n%s\nwant every namespace's:\n%s", legacyNS, r2.stdout, r.stdout)
	}

	// Without -n, the namespace of the kubeconfig's context, as kubectl: none named, default.
	r = plugin(t, runOpts{}, "events")
	r.wantCode(t, ExitOK)
	if got, want := words(r.stdout), `TIME TYPE SOURCE OBJECT REASON MESSAGE
2026-11-21T09:02:00Z Warning nodewright-operator nodewrightcluster/nodewright UnexpectedTransition MULTI_NODE_READY -> DRBD_DEGRADED is not a transition the DaemonSet makes
2026-11-21T09:03:00Z Warning node-init node/node-b DRBDStandAlone resource pvc-1 is StandAlone`; got != want {
		t.Errorf("events, the context naming no namespace:\n%s\nwant default's:\n%s", r.stdout, want)
	}
	r = plugin(t, runOpts{kubeconfig: kubeconfigInNamespace(t, legacyNS)}, "events")
	r.wantCode(t, ExitOK)
	if rows := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(rows) != 3 || strings.Contains(rows[0], "NAMESPACE") || !strings.Contains(rows[1], "StepSucceeded") || !strings.Contains(rows[2], "StateChanged") {
		t.Errorf("events, the context's namespace %s:\n%s", legacyNS, r.stdout)
	}

	// Warnings only.
	r = plugin(t, runOpts{}, "events", "-A", "--warnings-only")
	r.wantCode(t, ExitOK)
	if rows := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(rows) != 3 || !strings.Contains(rows[1], "UnexpectedTransition") || !strings.Contains(rows[2], "DRBDStandAlone") {
		t.Errorf("--warnings-only:\n%s", r.stdout)
	}

	// One namespace, given with -n.
	r = plugin(t, runOpts{}, "events", "-n", legacyNS)
	r.wantCode(t, ExitOK)
	if rows := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(rows) != 3 || strings.Contains(rows[0], "NAMESPACE") || !strings.Contains(rows[1], "StepSucceeded") || !strings.Contains(rows[2], "StateChanged") {
		t.Errorf("-n %s:\n%s", legacyNS, r.stdout)
	}

	// JSON: the Events themselves, newest last.
	r = plugin(t, runOpts{}, "events", "-A", "-o", "json")
	r.wantCode(t, ExitOK)
	var list corev1.EventList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	var names []string
	for _, e := range list.Items {
		names = append(names, e.Name)
	}
	if list.Kind != "EventList" || strings.Join(names, " ") != "step-succeeded state-changed unexpected-transition drbd-standalone" {
		t.Errorf("-o json: kind %q, events %v", list.Kind, names)
	}
}

// kubeconfigInNamespace is an administrator's kubeconfig whose context names namespace ns.
func kubeconfigInNamespace(t *testing.T, ns string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfigPath(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// words is text with each line's runs of spaces made one.
func words(text string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

// With an EdgeProfile in force, the legacy Events are those of the profile's component.
func TestEventsFollowTheProfilesComponent(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	p := &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: "events-site"}, Spec: nwv1.EdgeProfileSpec{
		Version: "1.0.0", Topology: "ThreeNode", Storage: nwv1.ProfileStorage{Backend: "LINSTOR"}, OS: "Kairos",
		Network: nwv1.ProfileNetwork{BondInterface: "bond0", BondMode: nwv1.BondMode8023AD},
		Legacy:  &nwv1.LegacySource{ConfigMapRef: nwv1.NamespacedObjectReference{Namespace: ns, Name: "site-state"}, DaemonSetRef: nwv1.NamespacedObjectReference{Namespace: ns, Name: "site-init"}, EventComponent: "site-init"},
	}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	digest, err := profile.Digest(p.Spec)
	if err != nil {
		t.Fatal(err)
	}
	status := nwv1.NodewrightClusterStatus{Phase: nwv1.ClusterMultiNode, Profile: &nwv1.ActiveProfile{Name: p.Name, Version: "1.0.0", Digest: digest}}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: nwv1.ConditionProfileApplied, Status: metav1.ConditionTrue, Reason: nwv1.ReasonProfileApplied, Message: "in force"})
	createCluster(t, nwv1.NodewrightClusterSpec{Legacy: legacySource(ns), ProfileRef: &nwv1.ProfileReference{Name: p.Name}}, status)

	for _, component := range []string{"node-init", "site-init"} {
		event(t, ns, component, func(e *corev1.Event) {
			e.Source.Component, e.InvolvedObject = component, corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "state"}
			e.Reason, e.Message, e.LastTimestamp = "Hello", "from "+component, at(0)
		})
	}
	r := plugin(t, runOpts{}, "events", "-n", ns)
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "from site-init") || strings.Contains(r.stdout, "from node-init") {
		t.Errorf("with the profile in force, want site-init's Events only:\n%s", r.stdout)
	}

	// --legacy-component overrides.
	r = plugin(t, runOpts{}, "events", "-n", ns, "--legacy-component", "node-init")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "from node-init") || strings.Contains(r.stdout, "from site-init") {
		t.Errorf("--legacy-component node-init:\n%s", r.stdout)
	}

	// The profile's spec changed since it was applied (the digest no longer matches): the
	// cluster's own component again, as the operator does.
	p.Spec.Version, p.Spec.Legacy.EventComponent = "1.0.1", "changed"
	if err := env.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	r = plugin(t, runOpts{}, "events", "-n", ns)
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "from node-init") || strings.Contains(r.stdout, "from site-init") {
		t.Errorf("with the profile changed, want node-init's Events:\n%s", r.stdout)
	}
}

func TestEventsWithoutACluster(t *testing.T) {
	ns := env.Namespace(t)
	event(t, ns, "op", func(e *corev1.Event) {
		e.Source.Component, e.InvolvedObject = operator.EventSource, corev1.ObjectReference{Kind: "VMVolumeMigration", Namespace: ns, Name: "m"}
		e.Reason, e.Message, e.LastTimestamp = "StepSucceeded", "Copy", at(0)
	})
	r := plugin(t, runOpts{}, "events", "-n", ns)
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "StepSucceeded") || !strings.HasPrefix(r.stderr, `Warning: NodewrightCluster "nodewright" not found: showing Nodewright's Events only`) {
		t.Errorf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	empty := env.Namespace(t)
	r = plugin(t, runOpts{}, "events", "-n", empty, "--legacy-component", "x")
	r.wantCode(t, ExitOK)
	if r.stdout != "" || r.stderr != "No Events found in namespace "+empty+".\n" {
		t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
}
