package osversionpolicy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// soakFor is the soak of the tests' policies: the shortest the API takes.
const soakFor = 10 * time.Second

// TestThreeNodesUpgradedInOrderEachProvenBooted: three Kairos nodes move to the new image one
// at a time, the tiebreaker first and the primary last, each rebooted once; the played hosts'
// own files show each booted the new image from its active slot, with a new boot ID, no
// upgrade_failure and the boot assessment cleared; each node was soaked before the next one
// was cordoned, and each is uncordoned at the end.
func TestThreeNodesUpgradedInOrderEachProvenBooted(t *testing.T) {
	s := plant(t, true, "osup-1=primary", "osup-2=secondary", "osup-3=tiebreaker")
	before := map[string]booted{}
	for _, n := range s.nodes {
		before[n] = s.booted(n)
	}
	p := s.ended(s.policy("osup-v350", newVersion, soakFor, 2*time.Minute), nwv1.WorkflowSucceeded)

	want := repository(s.images[newVersion])
	var order []string
	for _, n := range p.Status.Nodes {
		order = append(order, n.Name)
		if n.Phase != nwv1.NodeOSDone || n.VerifiedAt == nil || n.HealthyAt == nil {
			t.Errorf("%s: phase %s, verified %v, healthy %v; want Done, verified and soaked", n.Name, n.Phase, n.VerifiedAt, n.HealthyAt)
		}
	}
	if got := strings.Join(order, ","); got != "osup-3,osup-2,osup-1" {
		t.Errorf("order %s; want the tiebreaker, the secondary, the primary last", got)
	}
	for _, name := range s.nodes {
		b := s.booted(name)
		if b.image != want || b.entry != "active" || b.upgradeFailure || b.bootID == before[name].bootID {
			t.Errorf("%s's host runs %+v; before %+v; want %s from its active slot after a new boot", name, b, before[name], want)
		}
		env, err := s.hosts[name].GRUBEnv(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if env["enable_boot_assessment"] == "yes" || env["boot_assessment_tentative"] == "yes" {
			t.Errorf("%s's boot assessment is still pending: %v", name, env)
		}
		if boots := len(siteagent.Supervised(s.agents[name]).Boots()); boots != 1 {
			t.Errorf("%s booted %d times; want once", name, boots)
		}
		if cordoned, by := unschedulable(t, name); cordoned || by != "" {
			t.Errorf("%s is left cordoned (%q)", name, by)
		}
	}
	// One node at a time: each soaked before the next was cordoned.
	for i := 1; i < len(p.Status.Nodes); i++ {
		prev, next := p.Status.Nodes[i-1], p.Status.Nodes[i]
		soaked := part(prev, "Soak")
		cordon := part(next, "Cordon")
		if soaked == nil || cordon == nil || soaked.FinishedAt == nil || cordon.StartedAt == nil || cordon.StartedAt.Before(soaked.FinishedAt) {
			t.Errorf("%s was cordoned (%+v) before %s's soak ended (%+v)", next.Name, cordon, prev.Name, soaked)
		}
	}
}

func part(n nwv1.NodeOSUpgrade, name string) *nwv1.OSUpgradePart {
	for i := range n.Parts {
		if n.Parts[i].Name == name {
			return &n.Parts[i]
		}
	}
	return nil
}

// TestAFallbackStopsThePolicyAndIsNotTriedAgainUntilAcknowledged: the new image fails to boot
// on the second node, and GRUB's boot assessment falls back to its passive slot: the policy
// stops Failed with that node FellBack, naming the image and the boot, holding the claim; the
// third node is untouched. A second policy for the same image holds that node (its agent
// reports the fallback) and upgrades the rest; a third, which acknowledges it, tries it again.
func TestAFallbackStopsThePolicyAndIsNotTriedAgainUntilAcknowledged(t *testing.T) {
	s := plant(t, true, "osfb-1", "osfb-2", "osfb-3")
	image := s.images[newVersion]
	if err := s.hosts["osfb-2"].SetFault(kairosplay.FaultFailBoot, true, image); err != nil {
		t.Fatal(err)
	}
	untouched := s.booted("osfb-3")
	p := s.ended(s.policy("osfb-first", newVersion, soakFor, 2*time.Minute, "osfb-1", "osfb-2", "osfb-3"), nwv1.WorkflowFailed)

	phases := map[string]nwv1.NodeOSPhase{}
	for _, n := range p.Status.Nodes {
		phases[n.Name] = n.Phase
	}
	if phases["osfb-1"] != nwv1.NodeOSDone || phases["osfb-2"] != nwv1.NodeOSFellBack || phases["osfb-3"] != nwv1.NodeOSPending {
		t.Fatalf("phases %v; want osfb-1 Done, osfb-2 FellBack, osfb-3 Pending", phases)
	}
	fell := s.booted("osfb-2")
	if fell.entry != "passive" || !fell.upgradeFailure || fell.image != repository(s.images[oldVersion]) {
		t.Errorf("osfb-2's host runs %+v; want the old image from its passive slot with upgrade_failure", fell)
	}
	msg := p.Status.Nodes[1].Evidence
	for _, want := range []string{fell.bootID, "KAIROS_IMAGE_REPO=\"" + fell.image + "\"", "upgrade_failure true"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the evidence %q does not say %q", msg, want)
		}
	}
	if got := s.booted("osfb-3"); got != untouched {
		t.Errorf("osfb-3 was touched: %+v, before %+v", got, untouched)
	}
	if cordoned, _ := unschedulable(t, "osfb-3"); cordoned {
		t.Error("osfb-3 was cordoned")
	}
	// The claim stays with the failed policy.
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.lockNS, Name: engine.LockName}, lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || !strings.Contains(*h, "/osfb-first/") {
		t.Errorf("the claim is held by %v; want the failed policy", lease.Spec.HolderIdentity)
	}
	// The agent keeps the fallback.
	as := &nwv1.NodewrightAgentStatus{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "osfb-2"}, as); err != nil {
		t.Fatal(err)
	}
	if fb := as.Status.OS.Kairos.LastFallback; fb == nil || fb.FromImage != image || fb.BootID != fell.bootID {
		t.Fatalf("osfb-2 reports the fallback %+v; want from %s at boot %s", fb, image, fell.bootID)
	}
	deleted(t, p)

	// Not acknowledged: held, and the others go on (osfb-1 already runs it).
	second := s.ended(s.policy("osfb-second", newVersion, soakFor, 2*time.Minute), nwv1.WorkflowSucceeded)
	if len(second.Status.Held) != 1 || second.Status.Held[0].Node != "osfb-2" || !strings.Contains(second.Status.Held[0].Reason, fell.bootID) {
		t.Errorf("held %+v; want osfb-2, naming its fallback's boot", second.Status.Held)
	}
	if got := s.booted("osfb-2"); got != fell {
		t.Errorf("osfb-2 was tried again without an acknowledgement: %+v", got)
	}
	if got := s.booted("osfb-3"); got.image != repository(image) || got.entry != "active" {
		t.Errorf("osfb-3 runs %+v; want the new image", got)
	}
	deleted(t, second)

	// The repair. The BootRecoveryPolicy pins osfb-2 (its status as its controller writes it:
	// internal/controller/bootrecoverypolicy proves that), which holds every policy's steps; a
	// repair of that fallback waits for a person, then stages the image osfb-2 booted (the old
	// one) again: the next boot proves it, from the active slot, without upgrade_failure.
	brp := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}}
	if err := env.Client.Create(context.Background(), brp); err != nil {
		t.Fatal(err)
	}
	// Deleted however the test ends: left behind, its pin would hold every later test's policy.
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), brp) })
	brp.Status.Nodes = []nwv1.NodeBootRecord{{Name: "osfb-2", BootEntry: nwv1.KairosBootPassive, BootID: fell.bootID, Image: fell.image,
		LastFallback: as.Status.OS.Kairos.LastFallback, PinnedImage: fell.image}}
	if err := env.Client.Status().Update(context.Background(), brp); err != nil {
		t.Fatal(err)
	}
	repair := s.policyWith("osfb-repair", oldVersion, soakFor, 2*time.Minute, func(p *nwv1.OSVersionPolicy) {
		p.Spec.Repairs = &nwv1.OSNodeRepair{Node: "osfb-2", BootID: fell.bootID}
		p.Spec.Approval = nwv1.ApprovalManual
	})
	held(t, repair, nwv1.ReasonAwaitingApproval, "Node1")
	if got := s.booted("osfb-2"); got != fell {
		t.Errorf("osfb-2 was changed before the repair was approved: %+v", got)
	}
	approve(t, repair, "Node1")
	repair = s.ended(repair, nwv1.WorkflowSucceeded)
	if len(repair.Status.Nodes) != 1 || repair.Status.Nodes[0].Name != "osfb-2" {
		t.Errorf("the repair's nodes %+v; want osfb-2 alone", repair.Status.Nodes)
	}
	if got := s.booted("osfb-2"); got.image != fell.image || got.entry != "active" || got.upgradeFailure || got.bootID == fell.bootID {
		t.Errorf("osfb-2 runs %+v after the repair; want %s from its active slot, in a new boot", got, fell.image)
	}
	var ops nwv1.NodeOperationList
	if err := env.Client.List(context.Background(), &ops, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	restaged := false
	for _, op := range ops.Items {
		if op.Labels[osupgrade.LabelName] == repair.Name && op.Spec.Type == nwv1.OperationRecoveryRestage && op.Spec.NodeName == "osfb-2" {
			restaged = op.Status.Phase == nwv1.OperationSucceeded
		}
	}
	if !restaged {
		t.Error("the repair did not stage the image by a RecoveryRestage that Succeeded")
	}
	deleted(t, repair)
	if err := env.Client.Delete(context.Background(), brp); err != nil {
		t.Fatal(err)
	}

	// Acknowledged, the image is tried again on it, and now boots.
	if err := s.hosts["osfb-2"].SetFault(kairosplay.FaultFailBoot, false); err != nil {
		t.Fatal(err)
	}
	third := s.ended(s.policyWith("osfb-third", newVersion, soakFor, 2*time.Minute, func(p *nwv1.OSVersionPolicy) {
		p.Annotations = map[string]string{nwv1.AnnotationAcknowledgeFallback: "osfb-2"}
	}), nwv1.WorkflowSucceeded)
	if !strings.Contains(steps(third), "tried again") {
		t.Errorf("the Preflight does not say the acknowledged node is tried again: %s", steps(third))
	}
	if got := s.booted("osfb-2"); got.image != repository(image) || got.entry != "active" || got.upgradeFailure {
		t.Errorf("osfb-2 runs %+v after the acknowledged try; want the new image from its active slot", got)
	}
}

