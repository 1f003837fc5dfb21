package site_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/test/site"
)

// noSnapDriver is a CSI driver the site serves with no VolumeSnapshotClass.
const noSnapDriver = "nosnap.csi.example.com"

// snapshotFixture is a fixture whose site also serves a CSI driver of the test's own, with a
// StorageClass and the one VolumeSnapshotClass of that driver, both named snapClass(f): the
// site's KubeVirt picks a VolumeSnapshotClass by the driver, and the fixture's shared driver
// has a default class per test running in parallel, deleted when that test ends.
func snapshotFixture(t *testing.T, opts site.Options) *fix {
	t.Helper()
	f := bareFixture(t)
	own := f.ns + ".csi.example.com"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: snapClass(f)}, Provisioner: own,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	vsc := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: snapClass(f)}, Driver: own, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	f.create(sc)
	f.create(vsc)
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), sc)
		_ = env.Client.Delete(context.Background(), vsc)
	})
	extra := opts.Drivers
	opts = f.options(opts)
	opts.Drivers = append(append(opts.Drivers, own), extra...)
	f.site = site.Start(t, env.Config, opts)
	return f
}

func snapClass(f *fix) string { return f.ns + "-snap" }

// vmSnapshot creates a snapshot of the VM, failing after deadline when not ended.
func (f *fix) vmSnapshot(name, vm string, deadline time.Duration) {
	f.t.Helper()
	f.create(&snapv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: snapv1.VirtualMachineSnapshotSpec{
			Source:          corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: vm},
			FailureDeadline: &metav1.Duration{Duration: deadline},
		},
	})
}

// vmSnapshotIs waits until check finds nothing wrong with the snapshot, and returns it.
func (f *fix) vmSnapshotIs(name string, check func(*snapv1.VirtualMachineSnapshotStatus) string) *snapv1.VirtualMachineSnapshot {
	f.t.Helper()
	vms := &snapv1.VirtualMachineSnapshot{}
	f.eventually(func() string {
		if err := f.get(name, vms); err != nil {
			return err.Error()
		}
		if vms.Status == nil {
			return "snapshot " + name + " has no status"
		}
		if why := check(vms.Status); why != "" {
			return fmt.Sprintf("snapshot %s: %s: %+v", name, why, *vms.Status)
		}
		return ""
	})
	return vms
}

func succeeded(st *snapv1.VirtualMachineSnapshotStatus) string {
	if st.Phase != snapv1.Succeeded || !ptr.Deref(st.ReadyToUse, false) {
		return "not Succeeded and ready"
	}
	return ""
}

func (f *fix) vmi(name string) *virtv1.VirtualMachineInstance {
	f.t.Helper()
	vmi := &virtv1.VirtualMachineInstance{}
	if err := f.get(name, vmi); err != nil {
		f.t.Fatal(err)
	}
	return vmi
}

