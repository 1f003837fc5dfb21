package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/ui"
)

// The two namespaces of the self-service test and what each holds. Alice owns team-a; nothing
// of team-b may reach her page.
const (
	teamA, teamB = "team-a", "team-b"
	alice        = "alice"
)

// teamBNames are every name of team-b's objects, and its own: none may appear in alice's page
// or in any answer the page fetched.
var teamBNames = []string{teamB, "bravo-db", "bravo-db-restart", "bravo-db-nightly", "bravo-db-move"}

// TestSelfServiceNamespaceViewAsAlice runs the namespace view in Chromium as alice, a VM owner
// with rights in team-a only. It runs on a control plane of its own, without the operator and
// its admission webhooks: no controller acts on the requests (the test writes their status as
// the VMOperationRequest controller would) and the API server stores them as sent. The page
// lists team-a's VMs (running or not), requests, snapshots and migration, and nothing of
// team-b, in its text or in any answer it fetched; her page works though every cluster-wide
// list is forbidden to her, and shows the cluster's phase only once she may read it. The
// SnapshotNow form creates the request as alice, read back as the administrator; a status
// written to it shows without a reload; a Restore offers only that VM's snapshots, and one
// without a snapshot is refused in the API server's words, next to the snapshot's field. A
// volume move offers that VM's volumes on a claim (and the page receives their names, not the
// claims' nor the rest of the VM's spec), takes the StorageClass as typed (she may not list
// them: no suggestions, and no word of it, until she may), is refused without one next to its
// field, and is created with the volume and StorageClass chosen; the migration it made, written
// to its status, shows in its card.
func TestSelfServiceNamespaceViewAsAlice(t *testing.T) {
	start := time.Now()
	own := testenv.New()
	own.StartForTest(t)
	ctx := context.Background()
	c := own.Client
	create := func(obj client.Object) {
		t.Helper()
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}

	for _, ns := range []string{teamA, teamB} {
		create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	web := selfServiceVM(teamA, "alpha-web", virtv1.RunStrategyAlways)
	create(web)
	writeStatus(t, own, web, func() { web.Status.PrintableStatus, web.Status.Ready = virtv1.VirtualMachineStatusRunning, true })
	create(selfServiceVM(teamA, "alpha-batch", virtv1.RunStrategyHalted))
	create(selfServiceVM(teamB, "bravo-db", virtv1.RunStrategyAlways))

	requester := &nwv1.RequestUser{Username: alice, Groups: []string{"system:authenticated"}}
	create(&nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "alpha-web-restart"},
		Spec: nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "alpha-web", Reason: "the guest hangs", Requester: requester}})
	create(&nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "bravo-db-restart"},
		Spec: nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "bravo-db", Reason: "bravo's reason",
			Requester: &nwv1.RequestUser{Username: "bob"}}})

	created := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, s := range []struct{ ns, name, vm string }{
		{teamA, "alpha-web-nightly", "alpha-web"}, {teamA, "alpha-batch-weekly", "alpha-batch"}, {teamB, "bravo-db-nightly", "bravo-db"},
	} {
		snap := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name},
			Spec: snapv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: s.vm}}}
		create(snap)
		writeStatus(t, own, snap, func() {
			snap.Status = &snapv1.VirtualMachineSnapshotStatus{Phase: snapv1.Succeeded, ReadyToUse: ptr.To(true), CreationTime: &created}
		})
	}
	for _, m := range []struct{ ns, name, vm string }{{teamA, "alpha-web-move", "alpha-web"}, {teamB, "bravo-db-move", "bravo-db"}} {
		create(&nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: m.name},
			Spec: nwv1.VMVolumeMigrationSpec{VMName: m.vm, VolumeName: "root", Target: nwv1.MigrationTarget{StorageClassName: "fast"}}})
	}
	nwc := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName}, Spec: nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{
		ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-init-state"},
		DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-init"},
		EventComponent: "node-init",
	}}}
	create(nwc)
	writeStatus(t, own, nwc, func() { nwc.Status.Phase = nwv1.ClusterMultiNode })

	// Alice's rights: the chart's nodewright:vm-operator and what KubeVirt's kubevirt.io:edit
	// lets her read, in team-a only. The chart has them reach her through the edit role, by
	// aggregation; envtest runs no kube-controller-manager, whose aggregation controller would
	// fill edit in, so the test binds a role of its own with those rules instead.
	create(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "selfservice-vm-owner"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"vmoperationrequests"}, Verbs: []string{"create", "get", "list", "watch"}},
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"vmoperationrequests/snapshotnow", "vmoperationrequests/restore", "vmoperationrequests/restart", "vmoperationrequests/migratevolume"}, Verbs: []string{"create"}},
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"vmvolumemigrations", "vmsnapshotpolicies"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines", "virtualmachineinstances"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"snapshot.kubevirt.io"}, Resources: []string{"virtualmachinesnapshots", "virtualmachinerestores"}, Verbs: []string{"get", "list", "watch"}},
	}})
	create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "alice-vm-owner"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "selfservice-vm-owner"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: alice}}})

	// `kubectl nodewright ui -n team-a` with alice's kubeconfig (a client certificate), seen
	// through a proxy that keeps every answer the page receives.
	printed, _ := runUIAs(t, own.User(t, alice), ui.Options{Namespace: teamA})
	pageURL, answers := recordingProxy(t, printed)
	p := openPage(t, pageURL, laptopWidth, laptopHeight)
	p.goTo("namespace")

	vmRow := func(name string) string { return `#ns-vms tr[data-vm="` + name + `"]` }
	p.waitJS("alpha-web running and alpha-batch not", query(vmRow("alpha-web"))+`?.dataset.running === 'true' && `+query(vmRow("alpha-batch"))+`?.dataset.running === 'false'`)
	if shown := p.text(vmRow("alpha-batch")); !contains(shown, "Not running", "Halted") {
		t.Errorf("alpha-batch's row says %q", shown)
	}
	card := func(name string) string { return `#ns-requests [data-key="vmop/` + name + `"]` }
	p.waitJS("the restart alice asked for", query(card("alpha-web-restart"))+`?.innerText.includes('the guest hangs')`)
	if shown := p.text(card("alpha-web-restart")); !contains(shown, "Restart of VM alpha-web", "asked by "+alice, "Pending") {
		t.Errorf("the request's card says:\n%s", shown)
	}
	p.waitJS("team-a's two snapshots, ready", `[...document.querySelectorAll('#ns-snapshots tr[data-snapshot]')].map((r) => r.dataset.snapshot + ':' + r.innerText.includes('Ready to use')).sort().join(',') === 'alpha-batch-weekly:true,alpha-web-nightly:true'`)
	if shown := p.text(`#ns-snapshots tr[data-snapshot="alpha-web-nightly"]`); !contains(shown, "alpha-web", "Succeeded") {
		t.Errorf("the snapshot's row says %q", shown)
	}
	p.waitJS("team-a's migration", query(`#ns-migrations tr[data-migration="alpha-web-move"]`)+`?.innerText.includes('root')`)

	// Every cluster-wide list is forbidden to her: the page works, and the namespace view says
	// nothing of the cluster, not even why it cannot.
	p.waitJS("the cluster's watch refused", `!!store.problems.NodewrightCluster && store.synced.VirtualMachine && store.synced.VMOperationRequest`)
	if hidden, _ := evaluate[bool](p, `document.getElementById('namespace-cluster').hidden`); !hidden {
		t.Error("the namespace view shows a cluster phase alice may not read")
	}
	if shown := p.text("#page-namespace"); contains(shown, "NodewrightCluster") || contains(shown, "forbidden") {
		t.Errorf("the namespace view speaks of what alice may not read:\n%s", shown)
	}
	noTeamB(t, p, answers)

	// A snapshot now, asked for with the form.
	p.do(chromedp.SetValue(chromedp.ID("snapshotnow-vm"), "alpha-web"),
		chromedp.SendKeys(chromedp.ID("snapshotnow-reason"), "before the upgrade"),
		chromedp.Click(chromedp.ID("snapshotnow-submit")))
	p.waitJS("the form to say it asked", `document.getElementById('snapshotnow-status').innerText.includes('Asked')`)
	var asked nwv1.VMOperationRequest
	eventually(t, "alice's SnapshotNow request in team-a", patience, func() (bool, string) {
		var list nwv1.VMOperationRequestList
		if err := c.List(ctx, &list, client.InNamespace(teamA)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, r := range list.Items {
			seen = append(seen, fmt.Sprintf("%s %s %s %q", r.Name, r.Spec.Operation, r.Spec.VM, r.Spec.Reason))
			if r.Spec.Operation == nwv1.VMSnapshotNow {
				asked = r
			}
		}
		return asked.Name != "", strings.Join(seen, "; ")
	})
	if asked.Spec.VM != "alpha-web" || asked.Spec.Reason != "before the upgrade" || asked.Spec.Params.Snapshot != "" {
		t.Errorf("the form created %+v", asked.Spec)
	}
	if status := p.text("#snapshotnow-status"); !contains(status, asked.Name) {
		t.Errorf("the form's status does not name the request %s: %q", asked.Name, status)
	}
	p.waitJS("the new request on the page", query(card(asked.Name))+`?.dataset.phase === 'Pending'`)

	// Its controller's word, written by the test: the page follows without a reload.
	p.do(chromedp.Evaluate[chromedp.Void](`window.nodewrightNoReload = 'still here'`))
	const holder = "BondModeFlipPlan flip-1 holds the cluster"
	writeStatus(t, own, &asked, func() {
		asked.Status.Phase, asked.Status.BlockedBy, asked.Status.QueuePosition = nwv1.VMOperationWaiting, []string{holder}, 2
		asked.Status.Approval = nwv1.ApprovalNotRequired
	})
	p.waitJS("the request waiting, what holds it and its place in the queue", query(card(asked.Name))+`?.dataset.phase === 'Waiting' && `+
		query(card(asked.Name)+" .blocked-by")+`?.innerText.includes(`+js(holder)+`) && `+query(card(asked.Name)+" .queue")+`?.innerText === '2'`)
	if mark, err := evaluate[string](p, `window.nodewrightNoReload || ''`); err != nil || mark != "still here" {
		t.Fatalf("the page was reloaded (mark %q, %v)", mark, err)
	}
	if shown := p.text(card(asked.Name)); !contains(shown, "NotRequired", "Snapshot now of VM alpha-web", "before the upgrade") {
		t.Errorf("the waiting request's card says:\n%s", shown)
	}

	// A restore offers that VM's snapshots only; without one, the API server refuses it.
	p.do(chromedp.SetValue(chromedp.ID("restore-vm"), "alpha-web"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('restore-vm').dispatchEvent(new Event('change'))`))
	p.waitJS("alpha-web's snapshots to choose from", `[...document.getElementById('restore-snapshot').options].map((o) => o.value).join(',') === ',alpha-web-nightly'`)
	p.do(chromedp.Click(chromedp.ID("restore-submit")))
	p.waitJS("the refusal next to the snapshot's field", `document.getElementById('restore-err-snapshot').innerText.includes('a Restore names the snapshot of the VM to restore from')`)
	if invalid, _ := evaluate[string](p, `document.getElementById('restore-snapshot').getAttribute('aria-invalid') || ''`); invalid != "true" {
		t.Errorf("the snapshot's field is not marked invalid (aria-invalid=%q)", invalid)
	}
	if status := p.text("#restore-status"); !contains(status, "Refused", "spec.params.snapshot") {
		t.Errorf("the restore form's status says %q", status)
	}
	p.shot("namespace", laptopWidth, laptopHeight)
	p.do(chromedp.SetValue(chromedp.ID("restore-snapshot"), "alpha-web-nightly"), chromedp.Click(chromedp.ID("restore-submit")))
	p.waitJS("the restore asked for", `document.getElementById('restore-status').innerText.includes('Asked')`)
	var list nwv1.VMOperationRequestList
	if err := c.List(ctx, &list, client.InNamespace(teamA)); err != nil {
		t.Fatal(err)
	}
	restores := 0
	for _, r := range list.Items {
		if r.Spec.Operation == nwv1.VMRestore {
			restores++
			if r.Spec.VM != "alpha-web" || r.Spec.Params.Snapshot != "alpha-web-nightly" {
				t.Errorf("the restore form created %+v", r.Spec)
			}
		}
	}
	if restores != 1 {
		t.Errorf("%d restores in team-a, want the one accepted", restores)
	}

	// A volume move: she may not list the StorageClasses, so the field suggests none, and the
	// page says nothing of it.
	p.waitJS("the StorageClasses asked for, none offered", `storageClassChoices?.listable === false && !document.getElementById('migratevolume-storageclass').hasAttribute('list')`)
	if shown := p.text("#page-namespace"); contains(shown, "forbidden") {
		t.Errorf("the namespace view speaks of the StorageClasses alice may not list:\n%s", shown)
	}
	p.do(chromedp.SetValue(chromedp.ID("migratevolume-vm"), "alpha-web"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('migratevolume-vm').dispatchEvent(new Event('change'))`))
	p.waitJS("alpha-web's volumes on a claim to choose from", `[...document.getElementById('migratevolume-volume').options].map((o) => o.value).join(',') === ',root,data'`)
	for _, name := range []string{"alpha-web-root", "alpha-web-data", "alpha-web-userdata"} {
		if strings.Contains(answers.String(), name) {
			t.Errorf("an answer to alice's page holds %q, of alpha-web's spec", name)
		}
	}
	p.do(chromedp.SetValue(chromedp.ID("migratevolume-volume"), "data"), chromedp.Click(chromedp.ID("migratevolume-submit")))
	const noClass = "params: a MigrateVolume names the volume and the storageClass to move it to"
	p.waitJS("the refusal next to the StorageClass's field", `document.getElementById('migratevolume-err-storageclass').innerText.includes(`+js(noClass)+`)`)
	if invalid, _ := evaluate[string](p, `document.getElementById('migratevolume-storageclass').getAttribute('aria-invalid') || ''`); invalid != "true" {
		t.Errorf("the StorageClass's field is not marked invalid (aria-invalid=%q)", invalid)
	}
	if shown := p.text("#migratevolume-err-volume"); shown != "" {
		t.Errorf("the refusal is next to the volume chosen too: %q", shown)
	}
	if status := p.text("#migratevolume-status"); !contains(status, "Refused", noClass) {
		t.Errorf("the volume move's status says %q", status)
	}
	p.do(chromedp.SendKeys(chromedp.ID("migratevolume-storageclass"), "fast-replicated"),
		chromedp.SendKeys(chromedp.ID("migratevolume-reason"), "off the slow pool"),
		chromedp.Click(chromedp.ID("migratevolume-submit")))
	p.waitJS("the volume move asked for", `document.getElementById('migratevolume-status').innerText.includes('Asked')`)
	var move nwv1.VMOperationRequest
	if err := c.List(ctx, &list, client.InNamespace(teamA)); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		if r.Spec.Operation == nwv1.VMMigrateVolume {
			if move.Name != "" {
				t.Errorf("two volume moves in team-a, %s and %s, want the one accepted", move.Name, r.Name)
			}
			move = r
		}
	}
	if move.Name == "" {
		t.Fatal("no MigrateVolume request in team-a")
	}
	if p := move.Spec.Params; move.Spec.VM != "alpha-web" || p.Volume != "data" || p.StorageClass != "fast-replicated" || p.Snapshot != "" || move.Spec.Reason != "off the slow pool" {
		t.Errorf("the volume move's form created %+v", move.Spec)
	}
	writeStatus(t, own, &move, func() {
		move.Status.Phase, move.Status.Step, move.Status.Migration = nwv1.VMOperationRunning, nwv1.StepMigrateVolume, "alpha-web-data-fast"
	})
	p.waitJS("the migration the request made, in its card", query(card(move.Name)+" .migration-made")+`?.innerText === 'alpha-web-data-fast'`)
	if shown := p.text(card(move.Name)); !contains(shown, "Volume move of VM alpha-web", "volume data to StorageClass fast-replicated", "off the slow pool") {
		t.Errorf("the volume move's card says:\n%s", shown)
	}

	// Once she may list the StorageClasses, the field suggests them.
	create(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast-replicated"}, Provisioner: "linstor.csi.linbit.com"})
	grant(t, own, "selfservice-storageclass-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{storagev1.GroupName}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
	}, alice)
	p.waitJS("the StorageClasses suggested", `(() => { document.getElementById('migratevolume-storageclass').dispatchEvent(new Event('focus')); `+
		`return document.getElementById('migratevolume-storageclass').getAttribute('list') === 'migratevolume-class-list' && `+
		`[...document.querySelectorAll('#migratevolume-class-list option')].some((o) => o.value === 'fast-replicated'); })()`)

	// Once she may read the cluster, its phase shows, and only that.
	grant(t, own, "selfservice-cluster-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"nodewrightclusters"}, Verbs: []string{"get", "list", "watch"}},
	}, alice)
	p.waitJS("the cluster's phase in the namespace view", query(`#namespace-cluster-phase`)+`?.dataset.phase === 'MultiNode'`)
	if shown := p.text("#namespace-cluster"); !contains(shown, "MultiNode") || contains(shown, "kube-system") {
		t.Errorf("the namespace view shows of the cluster %q", shown)
	}
	noTeamB(t, p, answers)
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// selfServiceVM is a VirtualMachine with a disk on a claim of its name, one on a DataVolume of
// its name, and a cloud-init disk whose user data is in a secret of its name.
func selfServiceVM(ns, name string, strategy virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(strategy),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}, {Name: "data"}, {Name: "cloudinit"}}}},
				Volumes: []virtv1.Volume{
					{Name: "root", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-root"}}}},
					{Name: "data", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name + "-data"}}},
					{Name: "cloudinit", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
						UserDataSecretRef: &corev1.LocalObjectReference{Name: name + "-userdata"}}}},
				},
			}},
		},
	}
}

