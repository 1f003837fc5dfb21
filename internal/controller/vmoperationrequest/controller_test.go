package vmoperationrequest_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmoperationrequest"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// wait bounds every wait on observed state: a busy machine is slow.
const wait = 3 * time.Minute

// selected is the label of the namespaces the package's SelfServicePolicy selects.
const selected = "selfservice.test/on"

var policyOnce sync.Once

// thePolicy is the one SelfServicePolicy of the package's tests: in the namespaces labelled
// selected, SnapshotNow at most twice an hour, Restore automatic, Restart approved by an
// administrator and at most two queued.
func thePolicy(t *testing.T) {
	t.Helper()
	policyOnce.Do(func() {
		p := &nwv1.SelfServicePolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.SelfServicePolicyName}, Spec: nwv1.SelfServicePolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{selected: "true"}},
			Operations: []nwv1.SelfServiceOperation{
				{Operation: nwv1.VMSnapshotNow, Rate: &nwv1.SelfServiceRate{Requests: 2, Period: metav1.Duration{Duration: time.Hour}}},
				{Operation: nwv1.VMRestore},
				{Operation: nwv1.VMRestart, Approval: nwv1.ApprovalManual, MaxQueued: 2},
			}}}
		if err := env.Client.Create(context.Background(), p); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	})
}

// owner is one test's namespace, selected by the policy, with its VM owner and the
// controller running as the operator (under the chart's ValidatingAdmissionPolicies).
type owner struct {
	t    *testing.T
	ns   string
	user string
	// lock is the namespace of the test's own cluster-wide claim: the tests run in parallel.
	lock string
	site *site.Site
	// clock is the controllers' when set (onFakeClock), else the real one.
	clock *clocktesting.FakePassiveClock
}

func newOwner(t *testing.T) *owner {
	t.Helper()
	thePolicy(t)
	ctx := context.Background()
	o := &owner{t: t, ns: env.Namespace(t)}
	o.user, o.lock = "owner-"+o.ns, "lock-"+o.ns
	ns := &corev1.Namespace{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: o.ns}, ns); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Patch(ctx, ns, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+selected+`":"true"}}}`))); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.lock}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.lock}})
		if !t.Failed() {
			return
		}
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events, client.InNamespace(o.ns)); err == nil {
			for _, e := range events.Items {
				t.Logf("event %s %s %s: %s", e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
			}
		}
	})
	env.VMOwner(t, o.ns, o.user)
	return o
}

// withSite starts the local site's KubeVirt, CSI and guest agents for the namespace.
func (o *owner) withSite() {
	o.t.Helper()
	ctx := context.Background()
	driver := "vmop-" + o.ns[strings.LastIndex(o.ns, "-")+1:] + ".csi.example.com"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: o.ns}, Provisioner: driver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	vsc := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: o.ns}, Driver: driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	for _, obj := range []client.Object{sc, vsc} {
		if err := env.Client.Create(ctx, obj); err != nil {
			o.t.Fatal(err)
		}
		o.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	o.site = site.Start(o.t, env.Config, site.Options{Dir: o.t.TempDir(), Drivers: []string{driver}, CopyBinary: site.BuildCopy(o.t),
		NodeName: "site-" + o.ns, Namespaces: []string{o.ns}, GuestAgent: func(*virtv1.VirtualMachineInstance) bool { return true }})
}

// cacheOptions are the operator's, of the test's namespace alone, and of its claim's.
func (o *owner) cacheOptions() cache.Options {
	opts := operator.CacheOptions(operator.Scope{Workflows: o.lock})
	opts.DefaultNamespaces = map[string]cache.Config{o.ns: {}}
	return opts
}

func (o *owner) reconciler(c client.Client, r client.Reader, mgr manager.Manager) *vmoperationrequest.Reconciler {
	rec := &vmoperationrequest.Reconciler{Client: c, APIReader: r, Recorder: mgr.GetEventRecorderFor("vmoperationrequest-test"), LockNamespace: o.lock}
	if o.clock != nil {
		rec.Clock = o.clock
	}
	return rec
}

// startOperator runs the controller as the operator, until the test ends or it is stopped.
func (o *owner) startOperator() (stop func()) {
	o.t.Helper()
	return env.StartManagerAsWithCache(o.t, env.AsOperatorUnderPolicies(o.t, "nodewright-system"), o.cacheOptions(),
		func(_ context.Context, mgr manager.Manager) error {
			return o.reconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr).SetupWithManager(mgr)
		})
}

