package osversionpolicy_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/bootrecoverypolicy"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// The BootRecoveryPolicy on the played site: its controller reads the boots the real agents
// report from their played Kairos hosts, and acts on the Nodes and the repairs. The boots are
// asked of the agents as a person or a workflow asks them, by NodeOperations.

// bootRecovery is the BootRecoveryPolicy controller of the site, with client c and reader r.
func (s *site) bootRecovery(mgr manager.Manager, c client.Client, r client.Reader) *bootrecoverypolicy.Reconciler {
	return &bootrecoverypolicy.Reconciler{Client: c, APIReader: r, Recorder: mgr.GetEventRecorderFor("bootrecovery-test"),
		Audit: s.trail, Actor: "nodewright-operator", AgentNamespace: s.ns}
}

// startBootRecovery runs the BootRecoveryPolicy controller until the test ends or stop is
// called, as the operator's user under the chart's admission policies (its cordon passes them).
func (s *site) startBootRecovery() (stop func()) {
	asOperator := env.AsOperatorUnderPolicies(s.t, "nodewright-system")
	return env.StartManagerAsWithCache(s.t, asOperator, s.cacheOptions(), func(_ context.Context, mgr manager.Manager) error {
		return s.bootRecovery(mgr, mgr.GetClient(), mgr.GetAPIReader()).SetupWithManager(mgr)
	})
}

// bootRecoveryPolicy creates the singleton with spec, deleted at the test's end.
func (s *site) bootRecoveryPolicy(spec nwv1.BootRecoveryPolicySpec) {
	s.t.Helper()
	p := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}, Spec: spec}
	if err := env.Client.Create(context.Background(), p); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), p)
		testenv.Eventually(s.t, patience, func() string {
			if err := env.Client.Get(context.Background(), bootrecoverypolicy.Key, &nwv1.BootRecoveryPolicy{}); err == nil {
				return "the BootRecoveryPolicy is still there"
			}
			return ""
		})
	})
}

// bootRecord waits until node's record in the BootRecoveryPolicy's status satisfies check (""
// when it does, else why not), and returns the policy.
func bootRecord(t *testing.T, node string, check func(p *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord) string) *nwv1.BootRecoveryPolicy {
	t.Helper()
	var p *nwv1.BootRecoveryPolicy
	testenv.Eventually(t, patience, func() string {
		p = &nwv1.BootRecoveryPolicy{}
		if err := env.Client.Get(context.Background(), bootrecoverypolicy.Key, p); err != nil {
			return err.Error()
		}
		if r := p.Node(node); r != nil {
			return check(p, r)
		}
		return fmt.Sprintf("the BootRecoveryPolicy has no record of %s: %+v", node, p.Status.Nodes)
	})
	return p
}

// bootEvent waits for an Event of the BootRecoveryPolicy of type typ and reason whose message
// contains every one of what.
func bootEvent(t *testing.T, typ, reason string, what ...string) {
	t.Helper()
	testenv.EventSaid(t, env.Client, patience, "BootRecoveryPolicy", typ, reason, what...)
}

// operate asks node's agent for an operation of typ, its member set by member, and waits until
// it ended; it returns it as it ended.
func (s *site) operate(node, name string, typ nwv1.NodeOperationType, member func(*nwv1.NodeOperationSpec)) *nwv1.NodeOperation {
	s.t.Helper()
	op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: typ, Deadline: metav1.NewTime(time.Now().Add(30 * time.Minute))}}
	member(&op.Spec)
	if err := env.Client.Create(context.Background(), op); err != nil {
		s.t.Fatal(err)
	}
	testenv.Eventually(s.t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(op), op); err != nil {
			return err.Error()
		}
		if end, _ := op.Ended(); !end {
			return fmt.Sprintf("%s %s is %s", typ, name, op.PhaseText())
		}
		return ""
	})
	return op
}

// succeeded requires op to have ended Succeeded.
func succeeded(t *testing.T, op *nwv1.NodeOperation) {
	t.Helper()
	if op.Status.Phase != nwv1.OperationSucceeded {
		t.Fatalf("%s %s ended %s; want Succeeded", op.Spec.Type, op.Name, op.Outcome())
	}
}

func (s *site) reboot(node, name string) *nwv1.NodeOperation {
	s.t.Helper()
	return s.operate(node, name, nwv1.OperationReboot, func(o *nwv1.NodeOperationSpec) {
		o.Reboot = &nwv1.RebootOperation{Reason: "the site's test"}
	})
}

