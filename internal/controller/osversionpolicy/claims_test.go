package osversionpolicy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
)

// TestThePreflightRefusesAnImageTheProfileNoLongerAllows: a policy admitted while the signed
// EdgeProfile in force allowed its image's repository finds, at its Preflight, a new version of
// the profile that allows only another repository: the Preflight fails naming spec.image, the
// profile and what it allows, the policy stops RolledBack, and the node is untouched (not
// cordoned, nothing asked of its agent, the same boot).
func TestThePreflightRefusesAnImageTheProfileNoLongerAllows(t *testing.T) {
	s := plant(t, false, "osprof-1")
	ctx := context.Background()
	before := s.booted("osprof-1")
	p := s.policy("osprof", newVersion, soakFor, 2*time.Minute)
	profileInForce(t, "1.1.0", "registry.local/edge/kairos")
	s.startOperator()
	// Gone before the operator stops (the policy's own clean-up waits for that, after it).
	t.Cleanup(func() {
		if err := env.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		testenv.Eventually(t, patience, func() string {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &nwv1.OSVersionPolicy{}); !apierrors.IsNotFound(err) {
				return "the policy is still there"
			}
			return ""
		})
	})

	p = s.ended(p, nwv1.WorkflowRolledBack)
	want := "spec.image: the EdgeProfile " + clusterplay.ProfileName + " 1.1.0 in force allows only registry.local/edge/kairos (spec.osImages): neither " +
		s.images[newVersion] + " nor its repository " + kairosplay.DefaultRepository + "; the nodes' agents would refuse to stage it"
	if msg := stepMessage(p, string(osupgrade.Preflight)); !strings.Contains(msg, want) {
		t.Errorf("the Preflight says %q; want %q", msg, want)
	}
	if cordoned, by := unschedulable(t, "osprof-1"); cordoned {
		t.Errorf("osprof-1 is cordoned (%q)", by)
	}
	var ops nwv1.NodeOperationList
	if err := env.Client.List(ctx, &ops, client.InNamespace(s.ns), client.MatchingLabels{osupgrade.LabelName: p.Name}); err != nil {
		t.Fatal(err)
	}
	if len(ops.Items) > 0 {
		t.Errorf("the policy asked %d operations of the agent, the first %s", len(ops.Items), ops.Items[0].Name)
	}
	if got := s.booted("osprof-1"); got != before {
		t.Errorf("osprof-1 was touched: %+v, before %+v", got, before)
	}
}

// profileInForce signs a new version of the played site's EdgeProfile that allows only
// osImages, and records it in force, as the cluster's controller does once it verified it.
func profileInForce(t *testing.T, version string, osImages ...string) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &nwv1.EdgeProfile{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: clusterplay.ProfileName}, p); err != nil {
			return err
		}
		p.Spec.Version, p.Spec.OSImages = version, osImages
		if err := clusterplay.Sign(p); err != nil {
			return err
		}
		return env.Client.Update(ctx, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, c); err != nil {
			return err
		}
		c.Status.Profile.Version = version
		return env.Client.Status().Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTheDrainAndTheUncordonAtDeletion, on one Kairos node with pods of every kind on it:
