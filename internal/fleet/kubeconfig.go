package fleet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/multicluster-runtime/providers/kubeconfig"
)

// The kubeconfig Secrets: in the hub's namespace, labelled KubeconfigLabel=true, the
// kubeconfig under KubeconfigKey (multicluster-runtime's kubeconfig provider's conventions).
const (
	KubeconfigLabel = kubeconfig.DefaultKubeconfigSecretLabel
	KubeconfigKey   = kubeconfig.DefaultKubeconfigSecretKey
)

// kubeconfigSecrets engages a member for each kubeconfig Secret. It replaces
// multicluster-runtime's kubeconfig provider, which builds the member's access with
// clientcmd from the kubeconfig as it is: an exec plugin then runs in the hub, a tokenFile or
// a certificate file is read from the hub's file system, a proxy-url is used. Here only what
// kubeconfigAccess accepts is engaged; anything else is refused, and the member's summary says
// why.
type kubeconfigSecrets struct {
	members   *members
	namespace string
	policy    AccessPolicy
	hub       client.Reader
}

func (k *kubeconfigSecrets) SetupWithManager(mgr manager.Manager) error {
	k.hub = mgr.GetClient()
	// Every Secret of the namespace, labelled or not: a Secret whose label is removed is no
	// longer a registration, and its member must go.
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == k.namespace })
	return ctrl.NewControllerManagedBy(mgr).Named("kubeconfig-members").
		// Engaging a member builds its client: thousands at start-up, several at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: registrationWorkers}).
		For(&corev1.Secret{}, builder.WithPredicates(inNamespace)).
		Complete(k)
}

// Reconcile engages, re-engages (a changed kubeconfig), refuses or forgets one member.
func (k *kubeconfigSecrets) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name := kubeconfigPrefix + req.Name
	var secret corev1.Secret
	err := k.hub.Get(ctx, req.NamespacedName, &secret)
	switch {
	case apierrors.IsNotFound(err):
		k.members.forget(name)
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, err
	case !secret.DeletionTimestamp.IsZero() || secret.Labels[KubeconfigLabel] != "true":
		k.members.forget(name)
		return reconcile.Result{}, nil
	}
	data := secret.Data[KubeconfigKey]
	if len(data) == 0 {
		k.members.refuse(ctx, name, refusalOf(refuse("data."+KubeconfigKey, "is empty")))
		return reconcile.Result{}, nil
	}
	cfg, err := kubeconfigAccess(data, k.policy)
	if err != nil {
		k.members.refuse(ctx, name, refusalOf(err))
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, k.members.engage(ctx, name, cfg)
}