// deleted deletes p and waits until it is gone (its claim released).
func deleted(t *testing.T, p *nwv1.OSVersionPolicy) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), &nwv1.OSVersionPolicy{}); err == nil {
			return "the policy is still there"
		}
		return ""
	})
}

// TestANodeThatNeverComesBackFailsItsStep: the first node does not come back from its reboot:
// its step fails at the reboot timeout, naming the boot it last reported, the policy stops
// holding the claim, and the second node is untouched.
func TestANodeThatNeverComesBackFailsItsStep(t *testing.T) {
	s := plant(t, true, "osgone-1", "osgone-2")
	if err := s.hosts["osgone-1"].SetFault(kairosplay.FaultNoReturn, true); err != nil {
		t.Fatal(err)
	}
	last := s.booted("osgone-1")
	untouched := s.booted("osgone-2")
	p := s.ended(s.policy("osgone", newVersion, soakFor, 30*time.Second, "osgone-1", "osgone-2"), nwv1.WorkflowFailed)
	n := p.Status.Nodes[0]
	if n.Phase != nwv1.NodeOSFailed || !strings.Contains(n.Evidence, "did not come back within 30s") || !strings.Contains(n.Evidence, last.bootID) {
		t.Errorf("osgone-1: %s, %q; want Failed, not back within 30s, naming boot %s", n.Phase, n.Evidence, last.bootID)
	}
	if !siteagent.Supervised(s.agents["osgone-1"]).Down() {
		t.Error("osgone-1's played machine is up")
	}
	if got := s.booted("osgone-2"); got != untouched || p.Status.Nodes[1].Phase != nwv1.NodeOSPending {
		t.Errorf("osgone-2 was touched: %+v (%s)", got, p.Status.Nodes[1].Phase)
	}
	if cordoned, by := unschedulable(t, "osgone-1"); !cordoned || by != "osversionpolicy/osgone" {
		t.Errorf("osgone-1: cordoned %t by %q; want it left cordoned by the policy", cordoned, by)
	}
}

