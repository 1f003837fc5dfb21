package bootrecoverypolicy_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit/audittest"
	"github.com/spectrocloud/nodewright/internal/controller/bootrecoverypolicy"
	"github.com/spectrocloud/nodewright/internal/nodecordon"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// The policy's tests run its controller against a real API server, as the operator's user
// under the chart's admission policies (its cordon of a node in recovery passes them). The
// nodes' reports are written as an agent writes them (the agent reads a played Kairos host's
// boot into the same fields: internal/agent's and test/site/siteagent/kairossite's tests).

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// patience bounds every wait: only a stuck test reaches it.
const patience = 3 * time.Minute

const (
	oldImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2-k3sv1.32.4-k3s1"
	newImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.32.4-k3s1"
	digest   = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// cluster is the test's nodes, their agents' reports and heartbeat Leases, and the controller.
type cluster struct {
	t     *testing.T
	ns    string
	trail *audittest.Memory
	clock *clocktesting.FakePassiveClock
}

func start(t *testing.T, nodes ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, ns: env.Namespace(t), trail: &audittest.Memory{}, clock: clocktesting.NewFakePassiveClock(time.Now())}
	ctx := context.Background()
	for _, name := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if err := env.Client.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &metav1.MicroTime{Time: time.Now()}}}
		if err := env.Client.Create(ctx, lease); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
			_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
	}
	asOperator := env.AsOperatorUnderPolicies(t, "nodewright-system")
	env.StartManagerAsWithCache(t, asOperator, operator.CacheOptions(operator.Scope{Agent: c.ns}), func(_ context.Context, mgr manager.Manager) error {
		return (&bootrecoverypolicy.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("bootrecovery-test"),
			Audit: c.trail, Actor: "nodewright-operator", AgentNamespace: c.ns, Clock: c.clock}).SetupWithManager(mgr)
	})
	p := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	return c
}

// report writes node's agent report of its Kairos boot (and its DRBD, when d is set).
func (c *cluster) report(node, bootID string, k nwv1.KairosStatus, d *nwv1.DRBDStatus) {
	c.t.Helper()
	c.reportUnits(node, bootID, k, d, nil)
}

// reportUnits writes node's agent report as report does, with the systemd units' states.
func (c *cluster) reportUnits(node, bootID string, k nwv1.KairosStatus, d *nwv1.DRBDStatus, units []nwv1.SystemdUnitStatus) {
	c.t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		a := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, a); err != nil {
			a = &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}}
			if err := env.Client.Create(ctx, a); err != nil {
				return err
			}
		}
		a.Status.Heartbeat = nwv1.HeartbeatStatus{LastSeen: ptr.To(metav1.Now())}
		a.Status.OS = &nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, BootID: bootID, Kairos: k.DeepCopy(), SystemdUnits: units}
		a.Status.Storage = d
		return env.Client.Status().Update(ctx, a)
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// policy waits until the policy's status satisfies check ("" when it does, else why not).
func policy(t *testing.T, check func(p *nwv1.BootRecoveryPolicy) string) *nwv1.BootRecoveryPolicy {
	t.Helper()
	var p *nwv1.BootRecoveryPolicy
	testenv.Eventually(t, patience, func() string {
		p = &nwv1.BootRecoveryPolicy{}
		if err := env.Client.Get(context.Background(), bootrecoverypolicy.Key, p); err != nil {
			return err.Error()
		}
		return check(p)
	})
	return p
}

// event waits for a policy Event with reason whose message contains what.
func event(t *testing.T, reason, what string) {
	t.Helper()
	testenv.EventSaid(t, env.Client, patience, "BootRecoveryPolicy", "", reason, what)
}

// gauge is the value of a metric of the policy's, for the labels given (summed over others).
func gauge(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue metric
				}
			}
			total += m.GetGauge().GetValue()
		}
	}
	return total
}