//
//   - the drain evicts, through the Eviction API, the pods that are neither a DaemonSet's, nor
//     mirror pods, nor in the agents' or the operator's namespace, nor ended, and one bound to
//     the node after it began; it records them in status.nodes[].drained and waits until they
//     are gone, not merely terminating; a pod whose namespace is being deleted (which refuses
//     its eviction) is waited for; a pod whose disruption budget refuses its eviction keeps it
//     waiting, saying so; once drainTimeout has passed (the engine's clock is moved past it)
//     the step fails naming the pod;
//   - that policy deleted, it uncordons the node it cordoned and drained, never staged;
//   - a node a person cordoned before stays cordoned when such a policy is deleted;
//   - a node that staged the image (and fell back) stays cordoned when its policy is
//     deleted, and the policy's last word says so.
func TestTheDrainAndTheUncordonAtDeletion(t *testing.T) {
	const node = "osdrain-1"
	s := plant(t, false, node)
	ctx := context.Background()
	clock := &shiftedClock{}
	s.startOperatorAt(clock)
	apps := env.Namespace(t)
	pods := podsOn(node)
	startKubelet := pods.kubelet(t)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: "node-exporter"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "node-exporter"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "node-exporter"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "node-exporter:1"}}}}}}
	if err := env.Client.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	appA, appB := pods.run(t, apps, "app-a", corev1.PodRunning, nil), pods.run(t, apps, "app-b", corev1.PodRunning, nil)
	survivors := []string{
		pods.run(t, apps, "node-exporter-x1", corev1.PodRunning, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}
		}),
		pods.run(t, apps, "kube-vip-"+node, corev1.PodRunning, func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "c0ffee"}
		}),
		pods.run(t, apps, "backup-done", corev1.PodSucceeded, nil),
		pods.run(t, apps, "backup-failed", corev1.PodFailed, nil),
		pods.run(t, s.ns, "agent-helper", corev1.PodRunning, nil),
		pods.run(t, s.lockNS, "operator", corev1.PodRunning, nil),
	}
	// A pod whose namespace is being deleted: the API server refuses any eviction in it
	// (Forbidden, NamespaceTerminating) until the namespace controller, which does not run
	// here, has deleted it.
	leaving := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "osdrain-leaving-"}}
	if err := env.Client.Create(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	cron := pods.run(t, leaving.Name, "cron-1", corev1.PodRunning, nil)
	if err := env.Client.Delete(ctx, leaving); err != nil {
		t.Fatal(err)
	}
	budget := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: apps, Name: "app-b"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app-b"}}}}
	if err := env.Client.Create(ctx, budget); err != nil {
		t.Fatal(err)
	}
	// No disruption controller runs here: its status is written as it would write it, app-b
	// healthy and none of its pods allowed to go. (A budget it has not processed yet also
	// refuses, but asks the client to retry in 10 s, which client-go does, within the call.)
	budget.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: budget.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if err := env.Client.Status().Update(ctx, budget); err != nil {
		t.Fatal(err)
	}

	var first *nwv1.OSVersionPolicy
	ok := t.Run("the drain evicts through the Eviction API, waits on a budget and fails at its timeout", func(t *testing.T) {
		first = s.policy("osdrain", newVersion, soakFor, 2*time.Minute)
		// Evicted, app-a waits for its kubelet (none has run yet); app-b's budget refuses; the
		// cron pod's namespace refuses.
		drainSays(t, first, waitingFor(node, []string{appA, appB, cron}, appB))
		drained(t, first, appA, appB, cron)
		a := pods.get(t, appA)
		if a == nil || a.DeletionTimestamp == nil {
			t.Fatalf("app-a is not being deleted: %+v", a)
		}
		if c := podCondition(a, corev1.DisruptionTarget); c == nil || c.Reason != "EvictionByEvictionAPI" {
			t.Errorf("app-a's condition %s: %+v; want it evicted through the Eviction API", corev1.DisruptionTarget, c)
		}
		// A pod bound to the node since (its nodeName set: the cordon does not stop it) is
		// evicted by a later pass, which still waits for app-a, terminating.
		appC := pods.run(t, apps, "app-c", corev1.PodRunning, nil)
		drainSays(t, first, waitingFor(node, []string{appA, appB, appC, cron}, appB))
		drained(t, first, appA, appB, appC, cron)
		// Their kubelet confirms their deletion; then the namespace controller deletes the cron
		// pod: the drain waits for app-b alone.
		startKubelet()
		drainSays(t, first, waitingFor(node, []string{appB, cron}, appB))
		if err := env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: leaving.Name, Name: "cron-1"}}); err != nil {
			t.Fatal(err)
		}
		drainSays(t, first, waitingFor(node, []string{appB}, appB))
		for _, pod := range []string{appA, appC, cron} {
			if p := pods.get(t, pod); p != nil {
				t.Errorf("%s is still there: %+v", pod, p.ObjectMeta)
			}
		}
		for _, pod := range append(survivors, appB) {
			if p := pods.get(t, pod); p == nil || p.DeletionTimestamp != nil {
				t.Errorf("%s was deleted, or is being deleted", pod)
			}
		}

		clock.shift(drainTimeout + time.Minute)
		first = s.ended(first, nwv1.WorkflowFailed)
		clock.shift(0)
		drain := part(firstNode(t, first), osupgrade.Drain)
		want := fmt.Sprintf("%s (node 1): not drained within %s: %s still there; refused by their disruption budgets: %s", node, drainTimeout, appB, appB)
		if drain == nil || drain.State != nwv1.StepFailed || drain.Message != want {
			t.Errorf("the Drain: %+v; want it Failed saying %q", drain, want)
		}
		if n := firstNode(t, first); n.Phase != nwv1.NodeOSFailed || part(n, osupgrade.Stage) != nil {
			t.Errorf("%s: %s, parts %+v; want Failed, never staged", node, n.Phase, n.Parts)
		}
		if p := pods.get(t, appB); p == nil || p.DeletionTimestamp != nil {
			t.Errorf("app-b, which its budget protects, was deleted")
		}
	})
	if !ok {
		return
	}

	ok = t.Run("deleted, it uncordons the node it cordoned and drained, never staged", func(t *testing.T) {
		if cordoned, by := unschedulable(t, node); !cordoned || by != osupgrade.CordonedBy(first.Name) {
			t.Fatalf("%s: cordoned %t by %q; want the policy's cordon", node, cordoned, by)
		}
		said := deletedSaying(t, first)
		if cordoned, by := unschedulable(t, node); cordoned || by != "" {
			t.Errorf("%s: cordoned %t by %q after the policy's deletion; want it uncordoned", node, cordoned, by)
		}
		if want := "uncordoned " + node + " (drained, never staged)"; !strings.Contains(said, want) {
			t.Errorf("the deletion says %q; want %q", said, want)
		}
	})
	if !ok {
		return
	}

	ok = t.Run("deleted, it leaves the cordon a person made before", func(t *testing.T) {
		cordon(t, node, true)
		p := s.policy("osdrain-person", newVersion, soakFor, 2*time.Minute)
		drainSays(t, p, waitingFor(node, []string{appB}, appB))
		clock.shift(drainTimeout + time.Minute)
		p = s.ended(p, nwv1.WorkflowFailed)
		clock.shift(0)
		if c := firstNode(t, p).Cordon; c != nwv1.NodeWasCordoned {
			t.Errorf("the policy recorded the cordon %q; want %s", c, nwv1.NodeWasCordoned)
		}
		said := deletedSaying(t, p)
		if cordoned, by := unschedulable(t, node); !cordoned || by != "" {
			t.Errorf("%s: cordoned %t by %q after the policy's deletion; want the person's cordon kept", node, cordoned, by)
		}
		if strings.Contains(said, "uncordoned") {
			t.Errorf("the deletion says %q", said)
		}
		cordon(t, node, false)
	})
	if !ok {
		return
	}

	t.Run("deleted, it leaves cordoned a node that staged the image, saying so", func(t *testing.T) {
		if err := env.Client.Delete(ctx, budget); err != nil {
			t.Fatal(err)
		}
		if err := s.hosts[node].SetFault(kairosplay.FaultFailBoot, true, s.images[newVersion]); err != nil {
			t.Fatal(err)
		}
		p := s.ended(s.policy("osdrain-staged", newVersion, soakFor, 2*time.Minute), nwv1.WorkflowFailed)
		if n := firstNode(t, p); n.Phase != nwv1.NodeOSFellBack || part(n, osupgrade.Stage) == nil {
			t.Fatalf("%s: %s, parts %+v; want FellBack after its stage", node, n.Phase, n.Parts)
		}
		said := deletedSaying(t, p)
		if cordoned, by := unschedulable(t, node); !cordoned || by != osupgrade.CordonedBy(p.Name) {
			t.Errorf("%s: cordoned %t by %q after the policy's deletion; want it left cordoned by the policy", node, cordoned, by)
		}
		if want := "left cordoned, for a person to look at: " + node + " (FellBack)"; !strings.Contains(said, want) || strings.Contains(said, "uncordoned") {
			t.Errorf("the deletion says %q; want %q", said, want)
		}
	})
}

