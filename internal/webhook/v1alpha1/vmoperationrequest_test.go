package v1alpha1_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	webhookv1alpha1 "github.com/spectrocloud/nodewright/internal/webhook/v1alpha1"
	"github.com/spectrocloud/nodewright/test/site"
)

var selfServiceOnce sync.Once

// movedClass is the one StorageClass the package's policy lets a volume be moved to.
const movedClass = "ss-moved"

// selfService creates the package's SelfServicePolicy once: SnapshotNow and Restore
// automatic, Restart approved by an administrator and at most one queued per namespace,
// MigrateVolume to movedClass only.
func selfService(t *testing.T) {
	t.Helper()
	selfServiceOnce.Do(func() {
		p := &nwv1.SelfServicePolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.SelfServicePolicyName}, Spec: nwv1.SelfServicePolicySpec{
			Operations: []nwv1.SelfServiceOperation{
				{Operation: nwv1.VMSnapshotNow}, {Operation: nwv1.VMRestore},
				{Operation: nwv1.VMRestart, Approval: nwv1.ApprovalManual, MaxQueued: 1},
				{Operation: nwv1.VMMigrateVolume, StorageClasses: []string{movedClass}},
			}}}
		if err := env.Client.Create(context.Background(), p); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	})
}

// clientOf is a client with cfg's identity.
func clientOf(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func vmRequest(ns, name string, op nwv1.VMOperation, vm, snapshot string) *nwv1.VMOperationRequest {
	return &nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nwv1.VMOperationRequestSpec{Operation: op, VM: vm, Params: nwv1.VMOperationParams{Snapshot: snapshot}, Reason: "before the upgrade"}}
}

func moveRequest(ns, name, vm, volume, class string) *nwv1.VMOperationRequest {
	r := vmRequest(ns, name, nwv1.VMMigrateVolume, vm, "")
	r.Spec.Params = nwv1.VMOperationParams{Volume: volume, StorageClass: class}
	return r
}

// waitRequest waits until the request is in phase p.
func waitRequest(t *testing.T, ns, name string, p nwv1.VMOperationPhase) *nwv1.VMOperationRequest {
	t.Helper()
	r := &nwv1.VMOperationRequest{}
	testenv.Eventually(t, 3*time.Minute, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, r); err != nil {
			return err.Error()
		}
		if r.Status.Phase != p {
			return fmt.Sprintf("request %s is %s (%s), want %s", name, r.Status.Phase, r.Status.Message, p)
		}
		return ""
	})
	return r
}

