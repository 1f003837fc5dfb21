package operatortest

import (
	"context"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Class is a StorageClass and the CSI driver behind it.
type Class struct{ Name, Driver string }

// StorageClasses creates each class, and for its driver a default VolumeSnapshotClass named
// "<class>-snap", unless they exist already (the classes are cluster-wide; tests share them).
func StorageClasses(t testing.TB, c client.Client, classes ...Class) {
	t.Helper()
	ctx := context.Background()
	for _, class := range classes {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class.Name}, Provisioner: class.Driver,
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
		if err := c.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		vsc := &snapshotv1.VolumeSnapshotClass{
			ObjectMeta: metav1.ObjectMeta{Name: class.Name + "-snap", Annotations: map[string]string{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
			Driver:     class.Driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
		}
		if err := c.Create(ctx, vsc); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// HaltedVM creates VM name in ns, stopped, whose volume "root" is PVC "<name>-root": 1 GiB,
// block, of class, and marked bound (no CSI driver runs; admission only reads it).
func HaltedVM(t testing.TB, c client.Client, ns, name, class string) {
	t.Helper()
	ctx := context.Background()
	claim := name + "-root"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: ptr.To(class), VolumeName: "pv-" + ns + "-" + claim,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := c.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	if err := c.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyHalted),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
				Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
					PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
					},
				}}},
			}},
		},
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
}