// drainTimeout is how long a drain waits for the node's pods to go (scope.go's, 10 minutes
// as docs/osversion.md says).
const drainTimeout = 10 * time.Minute

// shiftedClock is the real clock moved forward by an offset the test sets: the engine's clock
// (engine.Deps.Clock), so that a time limit of the policy's passes without the test waiting
// for it.
type shiftedClock struct{ offset atomic.Int64 }

func (c *shiftedClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *shiftedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *shiftedClock) shift(d time.Duration)           { c.offset.Store(int64(d)) }

// startOperatorAt is startOperator with the engine's clock clk.
func (s *site) startOperatorAt(clk *shiftedClock) {
	asOperator := env.AsOperatorUnderPolicies(s.t, "nodewright-system")
	env.StartManagerAsWithCache(s.t, asOperator, s.cacheOptions(), func(_ context.Context, mgr manager.Manager) error {
		r := s.reconciler(mgr, mgr.GetClient(), nil)
		r.Clock = clk
		return r.SetupWithManager(mgr)
	})
}

// firstNode is the record of the policy's first node.
func firstNode(t *testing.T, p *nwv1.OSVersionPolicy) nwv1.NodeOSUpgrade {
	t.Helper()
	if len(p.Status.Nodes) == 0 {
		t.Fatalf("the policy records no node; steps %s", steps(p))
	}
	return p.Status.Nodes[0]
}

