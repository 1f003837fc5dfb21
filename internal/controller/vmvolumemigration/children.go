package vmvolumemigration

import (
	"context"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// ensure creates obj unless an object of that name exists, and reads the existing one back
// into obj; a same-named object that is not this migration's is a children.NotOursError.
func (r *Reconciler) ensure(ctx context.Context, m *nwv1.VMVolumeMigration, obj client.Object) error {
	return children.Ensure(ctx, r.Client, r.APIReader, migration.Owner(m), kindOf(obj), obj)
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *corev1.PersistentVolumeClaim:
		return "PersistentVolumeClaim"
	case *snapshotv1.VolumeSnapshot:
		return "VolumeSnapshot"
	case *batchv1.Job:
		return "Job"
	}
	return fmt.Sprintf("%T", obj)
}

// deleteIfOurs deletes the named child when it is this migration's, and reports whether it
// is gone.
func deleteIfOurs(ctx context.Context, c client.Client, m *nwv1.VMVolumeMigration, obj client.Object, opts ...client.DeleteOption) (bool, error) {
	return children.DeleteIfOurs(ctx, c, migration.Owner(m), obj, opts...)
}

func newSnapshot(m *nwv1.VMVolumeMigration, name, pvc, class string) *snapshotv1.VolumeSnapshot {
	return &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: migration.Owner(m).Labels()},
		Spec: snapshotv1.VolumeSnapshotSpec{
			Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(pvc)},
			VolumeSnapshotClassName: ptr.To(class),
		},
	}
}

// snapshotState is a snapshot's readiness, or the error its driver reported.
func snapshotState(vs *snapshotv1.VolumeSnapshot) (ready bool, failure string) {
	if vs.Status == nil {
		return false, ""
	}
	if vs.Status.Error != nil && vs.Status.Error.Message != nil {
		return false, *vs.Status.Error.Message
	}
	return ptr.Deref(vs.Status.ReadyToUse, false), ""
}

// newTargetPVC is the target PVC: the spec's class, access mode and volume mode, and size,
// cloned from dataSource when it is set.
func newTargetPVC(m *nwv1.VMVolumeMigration, name string, size resource.Quantity, dataSource *corev1.TypedLocalObjectReference) *corev1.PersistentVolumeClaim {
	t := m.Spec.Target
	access := t.AccessMode
	if access == "" {
		access = corev1.ReadWriteMany
	}
	mode := t.VolumeMode
	if mode == "" {
		mode = corev1.PersistentVolumeBlock
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: migration.Owner(m).Labels()},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(t.StorageClassName),
			AccessModes:      []corev1.PersistentVolumeAccessMode{access},
			VolumeMode:       ptr.To(mode),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			DataSource:       dataSource,
		},
	}
}

// newViewPVC restores the "before" snapshot into a PVC of the source's class, so that the
// verify Job can read the snapshot as a block device.
func newViewPVC(m *nwv1.VMVolumeMigration, name, class, snapshot string, size resource.Quantity) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: migration.Owner(m).Labels(), OwnerReferences: owner(m)},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			DataSource:       &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: snapshot},
		},
	}
}

func corePVCSource(claim string) corev1.PersistentVolumeClaimVolumeSource {
	return corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}
}

// owner makes the migration the controller of its ephemeral children (the data Jobs and the
// snapshot view), so that they go with it even if a cleanup was missed. The target PVC and the
// snapshots outlive it: they belong to the VM once it succeeded.
func owner(m *nwv1.VMVolumeMigration) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(m, nwv1.GroupVersion.WithKind("VMVolumeMigration"))}
}