// TestBootRecoveryOnPlayedHosts: the BootRecoveryPolicy's controller against two played Kairos
// nodes with real agents.
//
//   - bre-2's boot-assessment block is left armed (boot_assessment_tentative=yes and
//     enable_boot_assessment=yes, as a boot never counted as good leaves it, kairos#4303): the
//     policy shows nextBootFallsBack for it, naming the flags; once its agent's
//     BootAssessmentReset cleared them, it no longer does.
//   - bre-2 then boots with DRBD that never reconnects: with postBootHealth.timeout at its
//     minimum, a minute, its post-boot health times out naming the DRBD resource: the
//     condition PostBootHealthy False, a Warning Event, an audit record.
//   - meanwhile bre-1 boots its recovery entry, selected for that boot only as kairos-agent
//     bootentry --select does (its agent's SelectBootEntry): the Node is cordoned with the
//     policy's mark, a Warning Event RecoveryBoot, the condition RecoveryBoot True, an audit
//     record; its next boot is the active entry again, and the policy lifts its cordon.
func TestBootRecoveryOnPlayedHosts(t *testing.T) {
	s := plant(t, false, "bre-1", "bre-2")
	s.bootRecoveryPolicy(nwv1.BootRecoveryPolicySpec{PostBootHealth: nwv1.PostBootHealth{Timeout: metav1.Duration{Duration: time.Minute}}})
	s.startBootRecovery()
	for _, n := range s.nodes {
		bootRecord(t, n, func(_ *nwv1.BootRecoveryPolicy, r *nwv1.NodeBootRecord) string {
			if h := r.PostBootHealth; r.BootEntry != nwv1.KairosBootActive || h == nil || h.PassedAt == nil || r.NextBootFallsBack != "" {
				return fmt.Sprintf("%s: %+v, post-boot health %+v; want Active, its health passed", n, r, h)
			}
			return ""
		})
	}

	// Stale flags: shown, and gone once the agent cleared them.
	bin, err := kairosplay.GRUBEditenv()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, s.hosts["bre-2"].GRUBEnvFile(), "set", "boot_assessment_tentative=yes", "enable_boot_assessment=yes").CombinedOutput(); err != nil {
		t.Fatalf("grub-editenv: %v: %s", err, out)
	}
	bootRecord(t, "bre-2", func(_ *nwv1.BootRecoveryPolicy, r *nwv1.NodeBootRecord) string {
		if !strings.Contains(r.NextBootFallsBack, "boot_assessment_tentative=yes") || !strings.Contains(r.NextBootFallsBack, "enable_boot_assessment=true") {
			return fmt.Sprintf("bre-2's nextBootFallsBack %q, bootAssessment %+v; want it naming the armed flags", r.NextBootFallsBack, r.BootAssessment)
		}
		return ""
	})
	succeeded(t, s.operate("bre-2", "reset", nwv1.OperationBootAssessmentReset, func(o *nwv1.NodeOperationSpec) {
		o.BootAssessmentReset = &nwv1.BootAssessmentResetOperation{}
	}))
	bootRecord(t, "bre-2", func(_ *nwv1.BootRecoveryPolicy, r *nwv1.NodeBootRecord) string {
		if r.NextBootFallsBack != "" {
			return fmt.Sprintf("bre-2's nextBootFallsBack %q after the reset; want none", r.NextBootFallsBack)
		}
		return ""
	})

	// DRBD that never reconnects after bre-2's next boot. Its deadline runs while bre-1 boots
	// its recovery system.
	if err := s.hosts["bre-2"].SetFault(kairosplay.FaultNoDRBD, true); err != nil {
		t.Fatal(err)
	}
	succeeded(t, s.reboot("bre-2", "reboot-nodrbd"))
	unhealthy := s.booted("bre-2")

	before := s.booted("bre-1")
	succeeded(t, s.operate("bre-1", "select-recovery", nwv1.OperationSelectBootEntry, func(o *nwv1.NodeOperationSpec) {
		o.SelectBootEntry = &nwv1.SelectBootEntryOperation{Entry: nwv1.KairosBootRecovery}
	}))
	succeeded(t, s.reboot("bre-1", "reboot-recovery"))
	recovery := s.booted("bre-1")
	if recovery.entry != "recovery" || recovery.bootID == before.bootID {
		t.Fatalf("bre-1's host runs %+v; want its recovery system, in a new boot", recovery)
	}
	p := bootRecord(t, "bre-1", func(p *nwv1.BootRecoveryPolicy, r *nwv1.NodeBootRecord) string {
		if r.BootID != recovery.bootID || r.BootEntry != nwv1.KairosBootRecovery || r.Cordon != nwv1.NodeCordoned || p.Status.Recovery != "bre-1" {
			return fmt.Sprintf("bre-1: %+v, recovery %q; want boot %s from Recovery, cordoned", r, p.Status.Recovery, recovery.bootID)
		}
		return ""
	})
	if c := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionRecoveryBoot); !strings.HasPrefix(c, "True") || !strings.Contains(c, "bre-1") {
		t.Errorf("RecoveryBoot %s; want True naming bre-1", c)
	}
	if on, by := unschedulable(t, "bre-1"); !on || by != bootrecoverypolicy.CordonedBy {
		t.Errorf("bre-1: cordoned %t by %q; want cordoned by %s", on, by, bootrecoverypolicy.CordonedBy)
	}
	bootEvent(t, corev1.EventTypeWarning, bootrecoverypolicy.ReasonRecoveryBoot, "bre-1 booted its recovery system (boot "+recovery.bootID+")")
	if rec := s.trail.Find(nwv1.BootRecoveryPolicyName, string(nwv1.KairosBootRecovery)); rec == nil || rec.Action != bootrecoverypolicy.ActionRecoveryBoot ||
		!strings.Contains(rec.Message, recovery.bootID) {
		t.Errorf("the recovery boot's audit record is %+v; want %s naming boot %s", rec, bootrecoverypolicy.ActionRecoveryBoot, recovery.bootID)
	}

	// The selection held for one boot: the next one is the active entry, and the cordon goes.
	succeeded(t, s.reboot("bre-1", "reboot-active"))
	back := s.booted("bre-1")
	if back.entry != "active" || back.bootID == recovery.bootID {
		t.Fatalf("bre-1's host runs %+v after the recovery; want its active system, in a new boot", back)
	}
	p = bootRecord(t, "bre-1", func(p *nwv1.BootRecoveryPolicy, r *nwv1.NodeBootRecord) string {
		if r.BootID != back.bootID || r.BootEntry != nwv1.KairosBootActive || r.Cordon != nwv1.NodeUncordoned || p.Status.Recovery != "" {
			return fmt.Sprintf("bre-1: %+v, recovery %q; want boot %s from Active, its cordon lifted", r, p.Status.Recovery, back.bootID)
		}
		return ""
	})
	if c := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionRecoveryBoot); !strings.HasPrefix(c, "False") {
		t.Errorf("RecoveryBoot %s once bre-1 booted its active system; want False", c)
	}
	if on, by := unschedulable(t, "bre-1"); on || by != "" {
		t.Errorf("bre-1: cordoned %t by %q after it booted its active system; want its cordon lifted", on, by)
	}

	// bre-2's health never turned green: timed out, naming the resource.
	p = bootRecord(t, "bre-2", func(p *nwv1.BootRecoveryPolicy, r *nwv1.NodeBootRecord) string {
		if h := r.PostBootHealth; r.BootID != unhealthy.bootID || h == nil || h.TimedOutAt == nil {
			return fmt.Sprintf("bre-2: boot %s, post-boot health %+v; want boot %s timed out", r.BootID, h, unhealthy.bootID)
		}
		return ""
	})
	if c := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionPostBootHealthy); !strings.HasPrefix(c, "False "+bootrecoverypolicy.ReasonPostBootHealthTimeout) ||
		!strings.Contains(c, "bre-2") || !strings.Contains(c, drbdResources[0]) || p.Status.Unhealthy != "bre-2" {
		t.Errorf("PostBootHealthy %s, unhealthy %q; want False naming bre-2 and %s", c, p.Status.Unhealthy, drbdResources[0])
	}
	bootEvent(t, corev1.EventTypeWarning, bootrecoverypolicy.ReasonPostBootHealthTimeout, "bre-2's health was not green within 1m0s of boot "+unhealthy.bootID, drbdResources[0])
	if rec := s.trail.Find(nwv1.BootRecoveryPolicyName, "PostBootHealthTimedOut"); rec == nil || rec.Action != bootrecoverypolicy.ActionPostBootHealthTimeout ||
		!strings.Contains(rec.Message, unhealthy.bootID) || !strings.Contains(rec.Message, drbdResources[0]) {
		t.Errorf("the timeout's audit record is %+v; want %s naming boot %s and %s", rec, bootrecoverypolicy.ActionPostBootHealthTimeout, unhealthy.bootID, drbdResources[0])
	}
}