// drainSays waits until the Drain part of p's first node says msg; p is read into as it is then.
func drainSays(t *testing.T, p *nwv1.OSVersionPolicy, msg string) {
	t.Helper()
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err.Error()
		}
		var drain *nwv1.OSUpgradePart
		if len(p.Status.Nodes) > 0 {
			drain = part(p.Status.Nodes[0], osupgrade.Drain)
		}
		if drain == nil || drain.Message != msg {
			if p.Status.Phase.Finished() {
				t.Fatalf("the policy ended %s; the Drain %+v; want it saying %q; steps %s", p.Status.Phase, drain, msg, steps(p))
			}
			return fmt.Sprintf("the Drain %+v; want it saying %q (phase %s, steps %s)", drain, msg, p.Status.Phase, steps(p))
		}
		return ""
	})
}

// waitingFor is what the Drain says while the pods left are on node, those refused refused
// by their disruption budgets (the pods in the order the API server lists them).
func waitingFor(node string, left []string, refused ...string) string {
	msg := fmt.Sprintf("draining %s: waiting for %s to go", node, strings.Join(slices.Sorted(slices.Values(left)), ", "))
	if len(refused) > 0 {
		msg += "; refused for now by their disruption budgets: " + strings.Join(refused, ", ")
	}
	return msg
}

// drained checks that status.nodes[0].drained of p lists the pods want.
func drained(t *testing.T, p *nwv1.OSVersionPolicy, want ...string) {
	t.Helper()
	got := slices.Sorted(slices.Values(firstNode(t, p).Drained))
	if !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("status.nodes[0].drained %v; want %v", got, want)
	}
}

func stepMessage(p *nwv1.OSVersionPolicy, step string) string {
	for _, st := range p.Status.Steps {
		if st.Name == step {
			return st.Message
		}
	}
	return ""
}

// cordon sets node's spec.unschedulable as a person does (kubectl cordon, uncordon).
func cordon(t *testing.T, node string, on bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		n.Spec.Unschedulable = on
		return env.Client.Update(context.Background(), n)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// deletedSaying deletes p, waits until it is gone, and returns what its last CleanedUp
// condition said: what the policy did at its deletion (the object goes with it, so it is read
// from the watch's last event).
func deletedSaying(t *testing.T, p *nwv1.OSVersionPolicy) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &nwv1.OSVersionPolicyList{}, client.MatchingFields{"metadata.name": p.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := env.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	var last *nwv1.OSVersionPolicy
	for ev := range w.ResultChan() {
		if o, ok := ev.Object.(*nwv1.OSVersionPolicy); ok {
			last = o
		}
		if ev.Type == watch.Deleted {
			if c := meta.FindStatusCondition(last.Status.Conditions, nwv1.ConditionCleanedUp); c != nil {
				return c.Message
			}
			t.Fatalf("the policy went without a %s condition: %+v", nwv1.ConditionCleanedUp, last.Status.Conditions)
		}
	}
	t.Fatalf("the policy %s was not gone within %s", p.Name, patience)
	return ""
}

// nodePods are the pods the test puts on a node, and the played kubelet of that node: no
// kubelet runs in the test, so a pod evicted (a graceful deletion) stays, terminating, until
// the played kubelet is started; from then on its deletion is confirmed, as a kubelet does
// once the pod's containers have stopped.
type nodePods struct{ node string }

func podsOn(node string) *nodePods { return &nodePods{node: node} }

// run creates the pod namespace/name on the node, in phase, after change, and returns
// "namespace/name".
func (n *nodePods) run(t *testing.T, namespace, name string, phase corev1.PodPhase, change func(*corev1.Pod)) string {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: n.node, Containers: []corev1.Container{{Name: "c", Image: name + ":1"}}}}
	if change != nil {
		change(pod)
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// Gone with the test: no namespace controller deletes it with its namespace here.
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
	})
	pod.Status.Phase = phase
	if phase == corev1.PodRunning {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return namespace + "/" + name
}

// get is the pod "namespace/name", nil once it is gone.
func (n *nodePods) get(t *testing.T, key string) *corev1.Pod {
	t.Helper()
	namespace, name, _ := strings.Cut(key, "/")
	pod := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, pod); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	return pod
}

// kubelet plays the node's kubelet until the test ends: once start is called, it confirms
// the deletion of every pod on the node that is being deleted.
func (n *nodePods) kubelet(t *testing.T) (start func()) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-started:
		}
		for ctx.Err() == nil {
			// A watch from no resourceVersion begins with every pod there is.
			w, err := wc.Watch(ctx, &corev1.PodList{}, client.MatchingFields{"spec.nodeName": n.node})
			if err != nil {
				select { // a retry after an error, not a wait for state
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			for ev := range w.ResultChan() {
				if pod, ok := ev.Object.(*corev1.Pod); ok && pod.DeletionTimestamp != nil {
					_ = env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
				}
			}
			w.Stop()
		}
	}()
	return sync.OnceFunc(func() { close(started) })
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}
