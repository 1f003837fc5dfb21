package vmsnapshotpolicy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmsnapshotpolicy"
	"github.com/spectrocloud/nodewright/internal/testenv"
	localsite "github.com/spectrocloud/nodewright/test/site"
)

// TestOnTheLocalSite runs two policies against the local site's KubeVirt, which takes the
// snapshots on real files (freezing the guests that run a guest agent, leaving out a volume
// whose storage class has no VolumeSnapshotClass, failing a freeze or a thaw where told to): under
// GuestAgent a VM with a guest agent gets a good snapshot and one without fails; under
// BestEffort the one without is good, marked noGuestAgent; a VM with an excluded volume fails,
// naming it; a VM whose freeze call failed gets a snapshot KubeVirt ends Succeeded, marked
// QuiesceFailed, which fails GuestAgent; a VM whose thaw fails is failed at the policy's
// deadline and its guest, left frozen, is reported.
func TestOnTheLocalSite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ten := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := start(t, ten.Add(-time.Minute))
	const driver, noSnapDriver = "vmsp.csi.example.com", "vmsp-nosnap.csi.example.com"
	class := func(name, driver string) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driver,
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	}
	for _, o := range []client.Object{class(s.ns, driver), class(s.ns+"-nosnap", noSnapDriver),
		&snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: s.ns}, Driver: driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	ls := localsite.Start(t, env.Config, localsite.Options{Drivers: []string{driver, noSnapDriver}, CopyBinary: localsite.BuildCopy(t),
		NodeName: "site-" + s.ns, Namespaces: []string{s.ns},
		GuestAgent: func(vmi *virtv1.VirtualMachineInstance) bool { return !strings.HasPrefix(vmi.Name, "bare") },
		FailFreeze: func(vmi *virtv1.VirtualMachineInstance) bool { return vmi.Name == "stuck" },
		FailThaw:   func(vmi *virtv1.VirtualMachineInstance) bool { return vmi.Name == "iced" }})
	for _, vm := range []string{"agent", "bare", "bare-lenient", "stuck", "iced", "two"} {
		ls.RunningVM(t, env.Client, s.ns, vm, s.ns, 1<<20)
	}
	// two gets a second volume, of the class without a VolumeSnapshotClass.
	data := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "two-data"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(s.ns + "-nosnap"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
			Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}}
	if err := env.Client.Create(ctx, data); err != nil {
		t.Fatal(err)
	}
	// The site writes the VM's status meanwhile: the update is retried on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		two := &virtv1.VirtualMachine{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "two"}, two); err != nil {
			return err
		}
		two.Spec.Template.Spec.Domain.Devices.Disks = append(two.Spec.Template.Spec.Domain.Devices.Disks, virtv1.Disk{Name: "data"})
		two.Spec.Template.Spec.Volumes = append(two.Spec.Template.Spec.Volumes, virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{
			PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "two-data"}}}})
		return env.Client.Update(ctx, two)
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() string {
		var pvc corev1.PersistentVolumeClaim
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(data), &pvc); err != nil || pvc.Status.Phase != corev1.ClaimBound {
			return fmt.Sprintf("two-data is not bound (%v)", err)
		}
		return ""
	})

	for name, c := range map[string]struct {
		vms  []string
		need nwv1.SnapshotConsistency
	}{"strict": {[]string{"agent", "bare", "iced", "stuck", "two"}, nwv1.SnapshotGuestAgent}, "lenient": {[]string{"bare-lenient"}, nwv1.SnapshotBestEffort}} {
		p := &nwv1.VMSnapshotPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
			Spec: nwv1.VMSnapshotPolicySpec{
				VMSelector:  nwv1.VMSelector{Names: c.vms},
				Schedule:    nwv1.SnapshotSchedule{Cron: "@hourly"},
				Retention:   nwv1.SnapshotRetention{KeepLast: 2},
				Consistency: nwv1.SnapshotConsistencySpec{Require: c.need},
			},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		s.policy(name, func(p *nwv1.VMSnapshotPolicy) string {
			if p.Status.NextRun == nil || int(p.Status.Selected) != len(c.vms) {
				return "no next run yet"
			}
			return ""
		})
	}
	s.clock.SetTime(ten.Add(5 * time.Second))
	for _, name := range []string{"strict", "lenient"} {
		s.at(&nwv1.VMSnapshotPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}, ten.Add(5*time.Second))
	}
	s.policy("strict", func(p *nwv1.VMSnapshotPolicy) string {
		agent, bare, stuck, two := vmStatus(p, "agent"), vmStatus(p, "bare"), vmStatus(p, "stuck"), vmStatus(p, "two")
		switch {
		case stuck.LastFailed == nil || !strings.Contains(stuck.LastFailed.Reason, "the guest agent failed to freeze the guest (indication QuiesceFailed)"):
			return fmt.Sprintf("stuck %+v", stuck)
		case agent.LastGood == nil || agent.LastGood.Name != vmsnapshotpolicy.SnapshotName("strict", "agent", ten) || agent.LastGood.NoGuestAgent:
			return fmt.Sprintf("agent %+v", agent)
		case bare.LastFailed == nil || !strings.Contains(bare.LastFailed.Reason, "without the guest agent's freeze (indications NoGuestAgent, Online)"):
			return fmt.Sprintf("bare %+v", bare)
		case two.LastFailed == nil || !strings.Contains(two.LastFailed.Reason, "volume data not included (KubeVirt excluded data"):
			return fmt.Sprintf("two %+v", two)
		}
		return ""
	})
	s.policy("lenient", func(p *nwv1.VMSnapshotPolicy) string {
		if v := vmStatus(p, "bare-lenient"); v.LastGood == nil || !v.LastGood.NoGuestAgent {
			return fmt.Sprintf("bare-lenient %+v", v)
		}
		return ""
	})
	// iced's thaw fails: KubeVirt keeps its snapshot InProgress and its guest frozen. Past the
	// policy's failure deadline the run is failed and the frozen guest reported, never thawed
	// by the policy.
	strict := &nwv1.VMSnapshotPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "strict"}}
	s.at(strict, ten.Add(12*time.Minute))
	s.policy("strict", func(p *nwv1.VMSnapshotPolicy) string {
		if v := vmStatus(p, "iced"); v.LastFailed == nil || !v.GuestFrozen ||
			!strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy), "False GuestLeftFrozen: the guest of iced was left frozen") {
			return fmt.Sprintf("iced %+v, healthy %s", v, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy))
		}
		return ""
	})
	vmi := &virtv1.VirtualMachineInstance{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "iced"}, vmi); err != nil {
		t.Fatal(err)
	}
	if vmi.Status.FSFreezeStatus != "frozen" {
		t.Errorf("iced's guest is %q, want left frozen", vmi.Status.FSFreezeStatus)
	}
	if vmi = (&virtv1.VirtualMachineInstance{}); env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "agent"}, vmi) != nil || vmi.Status.FSFreezeStatus != "" {
		t.Errorf("agent's guest is %q after its snapshot, want thawed", vmi.Status.FSFreezeStatus)
	}
}