// noTeamB fails the test if any of team-b's names is in the page, hidden parts and attributes
// included, or in an answer the page received.
func noTeamB(t *testing.T, p *browserPage, answers *testenv.SyncBuffer) {
	t.Helper()
	html, err := evaluate[string](p, `document.documentElement.outerHTML + document.body.innerText`)
	if err != nil {
		t.Fatal(err)
	}
	received := answers.String()
	if !strings.Contains(received, "alpha-web") {
		t.Fatalf("the proxy recorded none of the page's answers (%d bytes)", len(received))
	}
	for _, name := range teamBNames {
		if strings.Contains(html, name) {
			t.Errorf("alice's page shows %q", name)
		}
		if strings.Contains(received, name) {
			t.Errorf("an answer to alice's page holds %q", name)
		}
	}
}

// recordingProxy serves the UI at printed (its URL, with the token) through a proxy on another
// loopback port, which keeps a copy of every answer's body. It returns the URL to open.
func recordingProxy(t *testing.T, printed string) (string, *testenv.SyncBuffer) {
	t.Helper()
	u, err := url.Parse(printed)
	if err != nil {
		t.Fatal(err)
	}
	answers := &testenv.SyncBuffer{}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	proxy.FlushInterval = -1 // the event stream, as it comes
	proxy.ModifyResponse = func(res *http.Response) error {
		res.Body = teeBody{Reader: io.TeeReader(res.Body, answers), Closer: res.Body}
		return nil
	}
	// The Host header passes through unchanged, so the UI sees its page's own origin.
	srv := httptest.NewServer(proxy)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv.URL + "/#" + u.Fragment, answers
}

type teeBody struct {
	io.Reader
	io.Closer
}
