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

	clusterinventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// namespaces are where the hub reads registrations: the kubeconfig Secrets (the hub's own
// namespace) and the ClusterProfiles (the inventory).
type namespaces struct {
	Kubeconfig, Inventory string
}

// registered says whether the registration's hub object still registers the member. One in
// a namespace the hub does not read (it read another before a restart) does not.
func registered(ctx context.Context, hub client.Reader, ns namespaces, reg fleetv1alpha1.Registration) (bool, error) {
	key := types.NamespacedName{Namespace: reg.Namespace, Name: reg.Name}
	var obj client.Object
	switch {
	case reg.Source == fleetv1alpha1.FromKubeconfigSecret && reg.Namespace == ns.Kubeconfig:
		obj = &corev1.Secret{}
	case reg.Source == fleetv1alpha1.FromClusterProfile && reg.Namespace == ns.Inventory:
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
	if s, ok := obj.(*corev1.Secret); ok && s.Labels[KubeconfigLabel] != "true" {
		return false, nil
	}
	return true, nil
}

// MembershipReconciler deletes the summary of a member whose registration was deleted. A
// member that is only unreachable keeps its summary. A cluster-scoped summary cannot have
// its namespaced registration as owner, so the garbage collector cannot do this.
type MembershipReconciler struct {
	Hub        client.Client
	Namespaces namespaces
}

// SetupWithManager watches the summaries and the registrations on the hub.
func (r *MembershipReconciler) SetupWithManager(mgr manager.Manager) error {
	summaryOf := func(source fleetv1alpha1.RegistrationSource) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			reg := fleetv1alpha1.Registration{Source: source, Namespace: o.GetNamespace(), Name: o.GetName()}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: SummaryName(reg)}}}
		})
	}
	return ctrl.NewControllerManagedBy(mgr).Named("fleet-membership").
		For(&fleetv1alpha1.NodewrightClusterSummary{}).
		Watches(&corev1.Secret{}, summaryOf(fleetv1alpha1.FromKubeconfigSecret)).
		Watches(&clusterinventoryv1alpha1.ClusterProfile{}, summaryOf(fleetv1alpha1.FromClusterProfile)).
		Complete(r)
}

// Reconcile deletes the summary when its registration is gone, or when it is not named as
// the hub names its registration's.
func (r *MembershipReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var s fleetv1alpha1.NodewrightClusterSummary
	if err := r.Hub.Get(ctx, req.NamespacedName, &s); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	exists, err := registered(ctx, r.Hub, r.Namespaces, s.Spec.Registration)
	switch {
	case err != nil:
		return reconcile.Result{}, err
	case !exists:
		ctrl.LoggerFrom(ctx).Info("The member's registration is gone; deleting its summary", "registration", s.Spec.Registration)
	case s.Name != SummaryName(s.Spec.Registration):
		// Written before summaries were named by their source: the member's is written anew.
		ctrl.LoggerFrom(ctx).Info("The summary's name is not its registration's; deleting it", "registration", s.Spec.Registration)
	default:
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, client.IgnoreNotFound(r.Hub.Delete(ctx, &s, client.Preconditions{UID: &s.UID}))
}
