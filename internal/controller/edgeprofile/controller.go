// Package edgeprofile is the EdgeProfile controller: it shows each profile's verdict from
// profiletrust in its SignatureVerified condition.
package edgeprofile

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/profiletrust"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=edgeprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=edgeprofiles/status,verbs=get;patch;update

// Reconciler writes each EdgeProfile's SignatureVerified condition: whether its signature is
// one of its spec by a trusted key, checked again whenever the profile or the keys change.
type Reconciler struct {
	Client client.Client
	Trust  profiletrust.Trust
}

// SetupWithManager registers the controller; a change of the trusted keys re-verifies every
// profile.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	isTrust := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == r.Trust.ConfigMap.Namespace && o.GetName() == r.Trust.ConfigMap.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("edgeprofile").
		For(&nwv1.EdgeProfile{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.everyProfile), builder.WithPredicates(isTrust)).
		Complete(r)
}

func (r *Reconciler) everyProfile(ctx context.Context, _ client.Object) []reconcile.Request {
	var list nwv1.EdgeProfileList
	if err := r.Client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the EdgeProfiles to verify them again")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return reqs
}

// Reconcile verifies the profile and writes the verdict when it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &nwv1.EdgeProfile{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := p.DeepCopy()
	active, err := r.Trust.Verify(ctx, p)
	cond := metav1.Condition{Type: nwv1.ConditionSignatureVerified, ObservedGeneration: p.Generation, Reason: profiletrust.Reason(err)}
	if err != nil {
		cond.Status, cond.Message = metav1.ConditionFalse, err.Error()
	} else {
		cond.Status = metav1.ConditionTrue
		cond.Message = fmt.Sprintf("signed by trusted key %s; spec digest %s", active.KeyID, active.Digest)
	}
	meta.SetStatusCondition(&p.Status.Conditions, cond)
	p.Status.ObservedGeneration = p.Generation
	if equalStatus(before, p) {
		return ctrl.Result{}, nil
	}
	if err := r.Client.Status().Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the EdgeProfile status: %w", err)
	}
	return ctrl.Result{}, nil
}

func equalStatus(a, b *nwv1.EdgeProfile) bool {
	if a.Status.ObservedGeneration != b.Status.ObservedGeneration || len(a.Status.Conditions) != len(b.Status.Conditions) {
		return false
	}
	for i := range a.Status.Conditions {
		x, y := a.Status.Conditions[i], b.Status.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}
