package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site"
)

// snapshot restore, on the local site's played KubeVirt: refused while the VM runs and for a
// snapshot no policy made; once the VM is stopped, the VM gets a new claim holding the bytes
// the snapshot took, while its old claim keeps what was written since.
func TestSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	const driver = "restore.csi.example.com"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: ns}, Provisioner: driver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	vsc := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: ns}, Driver: driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	for _, o := range []client.Object{sc, vsc} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	s := site.Start(t, env.Config, site.Options{Dir: t.TempDir(), Drivers: []string{driver}, CopyBinary: site.BuildCopy(t),
		NodeName: "site-" + ns, Namespaces: []string{ns}, GuestAgent: func(*virtv1.VirtualMachineInstance) bool { return true }})
	taken := s.RunningVM(t, env.Client, ns, "web", ns, 4<<20)

	p := &nwv1.VMSnapshotPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: nwv1.VMSnapshotPolicySpec{Schedule: nwv1.SnapshotSchedule{Cron: "30 2 * * *"}, Retention: nwv1.SnapshotRetention{KeepLast: 3}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	vm := &virtv1.VirtualMachine{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, vm); err != nil {
		t.Fatal(err)
	}
	// The snapshots the policy's run made, and one made by hand; the site plays KubeVirt.
	for _, name := range []string{"nightly-web-20261130-0230", "by-hand"} {
		snap := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: snapv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "web"}}}
		if name != "by-hand" {
			snap.Labels = map[string]string{nwv1.LabelSnapshotPolicy: p.Name, nwv1.LabelSnapshotVM: "web"}
			snap.Annotations = map[string]string{nwv1.AnnotationSnapshotPolicyUID: string(p.UID), nwv1.AnnotationSnapshotVMUID: string(vm.UID),
				nwv1.AnnotationSnapshotScheduled: "2026-11-30T02:30:00Z", nwv1.AnnotationSnapshotVolumes: "root"}
		}
		if err := env.Client.Create(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, site.VMPatience, func() string {
		snap := &snapv1.VirtualMachineSnapshot{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "nightly-web-20261130-0230"}, snap); err != nil {
			return err.Error()
		}
		if snap.Status == nil || snap.Status.Phase != snapv1.Succeeded || !ptr.Deref(snap.Status.ReadyToUse, false) {
			return fmt.Sprintf("the snapshot is not ready: %+v", snap.Status)
		}
		return ""
	})
	written := make([]byte, 4<<20)
	copy(written, "written after the snapshot")
	if err := s.Fill(ctx, ns, "web-root", bytes.NewReader(written)); err != nil {
		t.Fatal(err)
	}

	r := plugin(t, runOpts{}, "snapshot", "restore", "web", "nightly-web-20261130-0230", "-n", ns)
	r.wantCode(t, ExitFailed)
	if !strings.Contains(r.stderr, "VM web runs (its VirtualMachineInstance is Running): stop it first (virtctl stop web -n "+ns+")") {
		t.Errorf("a running VM: %q", r.stderr)
	}
	r = plugin(t, runOpts{}, "snapshot", "restore", "web", "by-hand", "-n", ns)
	r.wantCode(t, ExitFailed)
	if !strings.Contains(r.stderr, "by-hand is not a snapshot a VMSnapshotPolicy of namespace "+ns+" made of VM web") {
		t.Errorf("a snapshot made by hand: %q", r.stderr)
	}
	r = plugin(t, runOpts{}, "snapshot", "restore", "web", "-n", ns)
	r.wantCode(t, ExitUsage)

	// Stopped, as virtctl stop does it for this strategy; a patch, since the site writes the VM's status.
	if err := env.Client.Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"runStrategy":"Halted"}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, site.VMPatience, func() string {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &virtv1.VirtualMachineInstance{})
		if !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the VM has not stopped (%v)", err)
		}
		return ""
	})
	r = plugin(t, runOpts{}, "snapshot", "restore", "web", "nightly-web-20261130-0230", "-n", ns, "--wait", "--timeout", "3m")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "VM web is restored from nightly-web-20261130-0230.") || !strings.Contains(r.stdout, "Restore complete. Start the VM: virtctl start web -n "+ns) {
		t.Errorf("restore --wait said:\n%s", r.stdout)
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, vm); err != nil {
		t.Fatal(err)
	}
	claim := vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	if !strings.HasPrefix(claim, "restore-") || !strings.Contains(r.stdout, "Volume root restored on claim "+claim) {
		t.Fatalf("the VM's volume is on claim %q after the restore; it said:\n%s", claim, r.stdout)
	}
	if got, err := s.ReadVolume(ctx, ns, claim); err != nil || !bytes.Equal(got, taken) {
		t.Errorf("the restored claim does not hold the bytes the snapshot took (%v)", err)
	}
	if got, err := s.ReadVolume(ctx, ns, "web-root"); err != nil || !bytes.Equal(got, written) {
		t.Errorf("the old claim does not hold what was written since (%v)", err)
	}
	var restores snapv1.VirtualMachineRestoreList
	if err := env.Client.List(ctx, &restores, client.InNamespace(ns)); err != nil || len(restores.Items) != 1 {
		t.Fatalf("restores: %v %v", restores.Items, err)
	}
	if rs := restores.Items[0]; rs.Labels[nwv1.LabelSnapshotPolicy] != "nightly" || ptr.Deref(rs.Spec.TargetReadinessPolicy, "") != snapv1.VirtualMachineRestoreFailImmediate {
		t.Errorf("the restore: %+v %+v", rs.Labels, rs.Spec)
	}
}