// request creates a request of the owner's, as the admission webhook admits it: with
// spec.requester and the requested-by annotation naming them. The webhook's own tests
// (internal/webhook/v1alpha1) run requests through it; here the controller is under test.
func (o *owner) request(name string, op nwv1.VMOperation, vm, snapshot string) *nwv1.VMOperationRequest {
	o.t.Helper()
	r := &nwv1.VMOperationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: name, Annotations: map[string]string{nwv1.AnnotationRequestedBy: o.user}},
		Spec: nwv1.VMOperationRequestSpec{Operation: op, VM: vm, Params: nwv1.VMOperationParams{Snapshot: snapshot},
			Reason: "a test asks", Requester: &nwv1.RequestUser{Username: o.user, Groups: []string{"system:authenticated"}}},
	}
	if err := env.Client.Create(context.Background(), r); err != nil {
		o.t.Fatal(err)
	}
	return r
}

// until waits until the request's status satisfies check ("" when it does).
func (o *owner) until(name string, check func(st nwv1.VMOperationRequestStatus) string) nwv1.VMOperationRequestStatus {
	o.t.Helper()
	var st nwv1.VMOperationRequestStatus
	testenv.Eventually(o.t, wait, func() string {
		r := &nwv1.VMOperationRequest{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: o.ns, Name: name}, r); err != nil {
			return err.Error()
		}
		st = r.Status
		if why := check(st); why != "" {
			return fmt.Sprintf("request %s: %s (phase %s, step %s, blocked by %q, message %q)", name, why, st.Phase, st.Step, st.BlockedBy, st.Message)
		}
		return ""
	})
	return st
}

// phase is a check that the request is in phase p.
func phase(p nwv1.VMOperationPhase) func(nwv1.VMOperationRequestStatus) string {
	return func(st nwv1.VMOperationRequestStatus) string {
		if st.Phase != p {
			return "not " + string(p)
		}
		return ""
	}
}

// blockedBy is a check that the request waits, held by something that says want.
func blockedBy(want string) func(nwv1.VMOperationRequestStatus) string {
	return func(st nwv1.VMOperationRequestStatus) string {
		if st.Phase != nwv1.VMOperationWaiting {
			return "not Waiting"
		}
		for _, b := range st.BlockedBy {
			if strings.Contains(b, want) {
				return ""
			}
		}
		return "not blocked by " + want
	}
}

// vmi reads the VM's instance; nil when it has none.
func (o *owner) vmi(name string) *virtv1.VirtualMachineInstance {
	o.t.Helper()
	vmi := &virtv1.VirtualMachineInstance{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: o.ns, Name: name}, vmi); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		o.t.Fatal(err)
	}
	return vmi
}

// holdTheClaim makes a BondModeFlipPlan hold the test's cluster-wide claim, as the engine
// does when it runs one, and returns a function that releases it.
func (o *owner) holdTheClaim() (release func()) {
	o.t.Helper()
	ctx := context.Background()
	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "flip-" + o.ns}, Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "802.3ad"}}
	if err := env.Client.Create(ctx, flip); err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), flip) })
	flip.Status.Phase = nwv1.WorkflowRunning
	if err := env.Client.Status().Update(ctx, flip); err != nil {
		o.t.Fatal(err)
	}
	claim := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: o.lock, Name: "nodewright-workflow"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("BondModeFlipPlan/" + flip.Name + "/" + string(flip.UID))}}
	if err := env.Client.Create(ctx, claim); err != nil {
		o.t.Fatal(err)
	}
	return func() {
		o.t.Helper()
		if err := env.Client.Delete(ctx, claim); err != nil {
			o.t.Fatal(err)
		}
	}
}

