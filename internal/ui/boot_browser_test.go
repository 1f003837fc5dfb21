package ui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/ui"
)

// kairosBoot is the status of a Kairos node's agent that booted image in slot at boot bootID.
func kairosBoot(slot nwv1.KairosBootEntry, image, bootID string, fb *nwv1.KairosFallback) nwv1.NodewrightAgentStatusStatus {
	return nwv1.NodewrightAgentStatusStatus{Reporter: nwv1.ReporterAgent, Role: nwv1.NodeRolePrimary,
		OS: &nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, PrettyName: "Ubuntu 24.04 (Kairos)", BootID: bootID,
			Kairos: &nwv1.KairosStatus{BootEntry: slot, Image: image, LastFallback: fb}}}
}

// TestBootSlotsOnTheClusterPage: each Kairos node's card says its boot slot and its last
// fallback. A node in its Passive slot because this boot fell back reads "Passive, fell back"
// with the fallback ("This boot: from X to Y at boot B, seen T"); a node booted into Passive
// on purpose (no fallback this boot) reads Passive with no fallback; Recovery and Active each
// their own. The page follows the agents' reports as they are written: a node falls back, and
// the node that fell back boots its Active slot again (its last fallback stays, no longer this
// boot's).
func TestBootSlotsOnTheClusterPage(t *testing.T) {
	start := time.Now()
	own := testenv.New()
	own.StartForTest(t)
	ctx := context.Background()
	reader := "grace@example.com"
	grant(t, own, "nodewright-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
	}, reader)

	seen := metav1.NewTime(time.Now().Add(-90 * time.Minute).Truncate(time.Second))
	fellBack := &nwv1.KairosFallback{FromImage: osTestImage, ToImage: osBootedV1, BootID: "b-22", SeenAt: seen}
	agents := map[string]*nwv1.NodewrightAgentStatus{}
	for _, n := range []struct {
		name   string
		status nwv1.NodewrightAgentStatusStatus
	}{
		{"edge-1", kairosBoot(nwv1.KairosBootActive, osBootedV2, "b-11", nil)},
		{"edge-2", kairosBoot(nwv1.KairosBootPassive, osBootedV1, "b-22", fellBack)},
		{"edge-3", kairosBoot(nwv1.KairosBootPassive, osBootedV1, "b-33", nil)},
		{"edge-4", kairosBoot(nwv1.KairosBootRecovery, "", "b-44", nil)},
	} {
		a := &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
		if err := own.Client.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
		writeStatus(t, own, a, func() { a.Status = n.status })
		agents[n.name] = a
	}

	card := func(node string) string { return fmt.Sprintf(`[data-node="%s"]`, node) }
	// boots reads every node's slot, whether this boot fell back, and the fallback's text,
	// from the page as it is at the time: cards are replaced at every render.
	boots := `[...document.querySelectorAll('[data-node]')].map((c) => c.dataset.node + ':' + (c.querySelector('.boot')?.dataset.slot ?? '-') + ':' + (c.querySelector('.boot')?.dataset.fellBack ?? '-') + ':' + (c.querySelector('.fallback')?.dataset.thisBoot ?? '-')).join(',')`

	url, _ := runUIAs(t, as(own, reader), ui.Options{})
	p := openPage(t, url, laptopWidth, laptopHeight)
	p.waitJS("each node's slot, and edge-2's boot the one that fell back",
		boots+` === 'edge-1:Active:false:false,edge-2:Passive:true:true,edge-3:Passive:false:false,edge-4:Recovery:false:false'`)
	for node, wants := range map[string][]string{
		"edge-1": {"Boot slot", "Active", osBootedV2, "Last fallback", "none"},
		"edge-2": {"Passive, fell back", "this boot fell back from the image it was upgraded to",
			"This boot: from " + osTestImage + " to " + osBootedV1 + " at boot b-22, seen ", "1 h 30 min ago"},
		"edge-3": {"Passive", "booted there on purpose: no fallback this boot", "Last fallback", "none"},
		"edge-4": {"Recovery", "the recovery system"},
	} {
		shown := p.text(card(node))
		for _, want := range wants {
			if !contains(shown, want) {
				t.Errorf("%s's card does not show %q:\n%s", node, want, shown)
			}
		}
	}
	if shown := p.text(card("edge-3")); contains(shown, "fell back") || contains(shown, "This boot") {
		t.Errorf("edge-3, booted into Passive on purpose, reads as a fallback:\n%s", shown)
	}
	p.shot("cluster-boot-slots", laptopWidth, laptopHeight)

	// edge-1 falls back from the image; edge-2 boots its Active slot again, its last fallback
	// kept: no longer this boot's.
	writeStatus(t, own, agents["edge-1"], func() {
		agents["edge-1"].Status.OS.BootID = "b-12"
		agents["edge-1"].Status.OS.Kairos.BootEntry, agents["edge-1"].Status.OS.Kairos.Image = nwv1.KairosBootPassive, osBootedV1
		agents["edge-1"].Status.OS.Kairos.LastFallback = &nwv1.KairosFallback{FromImage: osTestImage, ToImage: osBootedV1, BootID: "b-12", SeenAt: metav1.Now()}
	})
	writeStatus(t, own, agents["edge-2"], func() {
		agents["edge-2"].Status.OS.BootID = "b-23"
		agents["edge-2"].Status.OS.Kairos.BootEntry, agents["edge-2"].Status.OS.Kairos.Image = nwv1.KairosBootActive, osBootedV2
	})
	p.waitJSFor("edge-1 fallen back this boot, edge-2 Active with its earlier fallback",
		boots+` === 'edge-1:Passive:true:true,edge-2:Active:false:false,edge-3:Passive:false:false,edge-4:Recovery:false:false'`, patience)
	if shown := p.text(card("edge-2")); !contains(shown, "from "+osTestImage+" to "+osBootedV1+" at boot b-22") || contains(shown, "This boot") {
		t.Errorf("edge-2, Active again, does not show its earlier fallback as such:\n%s", shown)
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}
