package site

import (
	"context"
	"fmt"
	"os"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The snapshot controller and the CSI snapshotter, for dynamically created snapshots of the
// site's claims. Names, annotation and finalizers are the real controller's.
const (
	annDefaultSnapshotClass    = "snapshot.storage.kubernetes.io/is-default-class"
	snapshotBoundProtection    = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
	snapshotAsSourceProtection = "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"
	contentBoundProtection     = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
)

// contentName is the deterministic name of a snapshot's content, and its CSI snapshot handle.
func contentName(vs *snapshotv1.VolumeSnapshot) string { return "snapcontent-" + string(vs.UID) }

func (s *Site) setupSnapshots() error {
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool { return s.inScope(o.GetNamespace()) })
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-snapshots").
		For(&snapshotv1.VolumeSnapshot{}, builder.WithPredicates(inScope)).
		// A snapshot waits for its claim to be bound, and its deletion for restores to end.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(s.snapshotsOfClaim), builder.WithPredicates(inScope)).
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(s.viaVolume(s.snapshotsOfClaim))).
		Watches(&snapshotv1.VolumeSnapshotClass{}, handler.EnqueueRequestsFromMapFunc(s.unreadySnapshots)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.Func(s.reconcileSnapshot))
}

// snapshotsOfClaim maps a claim to the snapshots taken of it and the one it is restored from.
func (s *Site) snapshotsOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	pvc := o.(*corev1.PersistentVolumeClaim)
	var names []string
	if from, ok := dataSource(pvc); ok && from.group == snapshotv1.GroupName && from.kind == "VolumeSnapshot" {
		names = append(names, from.name)
	}
	list := &snapshotv1.VolumeSnapshotList{}
	if err := s.client.List(ctx, list, client.InNamespace(pvc.Namespace)); err != nil {
		return requests(pvc.Namespace, names)
	}
	for _, vs := range list.Items {
		if ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "") == pvc.Name {
			names = append(names, vs.Name)
		}
	}
	return requests(pvc.Namespace, names)
}

// unreadySnapshots maps a class to every snapshot not ready yet: one may have been waiting for it.
func (s *Site) unreadySnapshots(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &snapshotv1.VolumeSnapshotList{}
	if err := s.client.List(ctx, list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		vs := &list.Items[i]
		if s.inScope(vs.Namespace) && (vs.Status == nil || !ptr.Deref(vs.Status.ReadyToUse, false)) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vs)})
		}
	}
	return out
}

func (s *Site) reconcileSnapshot(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vs := &snapshotv1.VolumeSnapshot{}
	if err := s.client.Get(ctx, req.NamespacedName, vs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vs.DeletionTimestamp != nil {
		return ctrl.Result{}, s.deleteSnapshot(ctx, vs)
	}
	claimName := ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "")
	if claimName == "" {
		return ctrl.Result{}, nil // pre-provisioned content: not supported
	}
	if vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false) {
		return ctrl.Result{}, nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: vs.Namespace, Name: claimName}, pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, s.snapshotFailed(ctx, vs, fmt.Sprintf("PersistentVolumeClaim %q not found", claimName))
		}
		return ctrl.Result{}, err
	}
	path, pv, err := s.boundFile(ctx, pvc)
	if path == "" || err != nil {
		return ctrl.Result{}, err // not bound yet, or not the site's
	}
	class, problem, err := s.snapshotClass(ctx, vs, pv.Spec.CSI.Driver)
	if err != nil {
		return ctrl.Result{}, err
	}
	if problem != "" {
		return ctrl.Result{}, s.snapshotFailed(ctx, vs, problem)
	}
	if err := s.claimSnapshot(ctx, vs, class); err != nil {
		return ctrl.Result{}, err
	}
	content, err := s.ensureContent(ctx, vs, class, pv, path)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, s.snapshotReady(ctx, vs, content)
}

