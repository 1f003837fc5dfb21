package fleet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/providers/kubeconfig"

	clusterinventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// registered says whether the registration's hub object still registers the member.
func registered(ctx context.Context, hub client.Reader, reg fleetv1alpha1.Registration) (bool, error) {
	key := types.NamespacedName{Namespace: reg.Namespace, Name: reg.Name}
	var obj client.Object
	switch reg.Source {
	case fleetv1alpha1.FromKubeconfigSecret:
		obj = &corev1.Secret{}
	case fleetv1alpha1.FromClusterProfile:
		obj = &clusterinventoryv1alpha1.ClusterProfile{}
	default:
		return false, nil
	}
	err := hub.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return false, nil
	}
	if s, ok := obj.(*corev1.Secret); ok && s.Labels[kubeconfig.DefaultKubeconfigSecretLabel] != "true" {
		return false, nil
	}
	return true, nil
}

// MembershipReconciler deletes the summary of a member whose registration was deleted. A
// member that is only unreachable keeps its summary. A cluster-scoped summary cannot have
// its namespaced registration as owner, so the garbage collector cannot do this.
type MembershipReconciler struct {
	Hub client.Client
}

// SetupWithManager watches the summaries and the registrations on the hub.
func (r *MembershipReconciler) SetupWithManager(mgr manager.Manager) error {
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	return ctrl.NewControllerManagedBy(mgr).Named("fleet-membership").
		For(&fleetv1alpha1.NodewrightClusterSummary{}).
		Watches(&corev1.Secret{}, byName).
		Watches(&clusterinventoryv1alpha1.ClusterProfile{}, byName).
		Complete(r)
}

// Reconcile deletes the summary when its registration is gone.
func (r *MembershipReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var s fleetv1alpha1.NodewrightClusterSummary
	if err := r.Hub.Get(ctx, req.NamespacedName, &s); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	exists, err := registered(ctx, r.Hub, s.Spec.Registration)
	if err != nil || exists {
		return reconcile.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("The member's registration is gone; deleting its summary", "registration", s.Spec.Registration)
	return reconcile.Result{}, client.IgnoreNotFound(r.Hub.Delete(ctx, &s, client.Preconditions{UID: &s.UID}))
}
