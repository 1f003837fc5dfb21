package ui_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/fleetview"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/ui"
)

// The fleet of TestFleetPageAt3500.
const (
	fleetSize = 3500
	// fleetRenderTarget is what the page should take from its navigation to the members drawn;
	// fleetRenderBound is what the test fails beyond, for a busy CI machine: the figure is
	// printed either way.
	fleetRenderTarget = time.Second
	fleetRenderBound  = 5 * time.Second
	fleetPageRows     = 100
)

// scaleMember is member i of the fleet: every 100th unreachable, every 250th (from 7) a
// checkpoint behind, every 50th (from 3) in a replication upgrade; a third on edge-lab, a
// quarter on Kubernetes v1.33.5, a tenth on Nodewright 0.8.0, a seventh booting image v2 and
// every 700th with a node that fell back from it; labels region (three) and, on seven,
// tier=gold.
func scaleMember(i int) fleetv1alpha1.NodewrightClusterSummary {
	name := fmt.Sprintf("store-%04d", i)
	s := fleetv1alpha1.NodewrightClusterSummary{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"region": []string{"eu-west", "us-east", "ap-south"}[i%3]}},
		Spec: fleetv1alpha1.NodewrightClusterSummarySpec{Registration: fleetv1alpha1.Registration{
			Source: fleetv1alpha1.FromKubeconfigSecret, Namespace: "nodewright-fleet", Name: name}},
	}
	if i%500 == 42 {
		s.Labels["tier"] = "gold"
	}
	st := &s.Status
	st.Phase, st.Nodes, st.Management = "SingleNode", fleetv1alpha1.MemberNodes{Ready: 1, Total: 1}, "Managed"
	st.KubernetesVersion, st.NodewrightVersion = "v1.34.2", "0.9.0"
	if i%4 == 0 {
		st.KubernetesVersion = "v1.33.5"
	}
	if i%10 == 0 {
		st.NodewrightVersion = "0.8.0"
	}
	st.Profile = &fleetv1alpha1.MemberProfile{Name: "edge-standard", Version: "1.2.0"}
	if i%3 == 0 {
		st.Profile = &fleetv1alpha1.MemberProfile{Name: "edge-lab", Version: "0.3.0"}
	}
	image := osTestImage
	if i%7 == 0 {
		image = osBootedV2
	}
	st.Boots = &fleetv1alpha1.MemberBoots{KairosNodes: 1, Nodes: []fleetv1alpha1.MemberNodeBoot{{Name: "n1", Slot: "Active", Image: image}}}
	if i%700 == 0 {
		st.Boots.FellBackNodes = 1
		st.Boots.FellBack = []fleetv1alpha1.ImageFallbacks{{Image: osBootedV2, Nodes: 1}}
	}
	reachable := metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonAnswering, Message: "checked"}
	if i%100 == 0 {
		reachable.Status, reachable.Reason = metav1.ConditionFalse, fleetv1alpha1.ReasonNotAnswering
	}
	checkpoint := metav1.Condition{Type: fleetv1alpha1.ConditionCheckpointConsistent, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonCheckpointOK, Message: "compared"}
	if i%250 == 7 {
		checkpoint.Status, checkpoint.Reason = metav1.ConditionFalse, fleetv1alpha1.ReasonCheckpointBehind
	}
	st.Conditions = []metav1.Condition{reachable, checkpoint}
	if i%50 == 3 {
		st.Workflows = []fleetv1alpha1.MemberWorkflow{{Kind: "ReplicationUpgrade", Name: "to-two", Phase: "Running", Step: "Place", Progress: "placed 1/2"}}
	}
	return s
}