// TestAVMOwnerSnapshotsAndRestoresTheirVM: alice, with edit in her namespace (the chart's
// roles aggregated into it), snapshots her VM, restores it from the snapshot, and moves its
// volume to the StorageClass the policy allows, through the webhook and the operator, on the
// local site's KubeVirt and CSI: the restored claim holds the bytes the snapshot took, and so
// does the moved one. The webhook wrote her as the requester, and the audit trail holds the
// access checks the API server answered for her.
func TestAVMOwnerSnapshotsAndRestoresTheirVM(t *testing.T) {
	t.Parallel()
	startOperator(t)
	selfService(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	alice := "alice-" + ns
	c := clientOf(t, env.VMOwner(t, ns, alice))
	// Two drivers of a Ceph RBD backend (RWX block, snapshots, clones within one driver): the
	// move between them is Cold, the most the backend allows across drivers.
	sfx := ns[strings.LastIndex(ns, "-")+1:]
	driver, movedDriver := "ssa-"+sfx+".rbd.csi.ceph.com", "ssb-"+sfx+".rbd.csi.ceph.com"
	for _, c := range []struct{ class, driver string }{{ns, driver}, {movedClass, movedDriver}} {
		for _, o := range []client.Object{
			&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: c.class}, Provisioner: c.driver,
				ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)},
			&snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: c.class + "-snap", Annotations: map[string]string{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
				Driver: c.driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete},
		} {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
		}
	}
	s := site.Start(t, env.Config, site.Options{Dir: t.TempDir(), Drivers: []string{driver, movedDriver}, CopyBinary: site.BuildCopy(t),
		NodeName: "site-" + ns, Namespaces: []string{ns}, GuestAgent: func(*virtv1.VirtualMachineInstance) bool { return true }})
	taken := s.RunningVM(t, env.Client, ns, "web", ns, 4<<20)

	if err := c.Create(ctx, vmRequest(ns, "snap", nwv1.VMSnapshotNow, "web", "")); err != nil {
		t.Fatal(err)
	}
	snapped := waitRequest(t, ns, "snap", nwv1.VMOperationSucceeded)
	if u := snapped.Spec.Requester; u == nil || u.Username != alice || !strings.Contains(strings.Join(u.Groups, ","), "system:authenticated") {
		t.Errorf("spec.requester is %+v, want %s as authenticated", u, alice)
	}
	written := make([]byte, 4<<20)
	copy(written, "written after the snapshot")
	if err := s.Fill(ctx, ns, "web-root", bytes.NewReader(written)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, vmRequest(ns, "back", nwv1.VMRestore, "web", snapped.Status.Snapshot)); err != nil {
		t.Fatal(err)
	}
	back := waitRequest(t, ns, "back", nwv1.VMOperationSucceeded)
	vm := &virtv1.VirtualMachine{}
	testenv.Eventually(t, 3*time.Minute, func() string {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, vm); err != nil {
			return err.Error()
		}
		vmi := &virtv1.VirtualMachineInstance{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, vmi); err != nil || vmi.Status.Phase != virtv1.Running {
			return fmt.Sprintf("the VM does not run again (%v)", err)
		}
		return ""
	})
	claim := vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	if got, err := s.ReadVolume(ctx, ns, claim); err != nil || !bytes.Equal(got, taken) {
		t.Errorf("the restored claim %s does not hold the bytes the snapshot took (%v); the request says %q", claim, err, back.Status.Message)
	}
	if err := c.Create(ctx, moveRequest(ns, "move", "web", "root", movedClass)); err != nil {
		t.Fatal(err)
	}
	moved := waitRequest(t, ns, "move", nwv1.VMOperationSucceeded)
	m := &nwv1.VMVolumeMigration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: moved.Status.Migration}, m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.Mode != nwv1.MigrationCold || m.Spec.Target.StorageClassName != movedClass || m.Labels[nwv1.LabelVMOperationRequest] != "move" {
		t.Errorf("the migration: %+v %+v", m.Labels, m.Spec)
	}
	site.WaitVMRunsOn(t, env.Client, ns, "web", m.Status.TargetPVCName)
	if got, err := s.ReadVolume(ctx, ns, m.Status.TargetPVCName); err != nil || !bytes.Equal(got, taken) {
		t.Errorf("the moved claim %s does not hold the restored bytes (%v)", m.Status.TargetPVCName, err)
	}
	for _, name := range []string{"snap", "back", "move"} {
		var authorized []string
		for _, rec := range trailRecords(t, ns, name) {
			if rec.To == webhookv1alpha1.Authorized && rec.Actor == alice {
				for _, d := range rec.Details {
					if strings.HasPrefix(d.Name, "accessCheck") {
						authorized = append(authorized, d.Value)
					}
				}
			}
		}
		if len(authorized) < 2 || !strings.Contains(authorized[0], ": allowed") || !strings.Contains(authorized[len(authorized)-1], "vmoperationrequests/") {
			t.Errorf("the trail's access checks of %s: %q", name, authorized)
		}
	}
}