// TestARestartWaitsForItsApprovalAndForNodeWork: a Restart, which the policy has an
// administrator approve, waits for the approval and says so; approved while a flip holds the
// cluster, it waits for the flip, which is neither cancelled nor delayed, and says so; once the
// flip ends, the VM is stopped and started again: a new instance runs, with its run strategy
// as it was.
func TestARestartWaitsForItsApprovalAndForNodeWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOwner(t)
	o.withSite()
	o.site.RunningVM(t, env.Client, o.ns, "web", o.ns, 1<<20)
	before := o.vmi("web")
	o.startOperator()

	r := o.request("restart", nwv1.VMRestart, "web", "")
	st := o.until(r.Name, blockedBy("awaiting an administrator's approval"))
	if st.Approval != nwv1.ApprovalRequired || st.QueuePosition != 1 || st.StartTime != nil {
		t.Errorf("waiting for approval: %+v", st)
	}
	release := o.holdTheClaim()
	// An administrator approves; the webhook would stamp who.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"Restart",%q:"admin"}}}`, nwv1.AnnotationApprove, nwv1.AnnotationApprovedBy)
	if err := env.Client.Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	st = o.until(r.Name, blockedBy("BondModeFlipPlan flip-"+o.ns+" holds the cluster (node work comes first)"))
	if st.Approval != nwv1.ApprovalGiven || st.ApprovedBy != "admin" || len(st.BlockedBy) != 1 {
		t.Errorf("approved, held by the flip: %+v", st)
	}
	if vmi := o.vmi("web"); vmi == nil || vmi.UID != before.UID {
		t.Fatalf("the VM was touched while the flip held the cluster")
	}
	release()
	st = o.until(r.Name, phase(nwv1.VMOperationSucceeded))
	after := o.vmi("web")
	if after == nil || after.UID == before.UID || after.Status.Phase != virtv1.Running {
		t.Errorf("after the restart the instance is %+v, want a new one running", after)
	}
	if st.RunStrategy != string(virtv1.RunStrategyAlways) || !strings.Contains(st.Message, "restarted: a new instance runs") {
		t.Errorf("succeeded: %+v", st)
	}
	vm := &virtv1.VirtualMachine{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: "web"}, vm); err != nil || ptr.Deref(vm.Spec.RunStrategy, "") != virtv1.RunStrategyAlways {
		t.Errorf("the VM's run strategy after the restart: %v (%v)", vm.Spec.RunStrategy, err)
	}
	testenv.EventSaid(t, env.Client, wait, "VMOperationRequest", corev1.EventTypeNormal, vmoperationrequest.ReasonSucceeded, "restarted")
}

// TestTheRateHoldsASnapshotBack: the policy lets two SnapshotNow start in a namespace per
// hour. The namespace's requests run one at a time, in the order they were made; the third
// waits for the hour to pass, saying when. Both that ran made good snapshots.
func TestTheRateHoldsASnapshotBack(t *testing.T) {
	t.Parallel()
	o := newOwner(t)
	o.withSite()
	o.site.RunningVM(t, env.Client, o.ns, "db", o.ns, 1<<20)
	o.startOperator()
	// Made within a second, they queue by name.
	for _, name := range []string{"a-one", "b-two", "c-three"} {
		o.request(name, nwv1.VMSnapshotNow, "db", "")
	}
	for _, name := range []string{"a-one", "b-two"} {
		st := o.until(name, phase(nwv1.VMOperationSucceeded))
		snap := &snapv1.VirtualMachineSnapshot{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: o.ns, Name: st.Snapshot}, snap); err != nil {
			t.Fatal(err)
		}
		if snap.Labels[nwv1.LabelVMOperationRequest] != name || snap.Status == nil || !ptr.Deref(snap.Status.ReadyToUse, false) {
			t.Errorf("the snapshot of %s: %+v %+v", name, snap.Labels, snap.Status)
		}
	}
	rate := blockedBy("the rate of SnapshotNow in this namespace: 2 started in the last 1h0m0s (at most 2); the next may start at")
	o.until("c-three", func(st nwv1.VMOperationRequestStatus) string {
		if why := rate(st); why != "" {
			return why
		}
		if st.QueuePosition != 1 || len(st.BlockedBy) != 1 {
			return fmt.Sprintf("at position %d, blocked by %d things, want 1 and the rate alone", st.QueuePosition, len(st.BlockedBy))
		}
		return ""
	})
}