// TestRepairOfAFallbackSurvivesOperatorCrashes: a node's new image fails to boot and it falls
// back; the BootRecoveryPolicy (onFallback.repair RestageWithApproval) creates its repair,
// the operator killed right after the create, before its status says so: the next one finds
// the repair it made (and no second one). A person approves the repair; the operator is then
// killed right after it recorded the start of each step of the repair, and of each part of
// the node's step after its first (the write that ends one part begins the next), one after
// another, each time started again: the repair ends Succeeded, its RecoveryRestage made once,
// the node booted exactly once more, from its active slot, the image it fell back to; and the
// fallback is acknowledged by the person who approved the repair.
func TestRepairOfAFallbackSurvivesOperatorCrashes(t *testing.T) {
	// The profile pins the old image by digest: the repair's image.
	s := plantWith(t, false, func(p *nwv1.EdgeProfileSpec, images map[string]string) {
		p.OSImages = append(p.OSImages, images[oldVersion])
	}, "osrep-1")
	node := "osrep-1"
	sup := siteagent.Supervised(s.agents[node])
	if err := s.hosts[node].SetFault(kairosplay.FaultFailBoot, true, s.images[newVersion]); err != nil {
		t.Fatal(err)
	}
	succeeded(t, s.operate(node, "stage-new", nwv1.OperationOSUpgradeStage, func(o *nwv1.NodeOperationSpec) {
		o.OSUpgradeStage = &nwv1.OSImageOperation{Image: s.images[newVersion]}
	}))
	succeeded(t, s.reboot(node, "reboot-new"))
	fell := s.booted(node)
	if fell.entry != "passive" || !fell.upgradeFailure || fell.image != repository(s.images[oldVersion]) {
		t.Fatalf("%s's host runs %+v; want the fallback to the old image", node, fell)
	}
	boots := len(sup.Boots())

	s.bootRecoveryPolicy(nwv1.BootRecoveryPolicySpec{OnFallback: nwv1.FallbackActions{Repair: nwv1.FallbackRepairRestageWithApproval}})
	repairs := func() []nwv1.OSVersionPolicy {
		t.Helper()
		var list nwv1.OSVersionPolicyList
		if err := env.Client.List(context.Background(), &list, client.HasLabels{bootrecoverypolicy.LabelRepairOf}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	crash := testenv.NewCrash(func(w testenv.Write) bool {
		o, ok := w.Object.(*nwv1.OSVersionPolicy)
		return ok && !w.Deleted && w.SubResource == "" && o.Spec.Repairs != nil && o.Spec.Repairs.Node == node
	})
	env.RunUntilCrash(t, crash, s.cacheOptions(), func(_ context.Context, mgr manager.Manager, c client.Client, r client.Reader) error {
		return s.bootRecovery(mgr, c, r).SetupWithManager(mgr)
	})
	p := &nwv1.BootRecoveryPolicy{}
	if err := env.Client.Get(context.Background(), bootrecoverypolicy.Key, p); err != nil {
		t.Fatal(err)
	}
	if n := p.Node(node); n != nil && n.Repair != nil && n.Repair.Policy != "" {
		t.Fatalf("the status names the repair %+v: the crash came after its write, not between the create and it", n.Repair)
	}
	if got := repairs(); len(got) != 1 {
		t.Fatalf("%d repair policies after the crash; want the one created", len(got))
	}
	s.startBootRecovery()
	p = bootRecord(t, node, func(_ *nwv1.BootRecoveryPolicy, r *nwv1.NodeBootRecord) string {
		if rp := r.Repair; rp == nil || rp.Policy == "" || rp.BootID != fell.bootID || rp.Image != s.images[oldVersion] || r.PinnedImage != fell.image {
			return fmt.Sprintf("%s: repair %+v, pinned %q; want the repair of boot %s, staging %s, the node pinned to %s", node, rp, r.PinnedImage, fell.bootID, s.images[oldVersion], fell.image)
		}
		return ""
	})
	got := repairs()
	if len(got) != 1 || got[0].Name != p.Node(node).Repair.Policy {
		var names []string
		for _, r := range got {
			names = append(names, r.Name)
		}
		t.Fatalf("repair policies %v; want the one the status follows, %s", names, p.Node(node).Repair.Policy)
	}
	repair := &got[0]
	if repair.Spec.Approval != nwv1.ApprovalManual || repair.Spec.Image != s.images[oldVersion] || repair.Spec.Repairs.Node != node || repair.Spec.Repairs.BootID != fell.bootID {
		t.Fatalf("the repair's spec %+v; want Manual approval, %s, repairing %s's boot %s", repair.Spec, s.images[oldVersion], node, fell.bootID)
	}
	s.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), repair) })

	// A person shortens the soak (the spec may change until the policy starts) and approves
	// its step.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(repair), repair); err != nil {
			return err
		}
		repair.Spec.Soak, repair.Spec.RebootTimeout = metav1.Duration{Duration: soakFor}, metav1.Duration{Duration: 2 * time.Minute}
		if repair.Annotations == nil {
			repair.Annotations = map[string]string{}
		}
		repair.Annotations[nwv1.AnnotationApprove], repair.Annotations[nwv1.AnnotationApprovedBy] = "Node1", "alice"
		return env.Client.Update(context.Background(), repair)
	})
	if err != nil {
		t.Fatal(err)
	}

	plan, _ := osupgrade.NewPlan(1, false)
	type point struct {
		step osupgrade.Step
		part string
	}
	var points []point
	for _, step := range plan.Forward() {
		points = append(points, point{step: step})
		if step == osupgrade.Preflight {
			continue
		}
		for _, part := range osupgrade.NodeParts[1:] {
			points = append(points, point{step: step, part: part})
		}
	}
	for _, c := range points {
		crash := testenv.NewCrash(func(w testenv.Write) bool {
			o, ok := w.Object.(*nwv1.OSVersionPolicy)
			return ok && w.SubResource == "status" && o.Name == repair.Name && running(o, c.step, c.part)
		})
		env.RunUntilCrash(t, crash, s.cacheOptions(), func(_ context.Context, mgr manager.Manager, cl client.Client, r client.Reader) error {
			return s.reconciler(mgr, cl, r).SetupWithManager(mgr)
		})
	}
	s.startOperator()
	repair = s.ended(repair, nwv1.WorkflowSucceeded)

	if n := len(sup.Boots()) - boots; n != 1 {
		t.Errorf("%s booted %d times for the repair; want once", node, n)
	}
	if b := s.booted(node); b.image != fell.image || b.entry != "active" || b.upgradeFailure || b.bootID == fell.bootID {
		t.Errorf("%s runs %+v after the repair; want %s from its active slot, in a new boot", node, b, fell.image)
	}
	var ops nwv1.NodeOperationList
	if err := env.Client.List(context.Background(), &ops, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	restages := 0
	for _, op := range ops.Items {
		if op.Labels[osupgrade.LabelName] == repair.Name && op.Spec.Type == nwv1.OperationRecoveryRestage {
			restages++
			if op.Status.Phase != nwv1.OperationSucceeded {
				t.Errorf("the repair's RecoveryRestage %s ended %s", op.Name, op.Outcome())
			}
		}
	}
	if restages != 1 {
		t.Errorf("the repair made %d RecoveryRestage operations; want one", restages)
	}
	p = bootRecord(t, node, func(_ *nwv1.BootRecoveryPolicy, r *nwv1.NodeBootRecord) string {
		if a := r.Acknowledged; a == nil || a.BootID != fell.bootID || r.PinnedImage != "" || r.Repair == nil || r.Repair.Phase != string(nwv1.WorkflowSucceeded) {
			return fmt.Sprintf("%s: acknowledged %+v, pinned %q, repair %+v; want boot %s acknowledged by the repair, the pin lifted", node, a, r.PinnedImage, r.Repair, fell.bootID)
		}
		return ""
	})
	if a := p.Node(node).Acknowledged; a.By != "alice" {
		t.Errorf("the fallback acknowledged by %q; want alice, who approved the repair", a.By)
	}
	if c := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionFellBack); !strings.HasPrefix(c, "False") {
		t.Errorf("FellBack %s once repaired; want False", c)
	}
	bootEvent(t, corev1.EventTypeNormal, bootrecoverypolicy.ReasonRepaired, node+"'s fallback at boot "+fell.bootID+" is repaired", "approved by alice")
	if rec := s.trail.Find(nwv1.BootRecoveryPolicyName, "Repaired"); rec == nil || rec.Action != bootrecoverypolicy.ActionRepaired || !strings.Contains(rec.Message, fell.bootID) {
		t.Errorf("the repair's audit record is %+v; want %s naming boot %s", rec, bootrecoverypolicy.ActionRepaired, fell.bootID)
	}
	if got := repairs(); len(got) != 1 {
		t.Errorf("%d repair policies at the end; want the one", len(got))
	}
}
