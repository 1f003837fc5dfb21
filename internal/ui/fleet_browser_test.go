package ui_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/ui"
)

// fleetOrder is the members the fleet page lists, in order, each with whether it is marked
// degraded: "site-c:true,site-a:false".
const fleetOrder = `[...document.querySelectorAll('#fleet-members tr[data-member]')].map((r) => r.dataset.member + ':' + r.dataset.degraded).join(',')`

// TestFleetPage points the UI at a fleet hub (a control plane of its own with the fleet CRD)
// as a user who may only read the summaries: the page lists the members, degraded first and
// marked, with their facts and the command to act on each; it follows the hub live (a member
// registered, a member turning unreachable) without a reload; its filters keep what
// kubectl nodewright fleet's flags keep; it says which images the shown members' Kairos nodes
// fell back from and on how many nodes; and it has nothing that writes, nor does its server.
func TestFleetPage(t *testing.T) {
	start := time.Now()
	hub := testenv.New()
	hub.StartForTest(t)
	if err := hub.InstallCRDs(testenv.FleetCRDPaths(hub.RepoRoot)...); err != nil {
		t.Fatal(err)
	}
	reader := "grace@example.com"
	grant(t, hub, "fleet-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{fleetv1alpha1.GroupVersion.Group}, Resources: []string{"nodewrightclustersummaries"}, Verbs: []string{"get", "list", "watch"}},
	}, reader)
	members := testenv.FleetMembers()
	// Kairos nodes fell back from osTestImage on site-a (two) and site-d (one), and from
	// osBootedV2 on site-d.
	members[0].Status.Boots = &fleetv1alpha1.MemberBoots{KairosNodes: 3, FellBackNodes: 2, FellBack: []fleetv1alpha1.ImageFallbacks{{Image: osTestImage, Nodes: 2}}}
	members[3].Status.Boots = &fleetv1alpha1.MemberBoots{KairosNodes: 2, FellBackNodes: 2,
		FellBack: []fleetv1alpha1.ImageFallbacks{{Image: osTestImage, Nodes: 1}, {Image: osBootedV2, Nodes: 1}}}
	stored := map[string]*fleetv1alpha1.NodewrightClusterSummary{}
	for _, m := range members[:4] {
		stored[m.Name] = testenv.StoreSummary(t, hub.Client, m)
	}

	url, _ := runUIAs(t, as(hub, reader), ui.Options{Fleet: true})
	p := openPage(t, url, laptopWidth, laptopHeight)
	p.waitJS("the fleet page, the only one", `!document.getElementById('page-fleet').hidden && document.getElementById('page-cluster').hidden && `+
		`[...document.querySelectorAll('nav a')].filter((a) => a.offsetParent !== null).map((a) => a.dataset.page).join(',') === 'fleet'`)
	p.waitJS("four members, the degraded first", fleetOrder+` === 'site-c:true,site-d:true,site-a:false,site-b:false'`)

	row := func(name string) string { return `#fleet-members tr[data-member="` + name + `"]` }
	for name, wants := range map[string][]string{
		"site-c": {"Degraded", "unreachable (NotAnswering)", "False", "MultiNode", "2/3", "Observe", "BondModeFlipPlan/to-lacp Node2Confirm", "edge-lab@0.3.0", "ok",
			"kubectl --context site-c nodewright status"},
		"site-d": {"Degraded", "phase Degraded · checkpoint PublishedBehindRecorded", "1/2", "ReplicationUpgrade/u1 Sync synced 1/4",
			"BondModeFlipPlan/to-lacp Node2Confirm", "mismatch", "recorded #40", "kubectl --context site-d nodewright status", "2 fell back"},
		"site-a": {"True", "MultiNode", "3/3", "2 fell back", "Managed", "edge-standard@1.2.0", "ok", "Kubernetes v1.34.2", "Nodewright 0.9.0", "kubectl --context site-a nodewright status"},
		"site-b": {"SingleNode", "1/1", "ReplicationUpgrade/to-two Place placed 4/8", "kubectl --context site-b nodewright status"},
	} {
		if shown := p.text(row(name)); !contains(shown, wants...) {
			t.Errorf("the row of %s does not show all of %q:\n%s", name, wants, shown)
		}
	}
	if shown := p.text(row("site-a")); contains(shown, "Degraded") {
		t.Errorf("healthy site-a is marked degraded:\n%s", shown)
	}
	if title, _ := evaluate[string](p, query(row("site-d")+" .fell-back")+`?.title`); title != "1 from "+osTestImage+" (+1)" {
		t.Errorf("site-d's fallbacks say %q", title)
	}
	fellBack := `[...document.querySelectorAll('#fleet-fellback-images li')].map((l) => l.innerText).join('\n')`
	p.waitJS("the images the members' nodes fell back from, counted across them", fellBack+` === `+
		js(osTestImage+" — 3 node(s) on site-a, site-d\n"+osBootedV2+" — 1 node(s) on site-d")+` && !document.getElementById('fleet-fellback').hidden`)
	if n, _ := evaluate[int](p, `document.querySelectorAll('#page-fleet button:not([data-pager]), #page-fleet form, #page-fleet a[href]').length`); n != 0 {
		t.Errorf("the fleet page has %d buttons (other than its pages'), forms or links; it only reads", n)
	}
	p.shot("fleet", laptopWidth, laptopHeight)

	// Live: a member registered (not checked yet), and site-b turning unreachable, without a
	// reload of the page.
	p.do(chromedp.Evaluate[chromedp.Void](`window.nodewrightNoReload = 'still here'`))
	testenv.StoreSummary(t, hub.Client, members[4])
	b := stored["site-b"]
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionFalse,
		Reason: fleetv1alpha1.ReasonNotAnswering, Message: "no answer in 5s"})
	if err := hub.Client.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	p.waitJS("site-e listed and site-b degraded, the degraded first", fleetOrder+` === 'site-b:true,site-c:true,site-d:true,site-e:true,site-a:false'`)
	if shown := p.text(row("site-e")); !contains(shown, "not checked yet", "none seen", "Unknown") {
		t.Errorf("the new member's row:\n%s", shown)
	}
	if mark, err := evaluate[string](p, `window.nodewrightNoReload || ''`); err != nil || mark != "still here" {
		t.Fatalf("the page was reloaded (mark %q, %v)", mark, err)
	}

	// The filters, from the page's own controls: the checkbox with the keyboard, the lists set
	// and announced in one step of the page's script.
	choose := func(id, value string) {
		t.Helper()
		p.waitJS("choosing "+value+" in "+id, `(() => { const el = document.getElementById(`+js(id)+`); `+
			`if (![...el.options].some((o) => o.value === `+js(value)+`)) return false; `+
			`el.value = `+js(value)+`; el.dispatchEvent(new Event('change')); return el.value === `+js(value)+`; })()`)
	}
	p.press("#fleet-degraded", " ")
	p.waitJS("only the degraded members", fleetOrder+` === 'site-b:true,site-c:true,site-d:true,site-e:true' && `+
		`document.getElementById('fleet-count').innerText === '5 member(s), 4 degraded; showing 4.'`)
	p.waitJS("the degraded members' fallbacks alone", fellBack+` === `+js(osBootedV2+" — 1 node(s) on site-d\n"+osTestImage+" — 1 node(s) on site-d"))
	choose("fleet-profile", "edge-standard")
	p.waitJS("the degraded members on edge-standard", fleetOrder+` === 'site-b:true'`)
	p.waitJS("no fallback among them: no section", `document.getElementById('fleet-fellback').hidden`)
	p.press("#fleet-degraded", " ")
	p.waitJS("every member on edge-standard", fleetOrder+` === 'site-b:true,site-a:false'`)
	choose("fleet-profile", "")
	choose("fleet-workflow", "BondModeFlipPlan")
	p.waitJS("the members running a flip", fleetOrder+` === 'site-c:true,site-d:true'`)
	choose("fleet-workflow", "any")
	p.waitJS("the members running a workflow", fleetOrder+` === 'site-b:true,site-c:true,site-d:true'`)
	choose("fleet-workflow", "")
	p.waitJS("every member again", fleetOrder+` === 'site-b:true,site-c:true,site-d:true,site-e:true,site-a:false'`)

	// Nor does the server take a write for the page.
	for _, call := range []string{`fetch('/api/migrations', {method: 'POST', headers: {'X-Nodewright-Token': token, 'Content-Type': 'application/json'}, body: '{}'})`,
		`fetch('/api/flips/to-lacp/approve', {method: 'POST', headers: {'X-Nodewright-Token': token}})`,
		`fetch('/api/choices', {headers: {'X-Nodewright-Token': token}})`,
		`fetch('/api/storageclasses', {headers: {'X-Nodewright-Token': token}})`} {
		ctx, cancel := context.WithTimeout(p.ctx, patience)
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](call+`.then((r) => r.status)`, chromedp.EvalAwaitPromise))
		cancel()
		if err != nil || status != http.StatusNotFound {
			t.Errorf("%s: status %d (%v), want 404", call, status, err)
		}
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// TestFleetPageSaysWhatItCannotShow: --fleet against a cluster that is not a hub, and against
// a hub as a user who may not list the summaries: the page's stream says so.
func TestFleetPageSaysWhatItCannotShow(t *testing.T) {
	wantProblem(t, userConfig(), "this cluster does not serve NodewrightClusterSummary: it is not a fleet hub")

	hub := testenv.New()
	hub.StartForTest(t)
	if err := hub.InstallCRDs(testenv.FleetCRDPaths(hub.RepoRoot)...); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, as(hub, "mallory@example.com"), "your kubeconfig's user may not list or watch NodewrightClusterSummary")
}

// wantProblem serves the fleet UI with cfg and reads its event stream until a problem event
// says want.
func wantProblem(t *testing.T, cfg *rest.Config, want string) {
	t.Helper()
	const token = "fleet-token"
	handler, err := ui.NewHandler(cfg, ui.Options{Token: token, Fleet: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Nodewright-Token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	lines := bufio.NewScanner(res.Body)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	var seen []string
	for lines.Scan() {
		line := lines.Text()
		seen = append(seen, line)
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"kind":"NodewrightClusterSummary"`) && strings.Contains(line, want) {
			return
		}
	}
	t.Fatalf("no problem saying %q in the stream (%v); it said:\n%s", want, lines.Err(), strings.Join(seen, "\n"))
}