// TestWhatAVMOwnerIsRefused: alice has edit in her namespace only. Refused, each naming why:
// a request in another namespace (RBAC); a request naming another requester; one approved by
// itself; a restore from another VM's snapshot; an operation the administrator did not grant
// her (the Nodewright verb) or whose native verb she lacks; a second Restart while one is
// queued (maxQueued 1); her own approval, and one naming another operation. An
// administrator's approval is taken.
func TestWhatAVMOwnerIsRefused(t *testing.T) {
	t.Parallel()
	startOperator(t)
	selfService(t)
	ctx := context.Background()
	ns, other := env.Namespace(t), env.Namespace(t)
	alice := "alice-" + ns
	c := clientOf(t, env.VMOwner(t, ns, alice))
	// Running VMs, as KubeVirt's objects say: no site runs here.
	for _, n := range []string{ns, other} {
		for _, name := range []string{"web", "db"} {
			vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: name},
				Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways), Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
			if err := env.Client.Create(ctx, vm); err != nil {
				t.Fatal(err)
			}
			if err := env.Client.Create(ctx, &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A snapshot of db.
	db := &virtv1.VirtualMachine{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "db"}, db); err != nil {
		t.Fatal(err)
	}
	snap := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-1"},
		Spec: snapv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "db"}}}
	if err := env.Client.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}

	err := c.Create(ctx, vmRequest(other, "theirs", nwv1.VMSnapshotNow, "web", ""))
	if !apierrors.IsForbidden(err) {
		t.Errorf("a request in another namespace: %v, want forbidden by RBAC", err)
	}
	forged := vmRequest(ns, "forged", nwv1.VMSnapshotNow, "web", "")
	forged.Spec.Requester = &nwv1.RequestUser{Username: "admin", Groups: []string{"system:masters"}}
	refused(t, c.Create(ctx, forged), "spec.requester: Invalid value: \"admin\": is written by Nodewright's admission webhook: the user who creates the request, "+alice)
	// Her own name, with a group she is not in: refused too.
	forged.Spec.Requester = &nwv1.RequestUser{Username: alice, Groups: []string{"system:masters", "system:authenticated"}}
	refused(t, c.Create(ctx, forged), "spec.requester: Invalid value: \""+alice+"\": is written by Nodewright's admission webhook")
	refused(t, c.Create(ctx, moveRequest(ns, "move-elsewhere", "web", "root", "elsewhere")),
		"spec.params.storageClass: elsewhere is not a StorageClass SelfServicePolicy default lets a volume be moved to (spec.operations[MigrateVolume].storageClasses: "+movedClass+")")
	self := vmRequest(ns, "self-approved", nwv1.VMRestart, "web", "")
	self.Annotations = map[string]string{nwv1.AnnotationApprove: "Restart"}
	refused(t, c.Create(ctx, self), "a request is approved by an administrator once it is made, never by the request itself")
	refused(t, c.Create(ctx, vmRequest(ns, "wrong-vm", nwv1.VMRestore, "web", "db-1")),
		"spec.params.snapshot: db-1 is a snapshot of VirtualMachine db, not of VirtualMachine web: a VM is restored from its own snapshots only")

	// bob may make requests and has KubeVirt's edit, but not the restore verb; carol has the
	// restore verb, but not KubeVirt's.
	bob, carol := "bob-"+ns, "carol-"+ns
	grant := func(user string, rules ...rbacv1.PolicyRule) client.Client {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}, Rules: rules}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
		for _, o := range []client.Object{role, binding} {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		return clientOf(t, env.User(t, user))
	}
	requests := rbacv1.PolicyRule{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"vmoperationrequests"}, Verbs: []string{"create", "get"}}
	restoreVerb := rbacv1.PolicyRule{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"vmoperationrequests/restore"}, Verbs: []string{"create"}}
	refused(t, grant(bob, append([]rbacv1.PolicyRule{requests}, testenv.KubeVirtEditRules...)...).Create(ctx, vmRequest(ns, "bobs", nwv1.VMRestore, "db", "db-1")),
		"create vmoperationrequests/restore.nodewright.spectrocloud.com db in "+ns+": denied")
	refused(t, grant(carol, requests, restoreVerb).Create(ctx, vmRequest(ns, "carols", nwv1.VMRestore, "db", "db-1")),
		"the API server denied create virtualmachinerestores.snapshot.kubevirt.io in "+ns)

	// One Restart queued, waiting for approval; a second is refused.
	if err := c.Create(ctx, vmRequest(ns, "restart", nwv1.VMRestart, "web", "")); err != nil {
		t.Fatal(err)
	}
	refused(t, c.Create(ctx, vmRequest(ns, "restart-db", nwv1.VMRestart, "db", "")),
		"namespace "+ns+" has 1 unfinished Restart requests, the most SelfServicePolicy default allows (maxQueued 1)")
	r := waitRequest(t, ns, "restart", nwv1.VMOperationWaiting)
	if r.Status.Approval != nwv1.ApprovalRequired || len(r.Status.BlockedBy) == 0 || !strings.HasPrefix(r.Status.BlockedBy[0], "awaiting an administrator's approval") {
		t.Errorf("the restart waits: %+v", r.Status)
	}
	approve := func(c client.Client, value string) error {
		return c.Patch(ctx, r.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nwv1.AnnotationApprove, value))))
	}
	// alice's own role has no update of requests: an administrator's client stands in for
	// someone who has it, under her name, to show the webhook refuses it too.
	refused(t, approve(as(t, alice), "Restart"), alice+" made this request: a request is approved by someone else")
	refused(t, approve(as(t, "admin"), "Restore"), "an approval names the request's operation, Restart")
	if err := approve(as(t, "admin"), "Restart"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil || r.Annotations[nwv1.AnnotationApprovedBy] != "admin" {
		t.Errorf("approved by %q (%v), want admin", r.Annotations[nwv1.AnnotationApprovedBy], err)
	}
}
