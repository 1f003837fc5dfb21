package site

import (
	"context"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The contents controller plays the CSI snapshotter's side of deletion: a content that goes
// away with deletionPolicy Delete takes its file with it, and a content whose snapshot is gone
// is deleted under that policy.

func (s *Site) setupSnapshotContents() error {
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-snapshotcontents").
		For(&snapshotv1.VolumeSnapshotContent{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return s.ownsContent(o.(*snapshotv1.VolumeSnapshotContent))
		}))).
		Watches(&snapshotv1.VolumeSnapshot{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: contentName(o.(*snapshotv1.VolumeSnapshot))}}}
		})).
		Complete(reconcile.Func(s.reconcileContent))
}

// ownsContent says whether the site made the content, for a snapshot in its namespaces.
func (s *Site) ownsContent(content *snapshotv1.VolumeSnapshotContent) bool {
	ref := content.Spec.VolumeSnapshotRef
	return s.serves(content.Spec.Driver) && s.inScope(ref.Namespace) && content.Name == "snapcontent-"+string(ref.UID)
}

func (s *Site) reconcileContent(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	content := &snapshotv1.VolumeSnapshotContent{}
	if err := s.client.Get(ctx, req.NamespacedName, content); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.ownsContent(content) {
		return ctrl.Result{}, nil
	}
	if content.DeletionTimestamp != nil {
		if !controllerutil.ContainsFinalizer(content, contentBoundProtection) {
			return ctrl.Result{}, nil
		}
		if content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete {
			handle := ptr.Deref(content.Status, snapshotv1.VolumeSnapshotContentStatus{}).SnapshotHandle
			if err := removeFile(s.files.snapshot(ptr.Deref(handle, content.Name))); err != nil {
				return ctrl.Result{}, fmt.Errorf("deleting the file of VolumeSnapshotContent %s: %w", content.Name, err)
			}
		}
		before := content.DeepCopy()
		controllerutil.RemoveFinalizer(content, contentBoundProtection)
		return ctrl.Result{}, ignoreGone(s.client.Patch(ctx, content, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
	}
	if content.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentDelete {
		return ctrl.Result{}, nil
	}
	gone, err := s.snapshotGone(ctx, content)
	if !gone || err != nil {
		return ctrl.Result{}, err
	}
	if err := ignoreGone(s.client.Delete(ctx, content, client.Preconditions{UID: &content.UID})); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting VolumeSnapshotContent %s: %w", content.Name, err)
	}
	return ctrl.Result{}, nil
}

// snapshotGone says whether the snapshot the content was made for no longer exists.
func (s *Site) snapshotGone(ctx context.Context, content *snapshotv1.VolumeSnapshotContent) (bool, error) {
	ref := content.Spec.VolumeSnapshotRef
	return s.gone(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, ref.UID, &snapshotv1.VolumeSnapshot{})
}
