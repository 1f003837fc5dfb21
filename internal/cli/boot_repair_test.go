package cli

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
)

// boot reset and boot select create the repair of the node's boot its agent reports, pinned
// by digest, waiting for approval; run twice they find it; a node whose report does not allow
// the repair, and a bad ENTRY or --image, are refused before anything is written.
func TestBootResetAndSelect(t *testing.T) {
	ctx := context.Background()
	const boot = "7d1e0c55-aaaa-4bbb-8ccc-000000000001"
	kairos := func(entry nwv1.KairosBootEntry, image string, armed bool) nwv1.NodewrightAgentStatusStatus {
		return nwv1.NodewrightAgentStatusStatus{OS: &nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, BootID: boot, Kairos: &nwv1.KairosStatus{
			BootEntry: entry, Image: image, BootAssessment: &nwv1.KairosBootAssessment{Enabled: armed, Tentative: armed}}}}
	}
	createAgent(t, "edge-r", kairos(nwv1.KairosBootActive, osBootV1, true))
	createAgent(t, "edge-s", kairos(nwv1.KairosBootActive, osBootV1, false))
	createAgent(t, "edge-t", kairos(nwv1.KairosBootPassive, osBootV1, true))
	// The policy that put v1 on the nodes names it by digest.
	v1 := osBootV1 + "@sha256:" + strings.Repeat("1", 64)
	upgrade := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "to-v1-for-reset"}, Spec: nwv1.OSVersionPolicySpec{Image: v1}}
	if err := env.Client.Create(ctx, upgrade); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), upgrade) })
	repairs := func() []nwv1.OSVersionPolicy {
		t.Helper()
		var list nwv1.OSVersionPolicyList
		if err := env.Client.List(ctx, &list, client.HasLabels{osupgrade.LabelRepairOf}); err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), &p) })
		}
		return list.Items
	}

	r := plugin(t, runOpts{}, "boot", "reset", "edge-r")
	r.wantCode(t, ExitOK)
	name := "edge-r-reset-7d1e0c55"
	want := "osversionpolicy/" + name + " created: it clears edge-r's stale boot-assessment flags, then reboots it into " + v1 + " from its active slot (boot " + boot + ")\n" +
		"Next: approve its step Node1 (kubectl nodewright approve osvp/" + name + "); it waits for its maintenance window, if any, and the cluster-wide claim, then cordons, drains and reboots edge-r.\n"
	if r.stdout != want || r.stderr != "" {
		t.Errorf("boot reset: stdout %q, stderr %q\nwant %q", r.stdout, r.stderr, want)
	}
	got := repairs()
	if len(got) != 1 || got[0].Name != name || got[0].Spec.Image != v1 || got[0].Spec.Approval != nwv1.ApprovalManual ||
		*got[0].Spec.Repairs != (nwv1.OSNodeRepair{Node: "edge-r", BootID: boot, Kind: nwv1.OSRepairAssessmentReset}) {
		t.Fatalf("the repairs after boot reset: %+v; want %s, resetting edge-r's boot %s, %s, approval Manual", got, name, boot, v1)
	}
	r = plugin(t, runOpts{}, "boot", "reset", "edge-r")
	r.wantCode(t, ExitOK)
	wantAll(t, "boot reset again", r.stdout, "osversionpolicy/"+name+" already there, made for the same boot: it clears edge-r's")

	v2 := osImageV2
	r = plugin(t, runOpts{}, "boot", "select", "edge-s", "Passive", "--image", v2)
	r.wantCode(t, ExitOK)
	wantAll(t, "boot select", r.stdout, "osversionpolicy/edge-s-select-7d1e0c55 created: it boots edge-s once into its passive entry, "+v2+"; the boot after boots its default entry again (boot "+boot+")")
	if got := repairs(); len(got) != 2 {
		t.Fatalf("%d repairs after boot select; want 2", len(got))
	}
	sel := &nwv1.OSVersionPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "edge-s-select-7d1e0c55"}, sel); err != nil {
		t.Fatal(err)
	}
	if rp := *sel.Spec.Repairs; rp != (nwv1.OSNodeRepair{Node: "edge-s", BootID: boot, Kind: nwv1.OSRepairSelectBootEntry, Entry: nwv1.KairosBootPassive}) || sel.Spec.Image != v2 {
		t.Errorf("the selection's spec %+v, image %s; want edge-s's boot %s, Passive, %s", rp, sel.Spec.Image, boot, v2)
	}
	// The same boot's selection of another image is not this one; nor is one that ended.
	r = plugin(t, runOpts{}, "boot", "select", "edge-s", "passive", "--image", v1)
	r.wantCode(t, ExitFailed)
	wantAll(t, "boot select of another image", r.stderr, "osversionpolicy/edge-s-select-7d1e0c55 is there for the same boot with spec.image "+v2+", not "+v1+": delete it")
	sel.Status.Phase = nwv1.WorkflowRolledBack
	if err := env.Client.Status().Update(ctx, sel); err != nil {
		t.Fatal(err)
	}
	r = plugin(t, runOpts{}, "boot", "select", "edge-s", "passive", "--image", v2)
	r.wantCode(t, ExitFailed)
	wantAll(t, "boot select of an ended one", r.stderr, "osversionpolicy/edge-s-select-7d1e0c55 is there for the same boot and ended RolledBack")

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"reset", "edge-s"}, ExitFailed, "spec.repairs: edge-s's boot assessment is not armed to fall back"},
		{[]string{"reset", "edge-t"}, ExitFailed, "spec.repairs: edge-t runs from its Passive slot (upgrade_failure false)"},
		{[]string{"reset", "edge-9"}, ExitFailed, "edge-9: no NodewrightAgentStatus: no agent reports its boot"},
		{[]string{"reset", "edge-r", "--image", osBootV2}, ExitUsage, "--image " + osBootV2 + ": edge-r runs " + osBootV1 + " from its active slot"},
		{[]string{"reset"}, ExitUsage, "wants one NODE, got 0"},
		{[]string{"select", "edge-s", "recovery", "--image", v2}, ExitUsage, "a repair does not boot a node into its recovery system"},
		{[]string{"select", "edge-r", "passive", "--image", v2}, ExitFailed, "spec.repairs: edge-r's boot assessment is armed to fall back (boot_assessment_tentative=yes): its agent would refuse the reboot"},
		{[]string{"select", "edge-s", "sideways", "--image", v2}, ExitUsage, `ENTRY "sideways": must be active or passive`},
		{[]string{"select", "edge-s", "passive"}, ExitUsage, "--image is required"},
		{[]string{"select", "edge-s", "passive", "--image", "quay.io/kairos/other:v9"}, ExitFailed,
			"edge-s: no image pinned by digest is known for quay.io/kairos/other:v9"},
	} {
		r := plugin(t, runOpts{}, append([]string{"boot"}, c.args...)...)
		r.wantCode(t, c.code)
		if !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("boot %v: stdout %q, stderr %q; want it to say %q", c.args, r.stdout, r.stderr, c.want)
		}
	}
	if got := repairs(); len(got) != 2 {
		t.Errorf("%d repairs after the refused commands; want the 2 made", len(got))
	}
}