// TestKubeVirtSnapshotAndRestore plays KubeVirt's snapshot of a running VM with a guest agent
// (frozen for the volumes' snapshots, thawed after, the snapshot's content, phase, indications
// and volumes as KubeVirt writes them), and its restore: it waits while the VM runs, and once
// the VM is stopped, gives it new claims with the bytes the snapshot took.
func TestKubeVirtSnapshotAndRestore(t *testing.T) {
	t.Parallel()
	// What the API server held when the guest agent was asked to freeze the guest.
	var atFreeze atomic.Value
	var ns string
	f := snapshotFixture(t, site.Options{
		GuestAgent: func(*virtv1.VirtualMachineInstance) bool { return true },
		FailFreeze: func(vmi *virtv1.VirtualMachineInstance) bool {
			live := &virtv1.VirtualMachineInstance{}
			var volumes snapshotv1.VolumeSnapshotList
			err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(vmi), live)
			if err == nil {
				err = env.Client.List(context.Background(), &volumes, client.InNamespace(ns))
			}
			atFreeze.Store(fmt.Sprintf("guest %q, %d volume snapshots, %v", live.Status.FSFreezeStatus, len(volumes.Items), err))
			return false
		},
	})
	ns = f.ns
	want := f.site.RunningVM(t, env.Client, f.ns, "web", snapClass(f), volumeSize)
	f.eventually(func() string {
		if c := vmiCondition(f.vmi("web"), virtv1.VirtualMachineInstanceAgentConnected); c == nil || c.Status != corev1.ConditionTrue {
			return "the played guest agent is not connected"
		}
		return ""
	})
	f.vmSnapshot("before", "web", time.Hour)
	vms := f.vmSnapshotIs("before", succeeded)
	st := vms.Status
	if !slices.Equal(st.Indications, []snapv1.Indication{snapv1.VMSnapshotGuestAgentIndication, snapv1.VMSnapshotOnlineSnapshotIndication}) ||
		st.SnapshotVolumes == nil || !slices.Equal(st.SnapshotVolumes.IncludedVolumes, []string{"root"}) || len(st.SnapshotVolumes.ExcludedVolumes) > 0 ||
		ptr.Deref(st.SourceUID, "") == "" || ptr.Deref(st.VirtualMachineSnapshotContentName, "") != "vmsnapshot-content-"+string(vms.UID) || st.CreationTime == nil {
		t.Errorf("the snapshot's status is not KubeVirt's: %+v", *st)
	}
	content := &snapv1.VirtualMachineSnapshotContent{}
	if err := f.get(*st.VirtualMachineSnapshotContentName, content); err != nil {
		t.Fatal(err)
	}
	volumeSnapshot := "vmsnapshot-" + string(vms.UID) + "-volume-root"
	if len(content.Spec.VolumeBackups) != 1 || ptr.Deref(content.Spec.VolumeBackups[0].VolumeSnapshotName, "") != volumeSnapshot ||
		content.Spec.VolumeBackups[0].PersistentVolumeClaim.Name != "web-root" || content.Status == nil || len(content.Status.VolumeSnapshotStatus) != 1 ||
		!ptr.Deref(content.Status.VolumeSnapshotStatus[0].ReadyToUse, false) {
		t.Errorf("the content is not KubeVirt's: %+v %+v", content.Spec.VolumeBackups, content.Status)
	}
	if vmi := f.vmi("web"); vmi.Status.FSFreezeStatus != "" {
		t.Errorf("the guest is left %q after the snapshot", vmi.Status.FSFreezeStatus)
	}
	if got, want := atFreeze.Load(), `guest "frozen", 0 volume snapshots, <nil>`; got != want {
		t.Errorf("when the guest agent froze the guest: %v, want %s", got, want)
	}
	f.snapshotReady(volumeSnapshot)
	if got := f.read("web-root"); !bytes.Equal(got, want) {
		t.Fatal("the VM's volume is not what was written")
	}

	// The guest writes on, and the VM's spec changes; a restore is asked for while the VM
	// runs: it waits.
	after := f.fill("web-root", 99)
	f.patchVM("web", `{"template":{"metadata":{"annotations":{"changed":"after the snapshot"}}}}`)
	f.create(&snapv1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "back", Namespace: f.ns},
		Spec: snapv1.VirtualMachineRestoreSpec{
			Target:                     corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "web"},
			VirtualMachineSnapshotName: "before",
		},
	})
	restore := &snapv1.VirtualMachineRestore{}
	f.eventually(func() string {
		if err := f.get("back", restore); err != nil {
			return err.Error()
		}
		if restore.Status == nil || !slices.ContainsFunc(restore.Status.Conditions, func(c snapv1.Condition) bool {
			return c.Type == snapv1.ConditionReady && c.Status == corev1.ConditionFalse && strings.HasPrefix(c.Reason, "Waiting for target VM to be powered off")
		}) {
			return fmt.Sprintf("the restore of a running VM does not wait for it to stop: %+v", restore.Status)
		}
		return ""
	})

	// Stopped, the VM is restored: new claims from the snapshot, its volume pointed at them.
	f.patchVM("web", `{"runStrategy":"Halted"}`)
	f.noVMI("web")
	f.eventually(func() string {
		if err := f.get("back", restore); err != nil {
			return err.Error()
		}
		if restore.Status == nil || !ptr.Deref(restore.Status.Complete, false) {
			return fmt.Sprintf("the restore is not complete: %+v", restore.Status)
		}
		return ""
	})
	claim := "restore-" + string(restore.UID) + "-root"
	if r := restore.Status.Restores; len(r) != 1 || r[0].VolumeName != "root" || r[0].PersistentVolumeClaimName != claim || r[0].VolumeSnapshotName != volumeSnapshot {
		t.Errorf("the restore's volumes are %+v", r)
	}
	vm := &virtv1.VirtualMachine{}
	if err := f.get("web", vm); err != nil {
		t.Fatal(err)
	}
	if on := vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim; on == nil || on.ClaimName != claim {
		t.Fatalf("the VM's volume is %+v, want the claim %s", vm.Spec.Template.Spec.Volumes[0], claim)
	}
	if a := vm.Spec.Template.ObjectMeta.Annotations; a["changed"] != "" || ptr.Deref(vm.Spec.RunStrategy, "") != virtv1.RunStrategyHalted {
		t.Errorf("the VM's spec is not the snapshot's with its run strategy kept: annotations %v, run strategy %v", a, vm.Spec.RunStrategy)
	}
	if got := f.read(claim); !bytes.Equal(got, want) {
		t.Error("the restored claim does not hold the bytes the snapshot took")
	}
	if got := f.read("web-root"); !bytes.Equal(got, after) {
		t.Error("the old claim changed")
	}
	f.patchVM("web", `{"runStrategy":"Always"}`)
	f.vmiOn("web", virtv1.Running, claim)
}

