package ui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1 "k8s.io/api/batch/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/legacysim"
	"github.com/spectrocloud/nodewright/internal/ui"
	"github.com/spectrocloud/nodewright/test/site"
)

// Screen sizes of the screenshots: a laptop and a tablet held upright.
const (
	laptopWidth, laptopHeight = 1366, 860
	tabletWidth, tabletHeight = 820, 1180
)

// TestClusterPageFollowsTheLegacyDaemonSet lets the legacy DaemonSet simulator bootstrap a
// site, opens the cluster page, and moves the simulated DaemonSet on: the page shows the
// phase the operator rolled up, and the new one when it changes, without a reload, with the
// transition in its timeline and each node as a card.
func TestClusterPageFollowsTheLegacyDaemonSet(t *testing.T) {
	start := time.Now()
	startOperator(t)
	ns := env.Namespace(t)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)

	sim, err := legacysim.New(legacysim.Config{
		Client:    env.Client,
		ConfigMap: types.NamespacedName{Namespace: ns, Name: "node-init-state"},
		DaemonSet: types.NamespacedName{Namespace: ns, Name: "node-init"},
		Component: "node-init",
		Nodes: []legacysim.NodeSpec{
			{Name: "edge-1", Role: nwv1.NodeRolePrimary, BondMode: nwv1.BondModeActiveBackup},
			{Name: "edge-2", Role: nwv1.NodeRoleSecondary, BondMode: nwv1.BondModeActiveBackup},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	bootstrap, err := legacysim.BuiltIn(legacysim.ScenarioBootstrap, []string{"edge-1", "edge-2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Play(ctx, bootstrap, 0); err != nil {
		t.Fatal(err)
	}
	go sim.RunHeartbeats(ctx, 2*time.Second)
	observe(t, ns)
	waitClusterPhase(t, nwv1.ClusterSingleNode)

	// Every namespace, as `ui` without -n; the form starts with the context's namespace.
	url := startUI(t, ui.Options{DefaultNamespace: ns, TrailDir: trailDir, TrailKeys: []string{trailKey}})
	p := openPage(t, url, laptopWidth, laptopHeight)
	p.waitJS("the cluster page to show SingleNode", `document.getElementById('cluster-phase')?.dataset.phase === 'SingleNode'`)
	if got, _ := evaluate[string](p, `(() => { const f = document.getElementById('f-namespace'); return f.value + (f.readOnly ? ' (read-only)' : ''); })()`); got != ns {
		t.Errorf("the form's namespace starts as %q, want %q, editable", got, ns)
	}
	if got := p.text("#legacy-state"); !contains(got, "SINGLE_NODE_READY") {
		t.Errorf("legacy state shows %q", got)
	}
	p.waitJS("a card for edge-1 with its role, a fresh heartbeat, its DRBD health and bond mode",
		`(() => { const c = document.querySelector('[data-node="edge-1"]'); return !!c && c.innerText.includes('primary') && c.innerText.includes('Fresh') && c.innerText.includes('4 of 4 up to date') && c.innerText.includes('active-backup'); })()`)
	// The heartbeats re-render the page every few seconds: a keyboard user on the conditions'
	// disclosure keeps the focus through them, and opens it with Enter for good.
	conditions := `[data-key="cluster-conditions"]`
	p.focus(conditions)
	p.do(chromedp.Evaluate[chromedp.Void](`window.nodewrightFocused = document.activeElement`))
	p.waitJS("a re-render to replace the focused summary", query(conditions)+` !== window.nodewrightFocused`)
	if focused, _ := evaluate[string](p, `document.activeElement?.dataset.key || document.activeElement?.tagName`); focused != "cluster-conditions" {
		t.Errorf("after a re-render the focus is on %q, want the conditions' summary", focused)
	}
	p.press(conditions, kb.Enter)
	p.do(chromedp.Evaluate[chromedp.Void](`window.nodewrightFocused = document.activeElement`))
	p.waitJS("the conditions open, through a re-render", query(conditions)+` !== window.nodewrightFocused && `+query(conditions)+`.parentElement.open`)

	// Mark this document: a reload would lose the mark.
	p.do(chromedp.Evaluate[chromedp.Void](`window.nodewrightNoReload = 'still here'`))
	shownAt := time.Now()

	// The DaemonSet detects its peer: the cluster starts upgrading.
	if err := sim.Apply(ctx, legacysim.Join("edge-2")); err != nil {
		t.Fatal(err)
	}
	if err := sim.Transition(ctx, legacy.PeerDetected); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	p.waitJS("the page to show Upgrading without a reload", `document.getElementById('cluster-phase')?.dataset.phase === 'Upgrading'`)
	t.Logf("the page showed Upgrading %s after the simulator's transition", time.Since(changed).Round(time.Millisecond))
	if mark, err := evaluate[string](p, `window.nodewrightNoReload || ''`); err != nil || mark != "still here" {
		t.Fatalf("the page was reloaded (mark %q, %v)", mark, err)
	}
	p.waitJS("the timeline to hold SINGLE_NODE_READY → PEER_DETECTED, seen live and as an Event",
		`[...document.querySelectorAll('#timeline li')].some((l) => ['SINGLE_NODE_READY', 'PEER_DETECTED', 'seen live', 'Event'].every((s) => l.innerText.includes(s)))`)
	p.waitJS("a card for the new peer", `(() => { const c = document.querySelector('[data-node="edge-2"]'); return !!c && c.innerText.includes('secondary'); })()`)

	// On to a few more states, so the timeline and the screenshots show a real upgrade.
	for _, s := range []legacy.State{legacy.PeerNetworkConfiguring, legacy.PeerStorageJoining} {
		if err := sim.Transition(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	p.waitJS("the timeline to show PEER_STORAGE_JOINING", `document.getElementById('legacy-state').innerText.includes('PEER_STORAGE_JOINING')`)
	p.waitJS("the audit trail's records of the transitions in the timeline",
		`[...document.querySelectorAll('#timeline li')].some((l) => l.innerText.includes('audit trail'))`)
	p.shot("cluster-laptop", laptopWidth, laptopHeight)
	p.shot("cluster-tablet", tabletWidth, tabletHeight)
	t.Logf("page open to first change shown: %s; whole test %s", time.Since(shownAt).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// observe points the NodewrightCluster at the simulator's objects in ns, creating it if needed.
func observe(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	spec := nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{
		ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: ns, Name: "node-init-state"},
		DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: ns, Name: "node-init"},
		EventComponent: "node-init",
	}}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nwc := &nwv1.NodewrightCluster{}
		err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc)
		if apierrors.IsNotFound(err) {
			return env.Client.Create(ctx, &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName}, Spec: spec})
		}
		if err != nil {
			return err
		}
		nwc.Spec = spec
		return env.Client.Update(ctx, nwc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitClusterPhase(t *testing.T, phase nwv1.ClusterPhase) {
	t.Helper()
	eventually(t, "the cluster's phase "+string(phase), patience, func() (bool, string) {
		nwc := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
			return false, err.Error()
		}
		return nwc.Status.Phase == phase, fmt.Sprintf("phase %q", nwc.Status.Phase)
	})
}

// fillForm types the migration form like a person, field by field.
func (p *browserPage) fillForm(vm, volume, class string) {
	p.t.Helper()
	p.do(
		chromedp.Clear(chromedp.ID("f-vm")), chromedp.SendKeys(chromedp.ID("f-vm"), vm),
		chromedp.Clear(chromedp.ID("f-volume")), chromedp.SendKeys(chromedp.ID("f-volume"), volume),
		chromedp.Clear(chromedp.ID("f-class")), chromedp.SendKeys(chromedp.ID("f-class"), class),
	)
}

// TestMigrationStartedFromTheFormSucceedsOnThePage starts a migration with the page's form;
// the page follows it to Succeeded with its steps, checksum, snapshots and PVCs, and the
// audit trail page shows, verified, that the user asked for it.
func TestMigrationStartedFromTheFormSucceedsOnThePage(t *testing.T) {
	start := time.Now()
	startOperator(t)
	ns := newSite(t, site.Options{})
	url := startUI(t, ui.Options{Namespace: ns, TrailDir: trailDir, TrailKeys: []string{trailKey}})
	p := openPage(t, url, laptopWidth, laptopHeight)

	p.do(chromedp.Click(chromedp.CSS(`nav a[data-page="workflows"]`)))
	p.waitJS("the workflows page", `!document.getElementById('page-workflows').hidden && document.getElementById('migrations').innerText.includes('No VMVolumeMigration')`)
	p.fillForm("web", "root", linstorClass)
	submitted := time.Now()
	p.do(chromedp.Click(chromedp.ID("start-button")))
	p.waitJS("the form to say it created the migration", `document.getElementById('form-status').innerText.includes('Created')`)
	if status := p.text("#form-status"); !contains(status, "Warning", "Hot") {
		t.Errorf("the form does not pass on the webhook's warning that Hot is possible: %q", status)
	}

	var list nwv1.VMVolumeMigrationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("migrations in %s: %d, %v", ns, len(list.Items), err)
	}
	m := list.Items[0]
	if got := m.Annotations[nwv1.AnnotationRequestedBy]; got != user {
		t.Errorf("requested-by %q, want %q: the page must create as the user", got, user)
	}
	p.waitJSFor("the migration to show Succeeded on the page", query(fmt.Sprintf(`[data-key="%s/%s"]`, ns, m.Name))+`?.dataset.phase === 'Succeeded'`, patience)
	t.Logf("form submitted to Succeeded shown: %s", time.Since(submitted).Round(time.Millisecond))
	shown := p.text(fmt.Sprintf(`[data-key="%s/%s"]`, ns, m.Name))
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(&m), &m); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Copy", "SnapshotTarget", "Match", m.Status.Snapshots.Before, m.Status.Snapshots.After,
		m.Status.SourcePVCName, m.Status.TargetPVCName, "requested by " + user, "100 %"} {
		if !contains(shown, want) {
			t.Errorf("the migration's card does not show %q:\n%s", want, shown)
		}
	}
	p.shot("workflows", laptopWidth, laptopHeight)

	// The audit trail: verified, and the admission decision recorded under the user's name.
	p.do(chromedp.Click(chromedp.CSS(`nav a[data-page="audit"]`)))
	p.waitJS("the trail to verify, with a signed checkpoint", `document.getElementById('trail-verification')?.innerText.includes('Verified')`)
	p.waitJS("the user's admission record of the migration",
		fmt.Sprintf(`[...document.querySelectorAll('#trail-records tr')].some((r) => r.innerText.includes(%s) && r.innerText.includes('AdmissionDecision') && r.innerText.includes(%s) && r.innerText.includes('Admitted'))`, js(user), js(m.Name)))
	p.waitJS("the migration's transitions, to Succeeded",
		fmt.Sprintf(`[...document.querySelectorAll('#trail-records tr')].some((r) => r.innerText.includes('MigrationTransition') && r.innerText.includes(%s) && r.innerText.includes('Succeeded'))`, js(m.Name)))
	p.do(chromedp.SendKeys(chromedp.ID("trail-filter"), m.Name))
	p.waitJS("the filter to keep only the migration's records", fmt.Sprintf(`[...document.querySelectorAll('#trail-records tr')].every((r) => r.innerText.includes(%s))`, js(m.Name)))
	p.shot("audit", laptopWidth, laptopHeight)
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// TestRefusedFormShowsTheRefusal submits migrations the admission webhook refuses: the page
// shows the webhook's own words next to the field they name, marks the field invalid, moves
// the keyboard focus to it, and nothing is created.
func TestRefusedFormShowsTheRefusal(t *testing.T) {
	start := time.Now()
	startOperator(t)
	ns := newSite(t, site.Options{})
	url := startUI(t, ui.Options{Namespace: ns})
	p := openPage(t, url, laptopWidth, laptopHeight)
	p.goTo("workflows")

	// A target class that cannot do ReadWriteMany block, submitted with the keyboard.
	p.fillForm("web", "root", "")
	p.do(chromedp.SendKeys(chromedp.ID("f-class"), topolvmClass+kb.Enter))
	p.waitJS("the refusal next to the StorageClass field", `document.getElementById('err-class').innerText.includes('cannot provide ReadWriteMany block volumes')`)
	if got := p.text("#err-class"); !contains(got, "spec.target.storageClassName: "+topolvmClass+" is TopoLVM") {
		t.Errorf("the refusal shown is %q", got)
	}
	if invalid, _ := evaluate[string](p, `document.getElementById('f-class').getAttribute('aria-invalid') || ''`); invalid != "true" {
		t.Errorf("the StorageClass field is not marked invalid (aria-invalid=%q)", invalid)
	}
	if focused, _ := evaluate[string](p, `document.activeElement.id`); focused != "f-class" {
		t.Errorf("focus is on %q, want the refused field f-class", focused)
	}
	if status := p.text("#form-status"); !contains(status, "Refused") {
		t.Errorf("the live region says %q", status)
	}
	if live, _ := evaluate[string](p, `document.getElementById('form-status').getAttribute('aria-live')`); live != "assertive" {
		t.Errorf("the form's status is not announced (aria-live=%q)", live)
	}
	p.shot("form-refused", laptopWidth, laptopHeight)

	// A VM that does not exist: the refusal moves to the VM field, the old one goes.
	p.fillForm("nope", "root", linstorClass)
	p.do(chromedp.Click(chromedp.ID("start-button")))
	p.waitJS("the refusal next to the VM field", `document.getElementById('err-vm').innerText.includes('not found')`)
	if got := p.text("#err-class"); got != "" {
		t.Errorf("the earlier refusal is still shown: %q", got)
	}

	var list nwv1.VMVolumeMigrationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Errorf("refused forms created %d migrations (%v)", len(list.Items), err)
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// TestCancelFromThePageRollsBack starts a migration whose copy the site holds, cancels it from
// the page with the keyboard, and sees it roll back and go: the VM runs on its source again.
func TestCancelFromThePageRollsBack(t *testing.T) {
	start := time.Now()
	startOperator(t)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	ns := newSite(t, site.Options{HoldCopy: func(*batchv1.Job) <-chan struct{} { return hold }})
	url := startUI(t, ui.Options{Namespace: ns})
	p := openPage(t, url, laptopWidth, laptopHeight)
	p.goTo("workflows")

	p.fillForm("web", "root", linstorClass)
	p.do(chromedp.SendKeys(chromedp.ID("f-name"), "held"+kb.Enter))
	key := ns + "/held"
	p.waitJSFor("the copy to be running", query(fmt.Sprintf(`[data-key="%s"] [data-step="Copy"]`, key))+`?.dataset.state === 'Running'`, patience)

	// Keyboard only, while updates re-render the page without pause: Enter on the button,
	// then Enter on "Yes, cancel it". Each key reaches its button only if the page keeps the
	// focus on it through the re-renders.
	stopChurn := p.churn()
	p.press(fmt.Sprintf(`[data-key="%s#cancel"]`, key), kb.Enter)
	p.waitJS("the confirmation, with the focus on 'Keep it'", fmt.Sprintf(`document.activeElement?.dataset.key === %s`, js(key+"#no")))
	p.press(fmt.Sprintf(`[data-key="%s#yes"]`, key), kb.Enter)
	cancelled := time.Now()
	stopChurn()
	p.waitJSFor("the migration to go from the page once rolled back", "!"+query(fmt.Sprintf(`[data-key="%s"]`, key)), patience)
	t.Logf("cancel to gone from the page: %s", time.Since(cancelled).Round(time.Millisecond))

	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "held"}, &nwv1.VMVolumeMigration{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the migration still exists: %v", err)
	}
	waitVMRunsOn(t, ns, "web-root")
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}