// TestARequesterWhoLostTheRightIsRefused: the controller asks the API server again before it
// acts. A request admitted while its requester had edit in the namespace waits for an
// approval; her RoleBinding is deleted, and an administrator approves: the request is refused,
// naming the check that was denied, and nothing is done to the VM.
func TestARequesterWhoLostTheRightIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOwner(t)
	// A running VM, as KubeVirt's objects say it: no site runs here, nothing is done to it.
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "web"},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways), Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "web"}}
	for _, obj := range []client.Object{vm, vmi} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	o.startOperator()
	o.request("restart", nwv1.VMRestart, "web", "")
	r := &nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "restart"}}
	o.until("restart", blockedBy("awaiting an administrator's approval"))
	if err := env.Client.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "edit-" + o.user}}); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"Restart",%q:"admin"}}}`, nwv1.AnnotationApprove, nwv1.AnnotationApprovedBy)
	if err := env.Client.Patch(ctx, r, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	st := o.until("restart", phase(nwv1.VMOperationRefused))
	if !strings.Contains(st.Message, o.user+" may no longer Restart on VirtualMachine web: the API server denied update virtualmachines/restart.subresources.kubevirt.io web in "+o.ns) ||
		!strings.HasPrefix(testenv.ConditionText(st.Conditions, nwv1.ConditionAuthorized), "False Denied") {
		t.Errorf("refused: %q, %s", st.Message, testenv.ConditionText(st.Conditions, nwv1.ConditionAuthorized))
	}
}

// TestTheOperatorKilledMidRestore: the owner snapshots their VM, writes more, and restores it
// from the snapshot. The operator is killed right after it stopped the VM, and the next one
// right after it made the VirtualMachineRestore, before the request's status said so; a third
// finishes the restore: the VM runs again, on a claim holding the bytes the snapshot took,
// while the old claim keeps what was written since, from the restore made before the kill.
func TestTheOperatorKilledMidRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOwner(t)
	o.withSite()
	taken := o.site.RunningVM(t, env.Client, o.ns, "app", o.ns, 4<<20)
	stop := o.startOperator()
	st := o.until(o.request("snap", nwv1.VMSnapshotNow, "app", "").Name, phase(nwv1.VMOperationSucceeded))
	stop()
	written := make([]byte, 4<<20)
	copy(written, "written after the snapshot")
	if err := o.site.Fill(ctx, o.ns, "app-root", bytes.NewReader(written)); err != nil {
		t.Fatal(err)
	}
	o.request("back", nwv1.VMRestore, "app", st.Snapshot)
	k := testenv.NewCrash(func(w testenv.Write) bool {
		_, isVM := w.Object.(*virtv1.VirtualMachine)
		return isVM
	})
	env.RunUntilCrash(t, k, o.cacheOptions(), func(_ context.Context, mgr manager.Manager, c client.Client, r client.Reader) error {
		return o.reconciler(c, r, mgr).SetupWithManager(mgr)
	})
	vm := &virtv1.VirtualMachine{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: "app"}, vm); err != nil || ptr.Deref(vm.Spec.RunStrategy, "") != virtv1.RunStrategyHalted {
		t.Fatalf("killed after the VM was stopped, it is %v (%v)", vm.Spec.RunStrategy, err)
	}
	k = testenv.NewCrash(func(w testenv.Write) bool {
		_, isRestore := w.Object.(*snapv1.VirtualMachineRestore)
		return isRestore
	})
	env.RunUntilCrash(t, k, o.cacheOptions(), func(_ context.Context, mgr manager.Manager, c client.Client, r client.Reader) error {
		return o.reconciler(c, r, mgr).SetupWithManager(mgr)
	})
	if r := (&nwv1.VMOperationRequest{}); env.Client.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: "back"}, r) != nil || r.Status.Restore != "" || r.Status.Step != nwv1.StepRestoreVM {
		t.Fatalf("killed after the restore was made, the request says step %q, restore %q", r.Status.Step, r.Status.Restore)
	}
	var made snapv1.VirtualMachineRestoreList
	if err := env.Client.List(ctx, &made, client.InNamespace(o.ns), client.MatchingLabels{nwv1.LabelVMOperationRequest: "back"}); err != nil || len(made.Items) != 1 {
		t.Fatalf("killed after the restore was made, the request's restores: %d (%v), want 1", len(made.Items), err)
	}
	o.startOperator()
	st = o.until("back", phase(nwv1.VMOperationSucceeded))
	if st.RunStrategy != string(virtv1.RunStrategyAlways) || st.Restore == "" {
		t.Errorf("restored: %+v", st)
	}
	testenv.Eventually(t, wait, func() string {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: "app"}, vm); err != nil {
			return err.Error()
		}
		if vmi := o.vmi("app"); ptr.Deref(vm.Spec.RunStrategy, "") != virtv1.RunStrategyAlways || vmi == nil || vmi.Status.Phase != virtv1.Running {
			return fmt.Sprintf("the VM is %v, its instance %v", vm.Spec.RunStrategy, vmi)
		}
		return ""
	})
	claim := vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	if got, err := o.site.ReadVolume(ctx, o.ns, claim); err != nil || !bytes.Equal(got, taken) {
		t.Errorf("the restored claim %s does not hold the bytes the snapshot took (%v)", claim, err)
	}
	if got, err := o.site.ReadVolume(ctx, o.ns, "app-root"); err != nil || !bytes.Equal(got, written) {
		t.Errorf("the old claim does not hold what was written since (%v)", err)
	}
	// The restore made before the kill is the one that restored: not deleted and made again,
	// nor a second made under another name.
	var restores snapv1.VirtualMachineRestoreList
	if err := env.Client.List(ctx, &restores, client.InNamespace(o.ns), client.MatchingLabels{nwv1.LabelVMOperationRequest: "back"}); err != nil ||
		len(restores.Items) != 1 || restores.Items[0].UID != made.Items[0].UID || st.Restore != made.Items[0].Name {
		t.Errorf("the request's restores: %d (%v), want the one made before the kill, %s (UID %s), as status.restore %q", len(restores.Items), err, made.Items[0].Name, made.Items[0].UID, st.Restore)
	}
}