// TestKubeVirtSnapshotFaults plays what goes wrong: a VM without a guest agent is snapshotted
// online, unfrozen (NoGuestAgent); a volume of a storage class without a VolumeSnapshotClass
// is left out; a freeze call that fails (the guest frozen all the same) ends Succeeded marked
// QuiesceFailed; a thaw that fails leaves the guest frozen and the snapshot failed at its
// deadline; a held snapshot never becomes ready.
func TestKubeVirtSnapshotFaults(t *testing.T) {
	t.Parallel()
	f := snapshotFixture(t, site.Options{
		GuestAgent:   func(vmi *virtv1.VirtualMachineInstance) bool { return vmi.Name != "bare" },
		FailFreeze:   func(vmi *virtv1.VirtualMachineInstance) bool { return vmi.Name == "stuck" },
		FailThaw:     func(vmi *virtv1.VirtualMachineInstance) bool { return vmi.Name == "iced" },
		HoldSnapshot: func(s *snapv1.VirtualMachineSnapshot) bool { return s.Spec.Source.Name == "held" },
		Drivers:      []string{noSnapDriver},
	})
	noSnap := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-nosnap"}, Provisioner: noSnapDriver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	f.create(noSnap)
	t.Cleanup(func() { _ = env.Client.Delete(f.ctx, noSnap) })

	for _, name := range []string{"bare", "stuck", "iced", "held"} {
		f.site.RunningVM(t, env.Client, f.ns, name, snapClass(f), volumeSize)
	}
	data := f.claim("two-data", nil)
	data.Spec.StorageClassName = ptr.To(noSnap.Name)
	f.create(data)
	root := f.claim("two-root", nil)
	root.Spec.StorageClassName = ptr.To(snapClass(f))
	f.create(root)
	two := f.vm("two", "two-root", virtv1.RunStrategyAlways)
	two.Spec.Template.Spec.Domain.Devices.Disks = append(two.Spec.Template.Spec.Domain.Devices.Disks, virtv1.Disk{Name: "data"})
	two.Spec.Template.Spec.Volumes = append(two.Spec.Template.Spec.Volumes, virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{
		PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "two-data"}}}})
	f.create(two)
	site.WaitVMRunsOn(t, env.Client, f.ns, "two", "two-root")

	f.vmSnapshot("bare", "bare", time.Hour)
	f.vmSnapshot("two", "two", time.Hour)
	f.vmSnapshot("stuck", "stuck", time.Hour)
	f.vmSnapshot("iced", "iced", 5*time.Second)
	f.vmSnapshot("held", "held", 3*time.Second)

	f.vmSnapshotIs("bare", func(st *snapv1.VirtualMachineSnapshotStatus) string {
		if why := succeeded(st); why != "" {
			return why
		}
		if !slices.Equal(st.Indications, []snapv1.Indication{snapv1.VMSnapshotNoGuestAgentIndication, snapv1.VMSnapshotOnlineSnapshotIndication}) {
			return "not NoGuestAgent and Online"
		}
		return ""
	})
	f.vmSnapshotIs("two", func(st *snapv1.VirtualMachineSnapshotStatus) string {
		if why := succeeded(st); why != "" {
			return why
		}
		if v := st.SnapshotVolumes; v == nil || !slices.Equal(v.IncludedVolumes, []string{"root"}) || !slices.Equal(v.ExcludedVolumes, []string{"data"}) {
			return "data is not excluded"
		}
		return ""
	})
	// The freeze call failed while the guest froze: the retry finds it frozen and goes on; the
	// snapshot succeeds, marked QuiesceFailed, and the guest is thawed.
	f.vmSnapshotIs("stuck", func(st *snapv1.VirtualMachineSnapshotStatus) string {
		if why := succeeded(st); why != "" {
			return why
		}
		if !slices.Equal(st.Indications, []snapv1.Indication{snapv1.VMSnapshotGuestAgentIndication, snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotQuiesceFailedIndication}) {
			return "not GuestAgent, Online and QuiesceFailed"
		}
		return ""
	})
	if vmi := f.vmi("stuck"); vmi.Status.FSFreezeStatus != "" {
		t.Errorf("the guest whose freeze call failed is %q after its snapshot, want thawed", vmi.Status.FSFreezeStatus)
	}
	// The thaw fails: the snapshot fails at its deadline, its content deleted with the
	// volume's snapshot, and the guest stays frozen.
	iced := f.vmSnapshotIs("iced", func(st *snapv1.VirtualMachineSnapshotStatus) string {
		if st.Phase != snapv1.Failed || ptr.Deref(st.ReadyToUse, false) {
			return "not Failed at its deadline"
		}
		return ""
	})
	f.eventually(func() string {
		if err := f.get("vmsnapshot-content-"+string(iced.UID), &snapv1.VirtualMachineSnapshotContent{}); err == nil {
			return "the failed snapshot's content is left"
		}
		if err := f.get("vmsnapshot-"+string(iced.UID)+"-volume-root", &snapshotv1.VolumeSnapshot{}); err == nil {
			return "the failed snapshot's volume snapshot is left"
		}
		return ""
	})
	if vmi := f.vmi("iced"); vmi.Status.FSFreezeStatus != "frozen" {
		t.Errorf("the guest whose thaw failed is %q, want left frozen", vmi.Status.FSFreezeStatus)
	}
	f.vmSnapshotIs("held", func(st *snapv1.VirtualMachineSnapshotStatus) string {
		if st.Phase != snapv1.Failed || ptr.Deref(st.ReadyToUse, false) {
			return "not Failed at its deadline"
		}
		return ""
	})
	var list snapshotv1.VolumeSnapshotList
	if err := env.Client.List(f.ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, vs := range list.Items {
		if vs.Namespace == f.ns && strings.Contains(vs.Labels["snapshot.kubevirt.io/source-vm-name"], "held") {
			t.Errorf("the held snapshot's volume was snapshotted: %s", vs.Name)
		}
	}

	// Deleting a snapshot deletes its content and its volumes' snapshots.
	f.delete(&snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: f.ns}})
	f.eventually(func() string {
		var contents snapv1.VirtualMachineSnapshotContentList
		var volumes snapshotv1.VolumeSnapshotList
		if err := env.Client.List(f.ctx, &contents); err != nil {
			return err.Error()
		}
		if err := env.Client.List(f.ctx, &volumes); err != nil {
			return err.Error()
		}
		for _, c := range contents.Items {
			if c.Namespace == f.ns && ptr.Deref(c.Spec.VirtualMachineSnapshotName, "") == "two" {
				return "the content of a deleted snapshot is left: " + c.Name
			}
		}
		for _, v := range volumes.Items {
			if v.Namespace == f.ns && v.Labels["snapshot.kubevirt.io/source-vm-name"] == "two" {
				return "a volume's snapshot of a deleted snapshot is left: " + v.Name
			}
		}
		return ""
	})
}
