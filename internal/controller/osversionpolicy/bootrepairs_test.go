package osversionpolicy_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// TestAssessmentResetAndBootSelectionAreApprovedRepairs: the two repairs that stage no image,
// on a played Kairos host with its real agent, each an OSVersionPolicy (spec.repairs) that
// waits for a person's approval, then cordons, drains, reboots, verifies and soaks as an
// upgrade does.
//
//   - The node runs the new image from its active slot, the old one in its passive slot. Its
//     boot-assessment block is left armed (boot_assessment_tentative=yes,
//     enable_boot_assessment=yes: a boot that never counted as good, kairos#4303), so a plain
//     reboot would fall back: its agent refuses one.
//   - An AssessmentReset made for another boot fails its Preflight, naming the boot, and so
//     does a SelectBootEntry while the flags are armed: nothing changed (RolledBack).
//   - The AssessmentReset of its boot waits for approval; approved, its agent clears the flags
//     (a BootAssessmentReset) and the node boots the new image from its active slot once more,
//     its boot counted good.
//   - A SelectBootEntry of its passive entry, approved, boots the old image from the passive
//     slot, no fallback (no upgrade_failure, no lastFallback), said to be for that boot only;
//     and the node's next reboot boots its active slot again.
//   - The API refuses a selection of the recovery system, and an entry on another kind.
func TestAssessmentResetAndBootSelectionAreApprovedRepairs(t *testing.T) {
	ctx := context.Background()
	s := plant(t, true, "osfix-1")
	node := "osfix-1"
	sup := siteagent.Supervised(s.agents[node])

	repair := func(name, version string, rp nwv1.OSNodeRepair) *nwv1.OSVersionPolicy {
		t.Helper()
		return s.policyWith(name, version, soakFor, 2*time.Minute, func(p *nwv1.OSVersionPolicy) {
			p.Spec.NodeSelector = nil
			p.Spec.Repairs = &rp
			p.Spec.Approval = nwv1.ApprovalManual
			p.Spec.VMProtection = nwv1.VMProtectionStop
		})
	}
	approved := func(p *nwv1.OSVersionPolicy) {
		t.Helper()
		held(t, p, nwv1.ReasonAwaitingApproval, "Node1")
		approve(t, p, "Node1")
	}
	operations := func(p *nwv1.OSVersionPolicy, typ nwv1.NodeOperationType) []nwv1.NodeOperation {
		t.Helper()
		var ops nwv1.NodeOperationList
		if err := env.Client.List(ctx, &ops, client.InNamespace(s.ns), client.MatchingLabels{osupgrade.LabelName: p.Name}); err != nil {
			t.Fatal(err)
		}
		var out []nwv1.NodeOperation
		for _, op := range ops.Items {
			if op.Spec.Type == typ {
				out = append(out, op)
			}
		}
		return out
	}
	armed := func(want bool) {
		t.Helper()
		testenv.Eventually(t, patience, func() string {
			as := &nwv1.NodewrightAgentStatus{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
				return err.Error()
			}
			if as.Status.OS == nil || as.Status.OS.Kairos == nil || as.Status.OS.Kairos.BootAssessment.WouldFallBack() != want {
				return fmt.Sprintf("%s reports %+v; want its boot assessment armed to fall back: %t", node, as.Status.OS, want)
			}
			return ""
		})
	}

	// The new image on the active slot, the old one kept on the passive slot.
	succeeded(t, s.operate(node, "stage-new", nwv1.OperationOSUpgradeStage, func(o *nwv1.NodeOperationSpec) {
		o.OSUpgradeStage = &nwv1.OSImageOperation{Image: s.images[newVersion]}
	}))
	succeeded(t, s.reboot(node, "reboot-new"))
	s.reported(node, newVersion)
	bin, err := kairosplay.GRUBEditenv()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, s.hosts[node].GRUBEnvFile(), "set", "boot_assessment_tentative=yes", "enable_boot_assessment=yes").CombinedOutput(); err != nil {
		t.Fatalf("grub-editenv: %v: %s", err, out)
	}
	armed(true)
	stale := s.booted(node)

	// Made for another boot: refused before anything changes.
	p := repair("osfix-other-boot", newVersion, nwv1.OSNodeRepair{Node: node, BootID: "not-" + stale.bootID, Kind: nwv1.OSRepairAssessmentReset})
	p = s.ended(p, nwv1.WorkflowRolledBack)
	if pre := steps(p); !strings.Contains(pre, "runs boot "+stale.bootID+", not boot not-"+stale.bootID) {
		t.Errorf("the Preflight of a reset of another boot says\n  %s\nwant it naming the node's boot", pre)
	}

	// A selection of an armed node: refused, or its agent would refuse the reboot and leave the
	// selection for the next one.
	p = repair("osfix-select-armed", oldVersion, nwv1.OSNodeRepair{Node: node, BootID: stale.bootID, Kind: nwv1.OSRepairSelectBootEntry, Entry: nwv1.KairosBootPassive})
	p = s.ended(p, nwv1.WorkflowRolledBack)
	if pre := steps(p); !strings.Contains(pre, "armed to fall back") {
		t.Errorf("the Preflight of a selection on an armed node says\n  %s\nwant it refused, naming the flags", pre)
	}

	// The reset of its boot, approved.
	boots := len(sup.Boots())
	p = repair("osfix-reset", newVersion, nwv1.OSNodeRepair{Node: node, BootID: stale.bootID, Kind: nwv1.OSRepairAssessmentReset})
	approved(p)
	p = s.ended(p, nwv1.WorkflowSucceeded)
	if n := len(sup.Boots()) - boots; n != 1 {
		t.Errorf("%s booted %d times for the reset; want once", node, n)
	}
	if b := s.booted(node); b.entry != "active" || b.upgradeFailure || b.image != repository(s.images[newVersion]) || b.bootID == stale.bootID {
		t.Errorf("%s runs %+v after the reset; want %s from its active slot, in a new boot", node, b, newVersion)
	}
	armed(false)
	if ops := operations(p, nwv1.OperationBootAssessmentReset); len(ops) != 1 || ops[0].Status.Phase != nwv1.OperationSucceeded ||
		!strings.Contains(strings.Join(ops[0].Status.Result.ClearedAssessment, ","), "boot_assessment_tentative=yes") {
		t.Errorf("the reset's BootAssessmentReset operations: %+v; want one, Succeeded, clearing boot_assessment_tentative=yes", ops)
	}
	if n := operations(p, nwv1.OperationOSUpgradeStage); len(n) != 0 {
		t.Errorf("the reset staged an image (%d OSUpgradeStage)", len(n))
	}
	if ev := p.Status.Nodes[0].Evidence; !strings.Contains(ev, "boot assessment cleared") {
		t.Errorf("the reset's evidence %q; want the boot counted good", ev)
	}

	// One boot of the passive slot's old image, approved.
	reset := s.booted(node)
	p = repair("osfix-passive", oldVersion, nwv1.OSNodeRepair{Node: node, BootID: reset.bootID, Kind: nwv1.OSRepairSelectBootEntry, Entry: nwv1.KairosBootPassive})
	approved(p)
	p = s.ended(p, nwv1.WorkflowSucceeded)
	passive := s.booted(node)
	if passive.entry != "passive" || passive.upgradeFailure || passive.image != repository(s.images[oldVersion]) || passive.bootID == reset.bootID {
		t.Errorf("%s runs %+v after the selection; want %s from its passive slot, no fallback, in a new boot", node, passive, oldVersion)
	}
	if ev := p.Status.Nodes[0].Evidence; !strings.Contains(ev, "for this boot only") {
		t.Errorf("the selection's evidence %q; want it saying the boot is one only", ev)
	}
	if ops := operations(p, nwv1.OperationSelectBootEntry); len(ops) != 1 || ops[0].Spec.SelectBootEntry.Entry != nwv1.KairosBootPassive || ops[0].Status.Phase != nwv1.OperationSucceeded {
		t.Errorf("the selection's SelectBootEntry operations: %+v; want one of Passive, Succeeded", ops)
	}
	as := &nwv1.NodewrightAgentStatus{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
		t.Fatal(err)
	}
	if fb := as.Status.OS.Kairos.LastFallback; fb != nil && fb.BootID == passive.bootID {
		t.Errorf("the agent reports the selected boot as a fallback: %+v", fb)
	}
	succeeded(t, s.reboot(node, "reboot-after-selection"))
	if b := s.booted(node); b.entry != "active" || b.image != repository(s.images[newVersion]) {
		t.Errorf("%s runs %+v at the boot after the selection; want %s from its active slot again", node, b, newVersion)
	}

	// What the API refuses.
	for _, c := range []struct {
		rp   nwv1.OSNodeRepair
		want string
	}{
		{nwv1.OSNodeRepair{Node: node, BootID: "b", Kind: nwv1.OSRepairSelectBootEntry, Entry: nwv1.KairosBootRecovery}, "must be Active or Passive"},
		{nwv1.OSNodeRepair{Node: node, BootID: "b", Kind: nwv1.OSRepairSelectBootEntry}, "entry is set exactly when kind is SelectBootEntry"},
		{nwv1.OSNodeRepair{Node: node, BootID: "b", Kind: nwv1.OSRepairAssessmentReset, Entry: nwv1.KairosBootPassive}, "entry is set exactly when kind is SelectBootEntry"},
	} {
		bad := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "osfix-refused"}, Spec: nwv1.OSVersionPolicySpec{
			Image: s.images[oldVersion], Repairs: &c.rp, Approval: nwv1.ApprovalManual}}
		if err := env.Client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), c.want) {
			_ = env.Client.Delete(ctx, bad)
			t.Errorf("creating a repair %+v: %v; want refused, %q", c.rp, err, c.want)
		}
	}
}