// TestDRBDNotReconnectingFailsTheSoakAndIsRolledBack: the first node boots the new image but
// its DRBD does not reconnect: its health never turns green, its step fails naming the
// resources, the policy stops, and the second node is untouched. The BootRecoveryPolicy
// (onPostBootHealthTimeout RollbackWithApproval) sees that boot's post-boot health time out and
// creates its rollback, which waits for a person. The node boots again meanwhile: approved, the
// rollback's step refuses it, for it was made for the boot before. That boot's health times out
// too, and its rollback, approved, stages the old image on the node's active slot: the next
// boot proves it, with DRBD connected again.
func TestDRBDNotReconnectingFailsTheSoakAndIsRolledBack(t *testing.T) {
	// The profile pins the old image by digest: the rollback's image.
	s := plantWith(t, false, func(p *nwv1.EdgeProfileSpec, images map[string]string) {
		p.OSImages = append(p.OSImages, images[oldVersion])
	}, "osdrbd-1", "osdrbd-2")
	stopOS := s.startOperator()
	const node = "osdrbd-1"
	// The new image's DRBD does not come up; the old one's does.
	if err := s.hosts[node].SetFault(kairosplay.FaultNoDRBD, true, s.images[newVersion]); err != nil {
		t.Fatal(err)
	}
	s.bootRecoveryPolicy(nwv1.BootRecoveryPolicySpec{PostBootHealth: nwv1.PostBootHealth{Timeout: metav1.Duration{Duration: time.Minute}},
		OnPostBootHealthTimeout: nwv1.PostBootHealthRollbackWithApproval})
	s.startBootRecovery()
	healthy := s.booted(node)
	bootRecord(t, node, func(_ *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord) string {
		if l := n.LastHealthy; l == nil || l.BootID != healthy.bootID || l.Image != healthy.image {
			return fmt.Sprintf("%s's last healthy boot %+v; want %s of %s", node, l, healthy.bootID, healthy.image)
		}
		return ""
	})
	// rollback waits for the rollback the BootRecoveryPolicy made of boot, and shortens its soak
	// while it is Pending.
	rollback := func(boot string) *nwv1.OSVersionPolicy {
		t.Helper()
		var name string
		bootRecord(t, node, func(_ *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord) string {
			if rb := n.Rollback; rb == nil || rb.BootID != boot || rb.Policy == "" {
				return fmt.Sprintf("%s's rollback %+v; want one of boot %s", node, rb, boot)
			}
			name = n.Rollback.Policy
			return ""
		})
		rb := &nwv1.OSVersionPolicy{}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, rb); err != nil {
				return err
			}
			rb.Spec.Soak, rb.Spec.RebootTimeout = metav1.Duration{Duration: soakFor}, metav1.Duration{Duration: 2 * time.Minute}
			return env.Client.Update(context.Background(), rb)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), rb) })
		if sp := rb.Spec; sp.Image != s.images[oldVersion] || sp.Approval != nwv1.ApprovalManual || !sp.Repairs.IsRollback() || sp.Repairs.Node != node || sp.Repairs.BootID != boot {
			t.Fatalf("the rollback's spec %+v, repairs %+v; want the old image on %s, a Rollback of boot %s, approval Manual", sp, sp.Repairs, node, boot)
		}
		return rb
	}
	untouched := s.booted("osdrbd-2")
	// The reboot timeout bounds both the node's return and its health turning green: a minute,
	// so that a busy machine's slow played reboot is not taken for a node that did not return.
	upgrade := s.policy("osdrbd", newVersion, soakFor, time.Minute, node, "osdrbd-2")
	// The OSVersionPolicy controller is stopped while the upgrade's soak waits for the node's
	// health, until the BootRecoveryPolicy made the rollback and its soak is shortened: once the
	// upgrade ended, the rollback would start at once.
	testenv.Eventually(t, patience, func() string {
		cur := &nwv1.OSVersionPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(upgrade), cur); err != nil {
			return err.Error()
		}
		if len(cur.Status.Nodes) == 0 {
			return "no node recorded yet"
		}
		if sp := part(cur.Status.Nodes[0], "Soak"); sp == nil || sp.State != nwv1.StepRunning {
			return fmt.Sprintf("%s's soak %+v; want it under way", node, sp)
		}
		return ""
	})
	stopOS()
	unhealthy := s.booted(node)
	first := rollback(unhealthy.bootID)
	stopOS = s.startOperator()
	p := s.ended(upgrade, nwv1.WorkflowFailed)
	n := p.Status.Nodes[0]
	if n.Phase != nwv1.NodeOSFailed || n.VerifiedAt == nil {
		t.Errorf("%s: %s, verified %v; want Failed after it was proven booted", node, n.Phase, n.VerifiedAt)
	}
	if soak := part(n, "Soak"); soak == nil || soak.State != nwv1.StepFailed || !strings.Contains(soak.Message, "not green") || !strings.Contains(soak.Message, drbdResources[0]) {
		t.Errorf("the soak: %+v; want it failed, naming %s", soak, drbdResources[0])
	}
	if got := s.booted(node); got != unhealthy {
		t.Errorf("%s runs %+v after the upgrade failed; want %+v, as in its soak", node, got, unhealthy)
	}
	if unhealthy.image != repository(s.images[newVersion]) || unhealthy.entry != "active" {
		t.Errorf("%s runs %+v; want the new image from its active slot (its boot worked; its storage did not come back)", node, unhealthy)
	}
	if got := s.booted("osdrbd-2"); got != untouched {
		t.Errorf("osdrbd-2 was touched: %+v", got)
	}
	// A person deletes the failed policy, which keeps the claim (the rollback waits for it, still
	// Pending, until then).
	deleted(t, p)
	held(t, first, nwv1.ReasonAwaitingApproval, "Node1")
	// The node boots again while its rollback waits (the new image again: still unhealthy).
	succeeded(t, s.reboot(node, "reboot-while-waiting"))
	again := s.booted(node)
	if again.bootID == unhealthy.bootID || again.image != unhealthy.image {
		t.Fatalf("%s runs %+v after its reboot; want the new image in a new boot", node, again)
	}
	approve(t, first, "Node1")
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(first), first); err != nil {
			return err.Error()
		}
		if !first.Status.Phase.Finished() {
			return fmt.Sprintf("phase %s; steps %s", first.Status.Phase, steps(first))
		}
		return ""
	})
	if first.Status.Phase == nwv1.WorkflowSucceeded || !strings.Contains(steps(first), "booted again since") {
		t.Errorf("the rollback of a boot the node left ended %s: %s; want it refused at its step, the node booted again since", first.Status.Phase, steps(first))
	}
	if got := s.booted(node); got != again {
		t.Errorf("%s was changed by the refused rollback: %+v", node, got)
	}

	// The first rollback, refused before it changed anything, let the claim go: the
	// OSVersionPolicy controller is stopped while the second is made and its soak shortened,
	// so that it is still Pending then.
	stopOS()
	second := rollback(again.bootID)
	s.startOperator()
	deleted(t, first)
	approve(t, second, "Node1")
	second = s.ended(second, nwv1.WorkflowSucceeded)
	got := s.booted(node)
	if got.image != repository(s.images[oldVersion]) || got.entry != "active" || got.upgradeFailure || got.bootID == again.bootID {
		t.Errorf("%s runs %+v after the rollback; want the old image from its active slot, in a new boot", node, got)
	}
	if soak := part(second.Status.Nodes[0], "Soak"); soak == nil || soak.State != nwv1.StepSucceeded {
		t.Errorf("the rollback's soak %+v; want it Succeeded: the old image's DRBD connects", soak)
	}
	var ops nwv1.NodeOperationList
	if err := env.Client.List(context.Background(), &ops, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	staged := false
	for _, op := range ops.Items {
		if op.Labels[osupgrade.LabelName] == second.Name && op.Spec.NodeName == node && op.Spec.Type == nwv1.OperationOSUpgradeStage {
			staged = op.Status.Phase == nwv1.OperationSucceeded
		}
	}
	if !staged {
		t.Error("the rollback did not stage the old image by an OSUpgradeStage that Succeeded")
	}
	bootRecord(t, node, func(_ *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord) string {
		if rb := n.Rollback; rb == nil || rb.BootID != again.bootID || rb.Phase != string(nwv1.WorkflowSucceeded) || !strings.Contains(rb.Message, "approved by alice") {
			return fmt.Sprintf("%s's rollback %+v; want the second Succeeded, approved by alice", node, rb)
		}
		if l := n.LastHealthy; l == nil || l.BootID != got.bootID {
			return fmt.Sprintf("%s's last healthy boot %+v; want %s", node, l, got.bootID)
		}
		return ""
	})
	if rec := s.trail.Find(nwv1.BootRecoveryPolicyName, "RolledBack"); rec == nil || !strings.Contains(rec.Message, again.bootID) {
		t.Errorf("the rollback's audit record %+v; want it naming boot %s", rec, again.bootID)
	}
	if got := s.booted("osdrbd-2"); got != untouched {
		t.Errorf("osdrbd-2 was touched by the rollback: %+v", got)
	}
}