// storeFleet creates the summaries on the hub with their status, as nodewright-fleet would,
// many at a time: two requests each, bounded so that the API server is kept busy, not
// swamped.
func storeFleet(t *testing.T, c client.Client, items []fleetv1alpha1.NodewrightClusterSummary) {
	t.Helper()
	ctx := context.Background()
	var g errgroup.Group
	g.SetLimit(32)
	for i := range items {
		g.Go(func() error {
			s := items[i].DeepCopy()
			status := s.Status
			s.Status = fleetv1alpha1.NodewrightClusterSummaryStatus{}
			if err := c.Create(ctx, s); err != nil {
				return err
			}
			s.Status = status
			for j := range s.Status.Conditions {
				s.Status.Conditions[j].LastTransitionTime = metav1.Now()
			}
			return c.Status().Update(ctx, s)
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestFleetPageAt3500 loads 3,500 summaries into a hub and opens the fleet page: it draws them
// within fleetRenderBound of its navigation (the figure is printed, against the 1 s target),
// with the counts by state internal/fleetview counts, the degraded first, a page of 100 rows;
// its search by name, profile, version and label keeps what SearchText says; and a member
// changing off the page changes the counts without drawing the page again, keeping the search
// and the page, while one that turns degraded moves to the front.
func TestFleetPageAt3500(t *testing.T) {
	start := time.Now()
	hub := testenv.New()
	hub.StartForTest(t)
	if err := hub.InstallCRDs(testenv.FleetCRDPaths(hub.RepoRoot)...); err != nil {
		t.Fatal(err)
	}
	items := make([]fleetv1alpha1.NodewrightClusterSummary, fleetSize)
	for i := range items {
		items[i] = scaleMember(i)
	}
	stored := time.Now()
	storeFleet(t, hub.Client, items)
	t.Logf("%d summaries stored in %s", fleetSize, time.Since(stored).Round(time.Millisecond))

	url, _ := runUIAs(t, hub.Config, ui.Options{Fleet: true})
	p := openPage(t, url, laptopWidth, laptopHeight)
	states := fleetview.CountStates(items)
	wantStates := fmt.Sprintf("%d,%d,%d,%d,%d,%d,%d", states.Members, states.Reachable, states.Unreachable, states.Unchecked,
		states.Degraded, states.Workflow, states.CheckpointMismatch)
	drawn := `document.getElementById('fleet-states').dataset.counts === ` + js(wantStates) +
		` && document.querySelectorAll('#fleet-members tr[data-member]').length === ` + fmt.Sprint(fleetPageRows)
	p.waitJS("the members counted and drawn", drawn)
	first := p.drawnAfter()

	// Again from the UI's own copy of the summaries, as a person reopening the page would.
	p.do(chromedp.Reload())
	p.waitJS("the members counted and drawn after a reload", drawn)
	again := p.drawnAfter()
	// A render with every row drawn again, and one as a live update does it (the rows kept).
	rerender, err := evaluate[float64](p, `(() => { const t0 = performance.now(); fleetRows = new Map(); renderFleet(); return performance.now() - t0; })()`)
	if err != nil {
		t.Fatal(err)
	}
	update, err := evaluate[float64](p, `(() => { const t0 = performance.now(); renderFleet(); return performance.now() - t0; })()`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("BENCH fleet page, %d summaries: drawn %s after navigation (target %s, %.2fx; first load, the UI listing them too: %s); a render drawing every row %.1f ms, one keeping them %.1f ms",
		fleetSize, again.Round(time.Millisecond), fleetRenderTarget, float64(again)/float64(fleetRenderTarget), first.Round(time.Millisecond), rerender, update)
	bound := fleetRenderBound
	if os.Getenv("NODEWRIGHT_BENCH_FLEET_PAGE") != "" {
		bound = fleetRenderTarget // make bench fleetpage: the target itself
	}
	if again > bound {
		t.Errorf("the fleet page drew %d summaries %s after its navigation; bound %s (target %s)", fleetSize, again, bound, fleetRenderTarget)
	}

	// The counts at the top, each as fleetview counts it.
	for state, n := range map[string]int{"members": states.Members, "reachable": states.Reachable, "unreachable": states.Unreachable,
		"degraded": states.Degraded, "workflow": states.Workflow, "mismatch": states.CheckpointMismatch} {
		if shown := p.text(`#fleet-states li[data-state="` + state + `"]`); !strings.HasPrefix(shown, fmt.Sprint(n)) {
			t.Errorf("the count of %s shows %q, want %d", state, shown, n)
		}
	}
	if states.Degraded != 49 || states.Unreachable != 35 || states.CheckpointMismatch != 14 || states.Workflow != 70 {
		t.Fatalf("the fleet is not the one the test means: %+v", states)
	}
	// The image a node fell back from is flagged among the versions.
	p.waitJS("image v2 flagged as fallen back from", query(`#fleet-versions-image li[data-value="`+osBootedV2+`"]`)+`?.classList.contains('fell-back') && `+
		`!`+query(`#fleet-versions-image li[data-value="`+osTestImage+`"]`)+`.classList.contains('fell-back')`)

	// Degraded first, by name, a page at a time, as fleetview sorts them; and each search.
	search := func(q string) {
		t.Helper()
		p.waitJS("searching "+q, `(() => { const el = document.getElementById('fleet-search'); el.value = `+js(q)+`; `+
			`el.dispatchEvent(new Event('input')); return true; })()`)
		want := wantPage(items, q, 0)
		p.waitJS(fmt.Sprintf("the search %q to keep %d member(s), the first %v", q, want.total, want.names[:min(3, len(want.names))]),
			fleetNames+` === `+js(strings.Join(want.names, ","))+` && document.getElementById('fleet-count').innerText.includes(`+js(want.count)+`)`)
	}
	search("")
	if order, _ := evaluate[string](p, fleetOrder); !strings.HasPrefix(order, "store-0000:true,store-0007:true,store-0100:true") ||
		strings.Count(order, ":true") != states.Degraded || strings.Count(order, ":false") != fleetPageRows-states.Degraded {
		t.Errorf("the first page is not the degraded first: %s", order)
	}
	search("store-1234")     // by name
	search("edge-lab@0.3.0") // by profile
	search("0.8.0")          // by Nodewright version
	search("v1.33.5 edge-lab")
	search("tier=gold")       // by label
	search("region=ap-south") // by label, more than a page
	p.do(chromedp.Click("#fleet-next"))
	want := wantPage(items, "region=ap-south", 1)
	p.waitJS("the second page of region=ap-south", fleetNames+` === `+js(strings.Join(want.names, ","))+
		` && document.getElementById('fleet-page').innerText.includes('page 2 of')`)

	// Live: a member the search hides turns unreachable. The counts change; the page is not
	// drawn again (a row of it keeps a mark the test set), the search and the page stay.
	p.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('#fleet-members tr[data-member]').nodewrightMark = 'kept'`))
	hidden := scaleMember(3001) // us-east
	turnUnreachable(t, hub.Client, hidden.Name)
	p.waitJS("the member off the page counted degraded", query(`#fleet-states li[data-state="degraded"]`)+`?.dataset.count === `+js(fmt.Sprint(states.Degraded+1)))
	if mark, err := evaluate[string](p, `document.querySelector('#fleet-members tr[data-member]').nodewrightMark || ''`); err != nil || mark != "kept" {
		t.Errorf("a change of a member off the page drew the page again (mark %q, %v)", mark, err)
	}
	if q, _ := evaluate[string](p, `document.getElementById('fleet-search').value + ' ' + document.getElementById('fleet-page').innerText`); !strings.HasPrefix(q, "region=ap-south ") || !strings.Contains(q, "page 2 of") {
		t.Errorf("a live change lost the search or the page: %q", q)
	}
	// A member the search keeps turns unreachable: it comes first.
	shownMember := scaleMember(3002) // ap-south
	turnUnreachable(t, hub.Client, shownMember.Name)
	p.do(chromedp.Click("#fleet-prev"))
	p.waitJS(shownMember.Name+" degraded among the first", query(`#fleet-members tr[data-member="`+shownMember.Name+`"]`)+`?.dataset.degraded === 'true'`)
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// fleetNames are the names of the members the fleet page draws, in order.
const fleetNames = `[...document.querySelectorAll('#fleet-members tr[data-member]')].map((r) => r.dataset.member).join(',')`

// drawnAfter is the time from the page's navigation to its first drawing of the members.
func (p *browserPage) drawnAfter() time.Duration {
	p.t.Helper()
	var ms float64
	p.waitJS("the page's mark of its members drawn", `performance.getEntriesByName('nodewright-fleet-drawn').length > 0`)
	ms, err := evaluate[float64](p, `performance.getEntriesByName('nodewright-fleet-drawn')[0].startTime`)
	if err != nil {
		p.t.Fatal(err)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// shownPage is what the page should draw of a search: the names of one page, and the count.
type shownPage struct {
	names []string
	total int
	count string
}

// wantPage is page n of the members the search q keeps, by fleetview's rules: every word in
// SearchText, degraded first, then by name.
func wantPage(items []fleetv1alpha1.NodewrightClusterSummary, q string, n int) shownPage {
	var kept []fleetv1alpha1.NodewrightClusterSummary
	for i := range items {
		text := fleetview.SearchText(&items[i])
		if !slices.ContainsFunc(strings.Fields(strings.ToLower(q)), func(w string) bool { return !strings.Contains(text, w) }) {
			kept = append(kept, items[i])
		}
	}
	fleetview.SortDegradedFirst(kept)
	out := shownPage{total: len(kept), count: fmt.Sprintf("%d member(s)", len(items))}
	if len(kept) != len(items) {
		out.count = fmt.Sprintf("showing %d.", len(kept))
	}
	for _, s := range kept[min(n*fleetPageRows, len(kept)):min((n+1)*fleetPageRows, len(kept))] {
		out.names = append(out.names, s.Name)
	}
	return out
}

// turnUnreachable marks the member's summary unreachable, as the hub would.
func turnUnreachable(t *testing.T, c client.Client, name string) {
	t.Helper()
	s := &fleetv1alpha1.NodewrightClusterSummary{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionFalse,
		Reason: fleetv1alpha1.ReasonNotAnswering, Message: "no answer in 5s"})
	if err := c.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}