func annotate(t *testing.T, values map[string]string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &nwv1.BootRecoveryPolicy{}
		if err := env.Client.Get(context.Background(), bootrecoverypolicy.Key, p); err != nil {
			return err
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for k, v := range values {
			p.Annotations[k] = v
		}
		return env.Client.Update(context.Background(), p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func healthyDRBD() *nwv1.DRBDStatus {
	return &nwv1.DRBDStatus{Resources: 2, Connected: 2, UpToDate: 2}
}

// TestBootRecovery: the policy names a fallback and pins the node until a person acknowledges
// that boot (a later fallback is not acknowledged in advance); cordons a node that boots its
// recovery system and lifts only its own cordon once the node boots its active image; and
// alerts a boot whose health (DRBD that never reconnects) is not green in time, while a boot
// whose health is green passes.
func TestBootRecovery(t *testing.T) {
	c := start(t, "br-1", "br-2", "br-3")
	active := nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive, Image: oldImage, BootAssessment: &nwv1.KairosBootAssessment{}}
	for _, n := range []string{"br-1", "br-2", "br-3"} {
		c.report(n, n+"-boot-0", active, healthyDRBD())
	}
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if len(p.Status.Nodes) != 3 || testenv.ConditionText(p.Status.Conditions, nwv1.ConditionFellBack)[:5] != "False" {
			return fmt.Sprintf("nodes %+v, FellBack %s", p.Status.Nodes, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionFellBack))
		}
		for _, n := range p.Status.Nodes {
			if n.PostBootHealth == nil || n.PostBootHealth.PassedAt == nil {
				return fmt.Sprintf("%s's post-boot health %+v; want passed", n.Name, n.PostBootHealth)
			}
		}
		return ""
	})

	t.Run("a fallback is named, pins the node, and is acknowledged by its boot", func(t *testing.T) {
		seen := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
		fb := &nwv1.KairosFallback{FromImage: newImage + digest, ToImage: oldImage, BootID: "br-1-boot-1", SeenAt: seen}
		c.report("br-1", "br-1-boot-1", nwv1.KairosStatus{BootEntry: nwv1.KairosBootPassive, Image: oldImage, UpgradeFailure: true,
			BootAssessment: &nwv1.KairosBootAssessment{Enabled: true}, LastFallback: fb}, healthyDRBD())
		want := fmt.Sprintf("br-1 fell back from %s to %s at boot br-1-boot-1", newImage+digest, oldImage)
		p := policy(t, func(p *nwv1.BootRecoveryPolicy) string {
			n := p.Node("br-1")
			if n == nil || n.LastFallback == nil || n.PinnedImage != oldImage || p.Status.FellBack != "br-1" ||
				!strings.Contains(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionFellBack), want) {
				return fmt.Sprintf("br-1 %+v, fellBack %q, FellBack %s", n, p.Status.FellBack, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionFellBack))
			}
			return ""
		})
		if n := p.Node("br-1"); n.BootEntry != nwv1.KairosBootPassive || !n.UpgradeFailure || n.Acknowledged != nil {
			t.Errorf("br-1 %+v; want Passive, upgradeFailure, not acknowledged", n)
		}
		event(t, bootrecoverypolicy.ReasonFellBack, want)
		rec := c.trail.Find(nwv1.BootRecoveryPolicyName, oldImage)
		if rec == nil || rec.Action != bootrecoverypolicy.ActionFellBack || rec.From != newImage+digest || !strings.Contains(rec.Message, want) {
			t.Errorf("the audit record of the fallback is %+v; want %s from %s to %s saying %q", rec, bootrecoverypolicy.ActionFellBack, newImage+digest, oldImage, want)
		}
		if g := gauge(t, "nodewright_node_boot_fallback", map[string]string{"node": "br-1", "from_image": newImage + digest}); g != 1 {
			t.Errorf("nodewright_node_boot_fallback{node=br-1} = %v; want 1", g)
		}

		annotate(t, map[string]string{nwv1.AnnotationAcknowledgeFallback: "br-1@br-1-boot-1", nwv1.AnnotationAcknowledgedBy: "alice"})
		p = policy(t, func(p *nwv1.BootRecoveryPolicy) string {
			n := p.Node("br-1")
			if n.Acknowledged == nil || n.PinnedImage != "" || p.Status.FellBack != "" || !strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionFellBack), "False") {
				return fmt.Sprintf("br-1 %+v, FellBack %s", n, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionFellBack))
			}
			return ""
		})
		if a := p.Node("br-1").Acknowledged; a.By != "alice" || a.BootID != "br-1-boot-1" {
			t.Errorf("acknowledged %+v; want by alice, boot br-1-boot-1", a)
		}
		if rec := c.trail.Find(nwv1.BootRecoveryPolicyName, "Acknowledged"); rec == nil || rec.Action != bootrecoverypolicy.ActionFallbackAcknowledged {
			t.Errorf("the acknowledgement's audit record is %+v", rec)
		}
		if g := gauge(t, "nodewright_node_boot_fallback", map[string]string{"node": "br-1"}); g != 0 {
			t.Errorf("nodewright_node_boot_fallback{node=br-1} = %v after the acknowledgement; want 0", g)
		}

		// The node falls back again, at another boot: the acknowledgement of the first does
		// not hold for it.
		fb2 := &nwv1.KairosFallback{FromImage: newImage + digest, ToImage: oldImage, BootID: "br-1-boot-3", SeenAt: seen}
		c.report("br-1", "br-1-boot-3", nwv1.KairosStatus{BootEntry: nwv1.KairosBootPassive, Image: oldImage, UpgradeFailure: true,
			BootAssessment: &nwv1.KairosBootAssessment{}, LastFallback: fb2}, healthyDRBD())
		policy(t, func(p *nwv1.BootRecoveryPolicy) string {
			n := p.Node("br-1")
			if n.Acknowledged != nil || n.PinnedImage != oldImage || p.Status.FellBack != "br-1" {
				return fmt.Sprintf("br-1 %+v after its second fallback; want it pinned, not acknowledged", n)
			}
			return ""
		})
		annotate(t, map[string]string{nwv1.AnnotationAcknowledgeFallback: "br-1@br-1-boot-3"})
		policy(t, func(p *nwv1.BootRecoveryPolicy) string {
			if n := p.Node("br-1"); n.Acknowledged == nil || n.PinnedImage != "" {
				return fmt.Sprintf("br-1 %+v; want the second fallback acknowledged", n)
			}
			return ""
		})
	})

	t.Run("a recovery boot is cordoned and alerted; only the policy's cordon is lifted", func(t *testing.T) {
		// br-3 was cordoned by a person before it booted its recovery system.
		cordon(t, "br-3", "")
		recovery := nwv1.KairosStatus{BootEntry: nwv1.KairosBootRecovery, Image: oldImage}
		c.report("br-2", "br-2-boot-1", recovery, nil)
		c.report("br-3", "br-3-boot-1", recovery, nil)
		p := policy(t, func(p *nwv1.BootRecoveryPolicy) string {
			if p.Node("br-2").Cordon != nwv1.NodeCordoned || p.Node("br-3").Cordon != nwv1.NodeWasCordoned || p.Status.Recovery != "br-2,br-3" {
				return fmt.Sprintf("br-2 %+v, br-3 %+v, recovery %q", p.Node("br-2"), p.Node("br-3"), p.Status.Recovery)
			}
			return ""
		})
		if got := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionRecoveryBoot); !strings.HasPrefix(got, "True") {
			t.Errorf("RecoveryBoot %s; want True", got)
		}
		if on, by := cordoned(t, "br-2"); !on || by != bootrecoverypolicy.CordonedBy {
			t.Errorf("br-2 cordoned %v by %q; want cordoned by %s", on, by, bootrecoverypolicy.CordonedBy)
		}
		event(t, bootrecoverypolicy.ReasonRecoveryBoot, "br-2 booted its recovery system (boot br-2-boot-1)")
		if g := gauge(t, "nodewright_node_recovery_boot", map[string]string{"node": "br-2"}); g != 1 {
			t.Errorf("nodewright_node_recovery_boot{node=br-2} = %v; want 1", g)
		}
		if rec := c.trail.Find(nwv1.BootRecoveryPolicyName, string(nwv1.KairosBootRecovery)); rec == nil || rec.Action != bootrecoverypolicy.ActionRecoveryBoot {
			t.Errorf("the recovery boot's audit record is %+v", rec)
		}

		// Both boot their active image again: br-2 is uncordoned, br-3 stays as its person left it.
		c.report("br-2", "br-2-boot-2", active, healthyDRBD())
		c.report("br-3", "br-3-boot-2", active, healthyDRBD())
		policy(t, func(p *nwv1.BootRecoveryPolicy) string {
			if p.Node("br-2").Cordon != nwv1.NodeUncordoned || p.Status.Recovery != "" {
				return fmt.Sprintf("br-2 %+v, recovery %q", p.Node("br-2"), p.Status.Recovery)
			}
			return ""
		})
		if on, _ := cordoned(t, "br-2"); on {
			t.Error("br-2 is still cordoned after it booted its active image")
		}
		if on, _ := cordoned(t, "br-3"); !on {
			t.Error("br-3, cordoned by a person, was uncordoned")
		}
	})

	t.Run("post-boot health that times out is alerted", func(t *testing.T) {
		// br-2 boots again, and its DRBD never reconnects; br-3's boot is healthy.
		c.report("br-2", "br-2-boot-3", active, &nwv1.DRBDStatus{Resources: 2, Connected: 1, UpToDate: 1,
			ResourceStatuses: []nwv1.DRBDResourceStatus{{Name: "pvc-one", Peers: []nwv1.DRBDPeerStatus{{Name: "br-1", ConnectionState: "Connecting"}}}}})
		uki := active
		uki.BootCounting = &nwv1.KairosBootCounting{TriesLeft: 2, TriesDone: 1}
		c.report("br-3", "br-3-boot-3", uki, healthyDRBD())
		policy(t, func(p *nwv1.BootRecoveryPolicy) string {
			if b := p.Node("br-3").BootCounting; b == nil || b.TriesLeft != 2 || b.TriesDone != 1 {
				return fmt.Sprintf("br-3's boot counting %+v; want 2 left, 1 done", b)
			}
			h := p.Node("br-2").PostBootHealth
			if h == nil || h.BootID != "br-2-boot-3" || !strings.Contains(h.Failing, "1 of 2 DRBD resources connected") ||
				!strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy), "Unknown") {
				return fmt.Sprintf("br-2's health %+v, PostBootHealthy %s", h, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy))
			}
			if h3 := p.Node("br-3").PostBootHealth; h3 == nil || h3.BootID != "br-3-boot-3" || h3.PassedAt == nil {
				return fmt.Sprintf("br-3's health %+v; want its new boot passed", h3)
			}
			return ""
		})
		// The policy's clock passes the deadline (15 minutes, the default); a report wakes it.
		c.clock.SetTime(c.clock.Now().Add(16 * time.Minute))
		c.report("br-2", "br-2-boot-3", active, &nwv1.DRBDStatus{Resources: 2, Connected: 1, UpToDate: 1})
		p := policy(t, func(p *nwv1.BootRecoveryPolicy) string {
			h := p.Node("br-2").PostBootHealth
			if h == nil || h.TimedOutAt == nil || p.Status.Unhealthy != "br-2" || !strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy), "False") {
				return fmt.Sprintf("br-2's health %+v, unhealthy %q, PostBootHealthy %s", h, p.Status.Unhealthy, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy))
			}
			return ""
		})
		if h := p.Node("br-3").PostBootHealth; h.TimedOutAt != nil {
			t.Errorf("br-3's passed boot timed out too: %+v", h)
		}
		event(t, bootrecoverypolicy.ReasonPostBootHealthTimeout, "br-2's health was not green within 15m0s of boot br-2-boot-3")
		if g := gauge(t, "nodewright_node_post_boot_health_timed_out", map[string]string{"node": "br-2"}); g != 1 {
			t.Errorf("nodewright_node_post_boot_health_timed_out{node=br-2} = %v; want 1", g)
		}
		if rec := c.trail.Find(nwv1.BootRecoveryPolicyName, "PostBootHealthTimedOut"); rec == nil || !strings.Contains(rec.Message, "DRBD") {
			t.Errorf("the timeout's audit record is %+v; want it naming DRBD", rec)
		}
	})
}