// snapshotClass resolves the snapshot's class, or the default one of the driver. A problem is
// the user's to fix and goes into status.error.
func (s *Site) snapshotClass(ctx context.Context, vs *snapshotv1.VolumeSnapshot, driver string) (*snapshotv1.VolumeSnapshotClass, string, error) {
	if name := ptr.Deref(vs.Spec.VolumeSnapshotClassName, ""); name != "" {
		class := &snapshotv1.VolumeSnapshotClass{}
		if err := s.client.Get(ctx, types.NamespacedName{Name: name}, class); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Sprintf("failed to get snapshot class with error volumesnapshotclass.snapshot.storage.k8s.io %q not found", name), nil
			}
			return nil, "", err
		}
		if class.Driver != driver {
			return nil, fmt.Sprintf("VolumeSnapshotClass %q is for driver %q, the claim's volume is on %q", name, class.Driver, driver), nil
		}
		return class, "", nil
	}
	list := &snapshotv1.VolumeSnapshotClassList{}
	if err := s.client.List(ctx, list); err != nil {
		return nil, "", err
	}
	var defaults []*snapshotv1.VolumeSnapshotClass
	for i := range list.Items {
		if c := &list.Items[i]; c.Driver == driver && c.Annotations[annDefaultSnapshotClass] == "true" {
			defaults = append(defaults, c)
		}
	}
	switch len(defaults) {
	case 0:
		return nil, fmt.Sprintf("cannot find default snapshot class for driver %q", driver), nil
	case 1:
		return defaults[0], "", nil
	}
	return nil, fmt.Sprintf("%d default snapshot classes were found for driver %q", len(defaults), driver), nil
}

// claimSnapshot adds the finalizer that lets the site see the snapshot's deletion and, like
// the real controller, writes the default class into the spec.
func (s *Site) claimSnapshot(ctx context.Context, vs *snapshotv1.VolumeSnapshot, class *snapshotv1.VolumeSnapshotClass) error {
	if controllerutil.ContainsFinalizer(vs, snapshotBoundProtection) && vs.Spec.VolumeSnapshotClassName != nil {
		return nil
	}
	before := vs.DeepCopy()
	controllerutil.AddFinalizer(vs, snapshotBoundProtection)
	vs.Spec.VolumeSnapshotClassName = ptr.To(class.Name)
	if err := s.client.Patch(ctx, vs, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding the finalizer of VolumeSnapshot %s/%s: %w", vs.Namespace, vs.Name, err)
	}
	return nil
}

// ensureContent copies the claim's file, once, and records it in a VolumeSnapshotContent.
func (s *Site) ensureContent(ctx context.Context, vs *snapshotv1.VolumeSnapshot, class *snapshotv1.VolumeSnapshotClass,
	pv *corev1.PersistentVolume, path string) (*snapshotv1.VolumeSnapshotContent, error) {
	handle := contentName(vs)
	content := &snapshotv1.VolumeSnapshotContent{}
	err := s.client.Get(ctx, types.NamespacedName{Name: handle}, content)
	if apierrors.IsNotFound(err) {
		if err := copySparse(path, s.files.snapshot(handle), 0, false); err != nil {
			return nil, err
		}
		content = &snapshotv1.VolumeSnapshotContent{
			ObjectMeta: metav1.ObjectMeta{Name: handle, Finalizers: []string{contentBoundProtection}},
			Spec: snapshotv1.VolumeSnapshotContentSpec{
				VolumeSnapshotRef: corev1.ObjectReference{Kind: "VolumeSnapshot", APIVersion: snapshotv1.SchemeGroupVersion.String(),
					Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID},
				DeletionPolicy:          class.DeletionPolicy,
				Driver:                  class.Driver,
				VolumeSnapshotClassName: ptr.To(class.Name),
				Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(pv.Spec.CSI.VolumeHandle)},
				SourceVolumeMode:        pv.Spec.VolumeMode,
			},
		}
		err = s.client.Create(ctx, content)
		if apierrors.IsAlreadyExists(err) {
			err = s.client.Get(ctx, types.NamespacedName{Name: handle}, content)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("VolumeSnapshotContent %s: %w", handle, err)
	}
	if content.Status != nil && ptr.Deref(content.Status.ReadyToUse, false) {
		return content, nil
	}
	info, err := os.Stat(s.files.snapshot(handle))
	if err != nil {
		return nil, err
	}
	before := content.DeepCopy()
	content.Status = &snapshotv1.VolumeSnapshotContentStatus{
		SnapshotHandle: ptr.To(handle),
		CreationTime:   ptr.To(info.ModTime().UnixNano()),
		RestoreSize:    ptr.To(info.Size()),
		ReadyToUse:     ptr.To(true),
	}
	if err := s.client.Status().Patch(ctx, content, client.MergeFrom(before)); err != nil {
		return nil, fmt.Errorf("writing the status of VolumeSnapshotContent %s: %w", handle, err)
	}
	return content, nil
}

