package vmvolumemigration

import (
	"context"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// ensure creates obj unless an object of that name exists, and reads the existing one back
// into obj. A same-named object that is not this migration's is an error: the migration
// never adopts or overwrites what someone else made. The read goes to the API server: the
// operator's cache holds only its own Jobs and snapshots.
func (r *Reconciler) ensure(ctx context.Context, m *nwv1.VMVolumeMigration, obj client.Object) error {
	err := r.Client.Create(ctx, obj)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	if obj.GetLabels()[LabelMigrationUID] != string(m.UID) {
		return notOursError{fmt.Sprintf("%s %s/%s exists and was not created by this migration", kindOf(obj), obj.GetNamespace(), obj.GetName())}
	}
	return nil
}

// notOursError: a child's name is taken by an object the migration did not create. Waiting
// will not help, so the step fails.
type notOursError struct{ msg string }

func (e notOursError) Error() string { return e.msg }

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
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	if obj.GetLabels()[LabelMigrationUID] != string(m.UID) {
		return true, nil // not ours: leave it alone
	}
	if obj.GetDeletionTimestamp() == nil {
		// The precondition keeps a stale read from deleting a same-named successor.
		opts = append(opts, client.Preconditions{UID: ptr.To(obj.GetUID())})
		if err := c.Delete(ctx, obj, opts...); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, err
		}
	}
	return false, nil
}

func newSnapshot(m *nwv1.VMVolumeMigration, name, pvc, class string) *snapshotv1.VolumeSnapshot {
	return &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: childLabels(m)},
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
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: childLabels(m)},
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
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: childLabels(m), OwnerReferences: owner(m)},
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

// pvcBound reports whether the PVC is bound to a volume.
func pvcBound(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName != ""
}

// pvcSize is the PVC's capacity, or its request before it is bound.
func pvcSize(pvc *corev1.PersistentVolumeClaim) resource.Quantity {
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		return q
	}
	return pvc.Spec.Resources.Requests[corev1.ResourceStorage]
}

// owner makes the migration the controller of its ephemeral children (the data Jobs and the
// snapshot view), so that they go with it even if a cleanup was missed. The target PVC and the
// snapshots outlive it: they belong to the VM once it succeeded.
func owner(m *nwv1.VMVolumeMigration) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(m, nwv1.GroupVersion.WithKind("VMVolumeMigration"))}
}