// TestBootRecoveryRepair: with onFallback.repair RestageWithApproval, a fallback gets its
// repair, an OSVersionPolicy that stages the image the node booted again, by the digest of the
// policy that put it there, once a person approves it; the repair's success acknowledges the
// fallback, by the person who approved it.
func TestBootRecoveryRepair(t *testing.T) {
	c := start(t, "brr-1")
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &nwv1.BootRecoveryPolicy{}
		if err := env.Client.Get(ctx, bootrecoverypolicy.Key, p); err != nil {
			return err
		}
		p.Spec.OnFallback.Repair = nwv1.FallbackRepairRestageWithApproval
		return env.Client.Update(ctx, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The policy that put the old image on the nodes names it by digest.
	earlier := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "brr-earlier"}, Spec: nwv1.OSVersionPolicySpec{Image: oldImage + digest}}
	if err := env.Client.Create(ctx, earlier); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), earlier) })

	fb := &nwv1.KairosFallback{FromImage: newImage + digest, ToImage: oldImage, BootID: "0f5d6c1e-3b2a-4c8e-9f10-2a3b4c5d6e7f", SeenAt: metav1.Now()}
	c.report("brr-1", fb.BootID, nwv1.KairosStatus{BootEntry: nwv1.KairosBootPassive, Image: oldImage, UpgradeFailure: true,
		BootAssessment: &nwv1.KairosBootAssessment{}, LastFallback: fb}, healthyDRBD())
	p := policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if n := p.Node("brr-1"); n == nil || n.Repair == nil || n.Repair.Policy == "" {
			return fmt.Sprintf("brr-1 %+v; want its repair created", n)
		}
		return ""
	})
	rp := p.Node("brr-1").Repair
	repair := &nwv1.OSVersionPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: rp.Policy}, repair); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), repair) })
	if s := repair.Spec; s.Image != oldImage+digest || s.Approval != nwv1.ApprovalManual || s.Repairs == nil ||
		s.Repairs.Node != "brr-1" || s.Repairs.BootID != fb.BootID {
		t.Fatalf("the repair's spec %+v; want %s on brr-1 for boot %s, approval Manual", s, oldImage+digest, fb.BootID)
	}
	event(t, bootrecoverypolicy.ReasonRepairCreated, rp.Policy)
	if n := p.Node("brr-1"); n.Acknowledged != nil || n.PinnedImage != oldImage {
		t.Errorf("brr-1 %+v before its repair ran; want it pinned", n)
	}

	// The repair succeeds (the OSVersionPolicy's own tests prove a repair on a played host):
	// approved by carol.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(repair), repair); err != nil {
			return err
		}
		repair.Annotations = map[string]string{nwv1.AnnotationApprove: "Node1", nwv1.AnnotationApprovedBy: "carol"}
		return env.Client.Update(ctx, repair)
	})
	if err != nil {
		t.Fatal(err)
	}
	repair.Status.Phase = nwv1.WorkflowSucceeded
	if err := env.Client.Status().Update(ctx, repair); err != nil {
		t.Fatal(err)
	}
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		n := p.Node("brr-1")
		if n.Acknowledged == nil || n.Acknowledged.By != "carol" || n.PinnedImage != "" || n.Repair.Phase != string(nwv1.WorkflowSucceeded) {
			return fmt.Sprintf("brr-1 %+v, its repair %+v; want it acknowledged by carol, repaired", n, n.Repair)
		}
		return ""
	})
	if rec := c.trail.Find(nwv1.BootRecoveryPolicyName, "Repaired"); rec == nil || !strings.Contains(rec.Message, "approved by carol") {
		t.Errorf("the repair's audit record is %+v", rec)
	}
}