func (s *Site) snapshotReady(ctx context.Context, vs *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent) error {
	status := &snapshotv1.VolumeSnapshotStatus{
		BoundVolumeSnapshotContentName: ptr.To(content.Name),
		CreationTime:                   ptr.To(metav1.NewTime(time.Unix(0, *content.Status.CreationTime))),
		ReadyToUse:                     ptr.To(true),
		RestoreSize:                    resource.NewQuantity(*content.Status.RestoreSize, resource.BinarySI),
	}
	return s.writeSnapshotStatus(ctx, vs, status)
}

func (s *Site) snapshotFailed(ctx context.Context, vs *snapshotv1.VolumeSnapshot, message string) error {
	status := &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false)}
	if vs.Status != nil && vs.Status.Error != nil && ptr.Deref(vs.Status.Error.Message, "") == message {
		status.Error = vs.Status.Error // keep the time the problem was first seen
	} else {
		status.Error = &snapshotv1.VolumeSnapshotError{Message: ptr.To(message), Time: ptr.To(metav1.Now())}
	}
	return s.writeSnapshotStatus(ctx, vs, status)
}

func (s *Site) writeSnapshotStatus(ctx context.Context, vs *snapshotv1.VolumeSnapshot, status *snapshotv1.VolumeSnapshotStatus) error {
	if equality.Semantic.DeepEqual(vs.Status, status) {
		return nil
	}
	before := vs.DeepCopy()
	vs.Status = status
	if err := ignoreGone(s.client.Status().Patch(ctx, vs, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))); err != nil {
		return fmt.Errorf("writing the status of VolumeSnapshot %s/%s: %w", vs.Namespace, vs.Name, err)
	}
	return nil
}

// deleteSnapshot waits until no pending claim is restored from the snapshot, deletes its
// content when the policy says so (the content's own finalizer then frees the file), and lets
// the snapshot go.
func (s *Site) deleteSnapshot(ctx context.Context, vs *snapshotv1.VolumeSnapshot) error {
	if !controllerutil.ContainsFinalizer(vs, snapshotBoundProtection) && !controllerutil.ContainsFinalizer(vs, snapshotAsSourceProtection) {
		return nil
	}
	restoring, err := s.restoringFrom(ctx, vs)
	if restoring || err != nil {
		return err
	}
	content := &snapshotv1.VolumeSnapshotContent{}
	err = s.client.Get(ctx, types.NamespacedName{Name: contentName(vs)}, content)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete && content.DeletionTimestamp == nil:
		if err := ignoreGone(s.client.Delete(ctx, content)); err != nil {
			return fmt.Errorf("deleting VolumeSnapshotContent %s: %w", content.Name, err)
		}
	}
	before := vs.DeepCopy()
	controllerutil.RemoveFinalizer(vs, snapshotBoundProtection)
	controllerutil.RemoveFinalizer(vs, snapshotAsSourceProtection)
	return ignoreGone(s.client.Patch(ctx, vs, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

// restoringFrom says whether a claim that is not bound yet is to be restored from vs. It reads
// the API server, not the cache: a claim created a moment before the snapshot's deletion may
// not be in the cache yet, and letting the snapshot go then would lose the claim's data.
func (s *Site) restoringFrom(ctx context.Context, vs *snapshotv1.VolumeSnapshot) (bool, error) {
	claims := &corev1.PersistentVolumeClaimList{}
	if err := s.mgr.GetAPIReader().List(ctx, claims, client.InNamespace(vs.Namespace)); err != nil {
		return false, err
	}
	for i := range claims.Items {
		pvc := &claims.Items[i]
		from, ok := dataSource(pvc)
		if ok && pvc.DeletionTimestamp == nil && pvc.Status.Phase != corev1.ClaimBound &&
			from.group == snapshotv1.GroupName && from.kind == "VolumeSnapshot" && from.name == vs.Name {
			return true, nil
		}
	}
	return false, nil
}
