package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"

	clusterinventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Options configure the hub.
type Options struct {
	// Namespace is the hub's own namespace: the kubeconfig Secrets (labelled
	// sigs.k8s.io/multicluster-runtime-kubeconfig=true, key "kubeconfig") and the Secret
	// Reader's token Secrets are there.
	Namespace string
	// ClusterProfileNamespace holds the ClusterProfiles (the inventory); required: whoever
	// may write ClusterProfiles there registers members.
	ClusterProfileNamespace string
	// Credentials are the exec plugins for ClusterProfile access providers; may be nil.
	Credentials *credentials.CredentialsProvider
	// Access is what the hub accepts in a member's access, from either source.
	Access AccessPolicy
	// MemberNamespace is the Nodewright namespace on the members.
	MemberNamespace string
	Health          HealthOptions
	// Witness says whose countersignature the recorded audit checkpoints need.
	Witness WitnessOptions
	// Manager are the hub manager's options; Scheme and the Secrets' cache are set here.
	Manager manager.Options
}

// Scheme has what the hub reads and writes, on the hub and on the members.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, nodewrightv1alpha1.AddToScheme, fleetv1alpha1.AddToScheme, clusterinventoryv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// memberClusterOptions are each member's cluster's: the hub's scheme. The hub starts no
// member cache: its own watches (objectWatcher, workflowReader, bootReader) keep what it
// reads of a member.
func memberClusterOptions(scheme *runtime.Scheme) []cluster.Option {
	return []cluster.Option{func(o *cluster.Options) { o.Scheme = scheme }}
}

// New builds the hub: a multicluster-runtime manager whose members come from the kubeconfig
// Secrets and the ClusterProfiles, with the summary, health and membership controllers.
func New(ctx context.Context, cfg *rest.Config, opts Options) (mcmanager.Manager, error) {
	if opts.MemberNamespace == "" {
		opts.MemberNamespace = "nodewright-system"
	}
	switch {
	case opts.Namespace == "":
		return nil, fmt.Errorf("the hub's namespace (--namespace) is required")
	case opts.ClusterProfileNamespace == "":
		// Every namespace would let anyone who may create a ClusterProfile anywhere register
		// a member, and have the hub send it a credential.
		return nil, fmt.Errorf("the ClusterProfiles' namespace (--clusterprofile-namespace) is required: the hub reads ClusterProfiles in that one namespace only")
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mopts := opts.Manager
	mopts.Scheme = scheme
	mopts.Cache.ByObject = map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
		&clusterinventoryv1alpha1.ClusterProfile{}: {Namespaces: map[string]cache.Config{opts.ClusterProfileNamespace: {}}},
	}
	wake := make(chan event.TypedGenericEvent[string], 64)
	registry := newMembers(memberClusterOptions(scheme), opts.Health, wake)
	mgr, err := mcmanager.New(cfg, registry, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating the hub manager: %w", err)
	}
	registry.mgr = mgr
	local := mgr.GetLocalManager()
	if err := (&kubeconfigSecrets{members: registry, namespace: opts.Namespace, policy: opts.Access}).SetupWithManager(local); err != nil {
		return nil, err
	}
	profiles := &clusterProfiles{members: registry, opts: ClusterProfileOptions{Namespace: opts.ClusterProfileNamespace, ConsumerNamespace: opts.Namespace,
		Credentials: opts.Credentials, Policy: opts.Access}}
	if err := profiles.SetupWithManager(local); err != nil {
		return nil, err
	}
	if err := local.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		registry.stop()
		return nil
	})); err != nil {
		return nil, err
	}
	// The probes: alive while it serves; ready once its cache of the hub (the registrations,
	// the inventory, the summaries) has synced.
	var synced atomic.Bool
	if err := local.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if local.GetCache().WaitForCacheSync(ctx) {
			synced.Store(true)
		}
		<-ctx.Done()
		return nil
	})); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("hub-cache", func(*http.Request) error {
		if !synced.Load() {
			return errors.New("the hub's cache has not synced yet")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	objects := newObjectWatcher(opts.MemberNamespace, wake)
	if err := mgr.Add(objects); err != nil {
		return nil, err
	}
	workflows := newWorkflowReader(wake)
	if err := mgr.Add(workflows); err != nil {
		return nil, err
	}
	boots := newBootReader(wake)
	if err := mgr.Add(boots); err != nil {
		return nil, err
	}
	checker := NewChecker(opts.Health, objects, boots)
	if err := mgr.Add(checker); err != nil {
		return nil, err
	}
	summaries := &SummaryReconciler{Objects: objects, Boots: boots, Manager: mgr, Hub: local.GetClient(), Checker: checker,
		KubeconfigNamespace: opts.Namespace, MemberNamespace: opts.MemberNamespace, Witness: opts.Witness,
		InventoryNamespace: opts.ClusterProfileNamespace, Members: registry, Workflows: workflows, Wake: wake}
	if err := summaries.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	membership := &MembershipReconciler{Hub: local.GetClient(), Namespaces: namespaces{Kubeconfig: opts.Namespace, Inventory: opts.ClusterProfileNamespace}}
	if err := membership.SetupWithManager(local); err != nil {
		return nil, err
	}
	return mgr, nil
}