// TestPostBootHealthWaitsForNamedUnits: with spec.postBootHealth.systemdUnits, a boot's health
// waits for each named unit to be active in the agent's report (one still starting), passes
// once they all are, and, at a later boot whose unit failed,
// times out naming the failed unit and the one the agent no longer reports.
func TestPostBootHealthWaitsForNamedUnits(t *testing.T) {
	c := start(t, "bu-1")
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &nwv1.BootRecoveryPolicy{}
		if err := env.Client.Get(ctx, bootrecoverypolicy.Key, p); err != nil {
			return err
		}
		p.Spec.PostBootHealth.SystemdUnits = []nwv1.SystemdUnitName{"k3s.service", "edge-app.service"}
		return env.Client.Update(ctx, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if len(p.Spec.PostBootHealth.SystemdUnits) != 2 || p.Status.ObservedGeneration != p.Generation {
			return fmt.Sprintf("the policy's units %v, generation %d observed %d", p.Spec.PostBootHealth.SystemdUnits, p.Generation, p.Status.ObservedGeneration)
		}
		return ""
	})
	active := nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive, Image: oldImage, BootAssessment: &nwv1.KairosBootAssessment{}}
	k3s := nwv1.SystemdUnitStatus{Name: "k3s.service", LoadState: "loaded", ActiveState: "active", SubState: "running"}
	app := func(activeState, subState string) nwv1.SystemdUnitStatus {
		return nwv1.SystemdUnitStatus{Name: "edge-app.service", LoadState: "loaded", ActiveState: activeState, SubState: subState}
	}

	// The application's unit is still starting: the boot waits, naming it.
	c.reportUnits("bu-1", "bu-1-boot-0", active, healthyDRBD(), []nwv1.SystemdUnitStatus{k3s, app("activating", "start")})
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		h := health(p, "bu-1")
		if h == nil || h.PassedAt != nil || h.Failing != "unit edge-app.service is activating/start" ||
			!strings.Contains(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy), "unit edge-app.service is activating/start") {
			return fmt.Sprintf("bu-1's health %+v, PostBootHealthy %s; want it waiting for edge-app.service", h, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy))
		}
		return ""
	})
	// It is active: the boot passes.
	c.reportUnits("bu-1", "bu-1-boot-0", active, healthyDRBD(), []nwv1.SystemdUnitStatus{k3s, app("active", "running")})
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if h := health(p, "bu-1"); h != nil && h.PassedAt != nil && h.Failing == "" {
			return ""
		}
		return fmt.Sprintf("bu-1's health %+v; want it passed", health(p, "bu-1"))
	})

	// The next boot: k3s is still starting and the application's unit fails.
	starting := nwv1.SystemdUnitStatus{Name: "k3s.service", LoadState: "loaded", ActiveState: "activating", SubState: "start"}
	c.reportUnits("bu-1", "bu-1-boot-1", active, healthyDRBD(), []nwv1.SystemdUnitStatus{starting, app("failed", "failed")})
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		want := "unit k3s.service is activating/start; unit edge-app.service is failed/failed"
		if h := health(p, "bu-1"); h == nil || h.BootID != "bu-1-boot-1" || h.Failing != want {
			return fmt.Sprintf("bu-1's health %+v; want its new boot failing with %q", h, want)
		}
		return ""
	})
	// The agent reports k3s no more. The policy names it before the deadline, so that no
	// reconcile woken by something else times the boot out on the report before this one.
	c.reportUnits("bu-1", "bu-1-boot-1", active, healthyDRBD(), []nwv1.SystemdUnitStatus{app("failed", "failed")})
	want := "unit k3s.service is not reported by the agent; unit edge-app.service is failed/failed"
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if h := health(p, "bu-1"); h == nil || h.Failing != want || h.TimedOutAt != nil {
			return fmt.Sprintf("bu-1's health %+v; want it failing with %q, not yet timed out", h, want)
		}
		return ""
	})
	// Past the deadline, the agent's next report wakes the policy. It carries a unit the
	// policy does not name, so that it differs from the last (a heartbeat within the same
	// second would not).
	c.clock.SetTime(c.clock.Now().Add(16 * time.Minute))
	other := nwv1.SystemdUnitStatus{Name: "chronyd.service", LoadState: "loaded", ActiveState: "active", SubState: "running"}
	c.reportUnits("bu-1", "bu-1-boot-1", active, healthyDRBD(), []nwv1.SystemdUnitStatus{app("failed", "failed"), other})
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		h := health(p, "bu-1")
		if h == nil || h.TimedOutAt == nil || p.Status.Unhealthy != "bu-1" || !strings.Contains(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy), want) {
			return fmt.Sprintf("bu-1's health %+v, unhealthy %q, PostBootHealthy %s", h, p.Status.Unhealthy, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy))
		}
		return ""
	})
	event(t, bootrecoverypolicy.ReasonPostBootHealthTimeout, "bu-1's health was not green within 15m0s of boot bu-1-boot-1")
	event(t, bootrecoverypolicy.ReasonPostBootHealthTimeout, "unit edge-app.service is failed/failed")
	if rec := c.trail.Find(nwv1.BootRecoveryPolicyName, "PostBootHealthTimedOut"); rec == nil || !strings.Contains(rec.Message, want) {
		t.Errorf("the timeout's audit record is %+v; want it naming %q", rec, want)
	}
}

