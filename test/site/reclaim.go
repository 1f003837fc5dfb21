package site

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The reclaimer plays the PV controller's reclaim and the pv-protection controller for the
// volumes the site provisioned.

func (s *Site) setupReclaimer() error {
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-reclaimer").
		For(&corev1.PersistentVolume{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return s.ownsVolume(o.(*corev1.PersistentVolume))
		}))).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if name := o.(*corev1.PersistentVolumeClaim).Spec.VolumeName; name != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
			}
			return nil
		})).
		Complete(reconcile.Func(s.reconcileVolume))
}

// ownsVolume says whether the site provisioned pv for a claim in its namespaces.
func (s *Site) ownsVolume(pv *corev1.PersistentVolume) bool {
	return pv.Spec.CSI != nil && s.serves(pv.Spec.CSI.Driver) && pv.Annotations[annProvisionedBy] == pv.Spec.CSI.Driver &&
		pv.Spec.ClaimRef != nil && s.inScope(pv.Spec.ClaimRef.Namespace)
}

func (s *Site) reconcileVolume(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pv := &corev1.PersistentVolume{}
	if err := s.client.Get(ctx, req.NamespacedName, pv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !s.ownsVolume(pv) {
		return ctrl.Result{}, nil
	}
	released, err := s.released(ctx, pv)
	if !released || err != nil {
		return ctrl.Result{}, err
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		if pv.Status.Phase == corev1.VolumeReleased {
			return ctrl.Result{}, nil
		}
		before := pv.DeepCopy()
		pv.Status.Phase = corev1.VolumeReleased
		return ctrl.Result{}, ignoreGone(s.client.Status().Patch(ctx, pv, client.MergeFrom(before)))
	}
	// The data goes first: a PV that is gone must never leave its file behind.
	if err := removeFile(s.files.volume(pv.Spec.CSI.VolumeHandle)); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting the backing file of %s: %w", pv.Name, err)
	}
	if controllerutil.ContainsFinalizer(pv, pvProtection) {
		before := pv.DeepCopy()
		controllerutil.RemoveFinalizer(pv, pvProtection)
		if err := ignoreGone(s.client.Patch(ctx, pv, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))); err != nil {
			return ctrl.Result{}, fmt.Errorf("releasing PersistentVolume %s: %w", pv.Name, err)
		}
	}
	if pv.DeletionTimestamp == nil {
		err := s.client.Delete(ctx, pv, client.Preconditions{UID: &pv.UID})
		if err := ignoreGone(err); err != nil && !apierrors.IsConflict(err) {
			return ctrl.Result{}, fmt.Errorf("deleting PersistentVolume %s: %w", pv.Name, err)
		}
	}
	return ctrl.Result{}, nil
}

// released says whether the claim pv was made for is gone.
func (s *Site) released(ctx context.Context, pv *corev1.PersistentVolume) (bool, error) {
	ref := pv.Spec.ClaimRef
	return s.gone(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, ref.UID, &corev1.PersistentVolumeClaim{})
}

// gone says whether the object key named, with that UID, no longer exists. The cache may lag
// behind an object that was just created, so one it does not hold is looked for in the API
// server before any data is deleted.
func (s *Site) gone(ctx context.Context, key types.NamespacedName, uid types.UID, obj client.Object) (bool, error) {
	err := s.client.Get(ctx, key, obj)
	if err == nil && obj.GetUID() == uid {
		return false, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	err = s.mgr.GetAPIReader().Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return obj.GetUID() != uid, nil
}