// health is node's post-boot health in the policy's status; nil while it has none.
func health(p *nwv1.BootRecoveryPolicy, node string) *nwv1.PostBootHealthStatus {
	if n := p.Node(node); n != nil {
		return n.PostBootHealth
	}
	return nil
}

// TestTheAPIRefusesABadUnitName: spec.postBootHealth.systemdUnits admits unit names alone.
func TestTheAPIRefusesABadUnitName(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []nwv1.SystemdUnitName{"k3s", "k3s.service; reboot", "--all", "*.service", "a@b@c.service"} {
		p := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName},
			Spec: nwv1.BootRecoveryPolicySpec{PostBootHealth: nwv1.PostBootHealth{SystemdUnits: []nwv1.SystemdUnitName{"k3s.service", bad}}}}
		err := env.Client.Create(ctx, p, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "spec.postBootHealth.systemdUnits[1]") || !strings.Contains(err.Error(), fmt.Sprintf("must be a systemd unit name, not %q", bad)) {
			t.Errorf("a policy naming the unit %q: %v; want it refused, naming the field", bad, err)
		}
	}
	good := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName},
		Spec: nwv1.BootRecoveryPolicySpec{PostBootHealth: nwv1.PostBootHealth{SystemdUnits: []nwv1.SystemdUnitName{
			"k3s.service", "-.mount", `mnt-data\x2d1.mount`, "getty@tty1.service", "multi-user.target", "logrotate.timer"}}}}
	if err := env.Client.Create(ctx, good, client.DryRunAll); err != nil {
		t.Errorf("a policy naming good units: %v", err)
	}
}

// cordon cordons node as a person does (by "": no annotation).
func cordon(t *testing.T, node, by string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		n.Spec.Unschedulable = true
		if by != "" {
			n.Annotations = map[string]string{nodecordon.AnnotationCordonedBy: by}
		}
		return env.Client.Update(context.Background(), n)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func cordoned(t *testing.T, node string) (bool, string) {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable, n.Annotations[nodecordon.AnnotationCordonedBy]
}

// TestBootRecoveryRollback: with onPostBootHealthTimeout RollbackWithApproval, a boot of a new
// image whose health times out gets its rollback, an OSVersionPolicy that stages the image of
// the node's last healthy boot again, by digest, once a person approves it; its success is
// recorded with who approved it. A boot whose health times out on the image that was healthy
// before is not rolled back, and says why.
func TestBootRecoveryRollback(t *testing.T) {
	c := start(t, "brb-1")
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &nwv1.BootRecoveryPolicy{}
		if err := env.Client.Get(ctx, bootrecoverypolicy.Key, p); err != nil {
			return err
		}
		p.Spec.OnPostBootHealthTimeout = nwv1.PostBootHealthRollbackWithApproval
		return env.Client.Update(ctx, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The policy that put the old image on the nodes names it by digest.
	earlier := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "brb-earlier"}, Spec: nwv1.OSVersionPolicySpec{Image: oldImage + digest}}
	if err := env.Client.Create(ctx, earlier); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), earlier) })

	active := func(image string) nwv1.KairosStatus {
		return nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive, Image: image, BootAssessment: &nwv1.KairosBootAssessment{}}
	}
	c.report("brb-1", "brb-1-boot-1", active(oldImage), healthyDRBD())
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if n := p.Node("brb-1"); n == nil || n.LastHealthy == nil || n.LastHealthy.BootID != "brb-1-boot-1" || n.LastHealthy.Image != oldImage {
			return fmt.Sprintf("brb-1 %+v; want its last healthy boot brb-1-boot-1 of %s", n, oldImage)
		}
		return ""
	})

	// The new image boots, and its DRBD never reconnects. (Each report differs from the one
	// before, so that the write is not a no-op that wakes nothing.)
	red := &nwv1.DRBDStatus{Resources: 2, Connected: 1, UpToDate: 1}
	connecting := &nwv1.DRBDStatus{Resources: 2, Connected: 1, UpToDate: 1,
		ResourceStatuses: []nwv1.DRBDResourceStatus{{Name: "pvc-one", Peers: []nwv1.DRBDPeerStatus{{Name: "brb-2", ConnectionState: "Connecting"}}}}}
	c.report("brb-1", "brb-1-boot-2", active(newImage), connecting)
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if h := p.Node("brb-1").PostBootHealth; h == nil || h.BootID != "brb-1-boot-2" {
			return fmt.Sprintf("brb-1's health %+v; want boot brb-1-boot-2's", h)
		}
		return ""
	})
	c.clock.SetTime(c.clock.Now().Add(16 * time.Minute))
	c.report("brb-1", "brb-1-boot-2", active(newImage), red)
	p := policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if rb := p.Node("brb-1").Rollback; rb == nil || rb.Policy == "" || rb.BootID != "brb-1-boot-2" {
			return fmt.Sprintf("brb-1's rollback %+v; want one for boot brb-1-boot-2", rb)
		}
		if c := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy); !strings.HasPrefix(c, "False") || !strings.Contains(c, "its rollback") {
			return "PostBootHealthy " + c + "; want False, naming the rollback"
		}
		return ""
	})
	rb := p.Node("brb-1").Rollback
	rollback := &nwv1.OSVersionPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: rb.Policy}, rollback); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), rollback) })
	if s := rollback.Spec; s.Image != oldImage+digest || s.Approval != nwv1.ApprovalManual || s.Repairs == nil ||
		s.Repairs.Node != "brb-1" || s.Repairs.BootID != "brb-1-boot-2" || s.Repairs.Kind != nwv1.OSRepairRollback {
		t.Fatalf("the rollback's spec %+v, repairs %+v; want %s on brb-1, a Rollback of boot brb-1-boot-2, approval Manual", s, s.Repairs, oldImage+digest)
	}
	event(t, bootrecoverypolicy.ReasonRollbackCreated, rb.Policy)

	// The rollback succeeds (the OSVersionPolicy's own tests prove one on a played host),
	// approved by dave: the node boots the old image, healthy again.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rollback), rollback); err != nil {
			return err
		}
		rollback.Annotations = map[string]string{nwv1.AnnotationApprove: "Node1", nwv1.AnnotationApprovedBy: "dave"}
		return env.Client.Update(ctx, rollback)
	})
	if err != nil {
		t.Fatal(err)
	}
	rollback.Status.Phase = nwv1.WorkflowSucceeded
	if err := env.Client.Status().Update(ctx, rollback); err != nil {
		t.Fatal(err)
	}
	c.report("brb-1", "brb-1-boot-3", active(oldImage), healthyDRBD())
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		n := p.Node("brb-1")
		if n.Rollback == nil || n.Rollback.Phase != string(nwv1.WorkflowSucceeded) || !strings.Contains(n.Rollback.Message, "approved by dave") {
			return fmt.Sprintf("brb-1's rollback %+v; want it Succeeded, approved by dave", n.Rollback)
		}
		if n.LastHealthy == nil || n.LastHealthy.BootID != "brb-1-boot-3" || p.Status.Unhealthy != "" {
			return fmt.Sprintf("brb-1's last healthy boot %+v, unhealthy %q; want boot brb-1-boot-3, none unhealthy", n.LastHealthy, p.Status.Unhealthy)
		}
		return ""
	})
	if rec := c.trail.Find(nwv1.BootRecoveryPolicyName, "RolledBack"); rec == nil || !strings.Contains(rec.Message, "approved by dave") || !strings.Contains(rec.Message, "brb-1-boot-2") {
		t.Errorf("the rollback's audit record is %+v", rec)
	}

	// The old image's own boot times out: the image is not what changed, no rollback.
	c.report("brb-1", "brb-1-boot-4", active(oldImage), connecting)
	policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if h := p.Node("brb-1").PostBootHealth; h == nil || h.BootID != "brb-1-boot-4" {
			return fmt.Sprintf("brb-1's health %+v; want boot brb-1-boot-4's", h)
		}
		return ""
	})
	c.clock.SetTime(c.clock.Now().Add(16 * time.Minute))
	c.report("brb-1", "brb-1-boot-4", active(oldImage), red)
	p = policy(t, func(p *nwv1.BootRecoveryPolicy) string {
		if rb := p.Node("brb-1").Rollback; rb == nil || rb.BootID != "brb-1-boot-4" || !strings.Contains(rb.Message, "its image is not what changed") {
			return fmt.Sprintf("brb-1's rollback %+v; want none for boot brb-1-boot-4, saying why", rb)
		}
		return ""
	})
	if rb := p.Node("brb-1").Rollback; rb.Policy != "" {
		t.Errorf("a rollback %s was created for a boot of the image that was healthy before", rb.Policy)
	}
	event(t, bootrecoverypolicy.ReasonRollbackImpossible, "its image is not what changed")
}
