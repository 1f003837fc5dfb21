package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	clusterinventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"
)

// SecretReaderProvider is the access provider name of the Secret Reader plugin of the
// cluster-inventory-api (cmd/secretreader-plugin): the bearer token is the "token" key of the
// Secret <consumer namespace>/<ClusterProfile name>. The hub reads it in process instead of
// running the plugin, and so notices its rotation through a watch.
const SecretReaderProvider = "secretreader"

// ClusterProfileOptions configure the ClusterProfile provider.
type ClusterProfileOptions struct {
	// Namespace holds the ClusterProfiles (the cluster inventory); "" reads every namespace.
	Namespace string
	// ConsumerNamespace is the hub's own namespace, where the Secret Reader's Secrets are.
	ConsumerNamespace string
	// Credentials are the exec credential plugins the hub may run for the other access
	// providers (cluster-inventory-api's provider file, --clusterprofile-provider-file).
	Credentials *credentials.CredentialsProvider
	// ClusterOptions configure each member's cluster (its cache and scheme).
	ClusterOptions []cluster.Option
}

// ClusterProfileProvider engages a member for each ClusterProfile (KEP-4322), so that the
// clusters any fleet manager registers appear on the hub without new code.
//
// KEP-4322 splits access in two: the ClusterProfile's status.accessProviders (and the
// deprecated credentialProviders) say where the cluster is (server, CA) per access provider
// name; the consumer, here the hub, says which credential plugin serves each name. The hub
// supports the Secret Reader ("secretreader", read in process) and any exec plugin of
// Credentials. A ClusterProfile whose access providers none of these serve is not engaged.
type ClusterProfileProvider struct {
	opts ClusterProfileOptions
	mgr  mcmanager.Manager

	mu       sync.Mutex
	clusters map[string]*engaged // by "<namespace>/<name>"
	indexers []indexer
}

type engaged struct {
	cluster cluster.Cluster
	cancel  context.CancelFunc
	hash    string
}

type indexer struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

var _ multicluster.Provider = &ClusterProfileProvider{}

// NewClusterProfileProvider returns a provider; SetupWithManager starts it.
func NewClusterProfileProvider(opts ClusterProfileOptions) *ClusterProfileProvider {
	return &ClusterProfileProvider{opts: opts, clusters: map[string]*engaged{}}
}

// SetupWithManager watches the ClusterProfiles and the Secret Reader's Secrets on the hub.
func (p *ClusterProfileProvider) SetupWithManager(mgr mcmanager.Manager) error {
	p.mgr = mgr
	local := mgr.GetLocalManager()
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return p.opts.Namespace == "" || o.GetNamespace() == p.opts.Namespace
	})
	tokenSecret := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == p.opts.ConsumerNamespace
	})
	return ctrl.NewControllerManagedBy(local).Named("clusterprofile-provider").
		For(&clusterinventoryv1alpha1.ClusterProfile{}, builder.WithPredicates(inNamespace)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(p.profilesNamed), builder.WithPredicates(tokenSecret)).
		Complete(p)
}

// profilesNamed maps a Secret Reader Secret to the ClusterProfiles of its name.
func (p *ClusterProfileProvider) profilesNamed(ctx context.Context, secret client.Object) []reconcile.Request {
	var list clusterinventoryv1alpha1.ClusterProfileList
	if err := p.mgr.GetLocalManager().GetClient().List(ctx, &list, client.InNamespace(p.opts.Namespace)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, cp := range list.Items {
		if cp.Name == secret.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&cp)})
		}
	}
	return out
}

// Reconcile engages, re-engages (new address or credentials) or removes one member.
func (p *ClusterProfileProvider) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.Namespace + "/" + req.Name
	var cp clusterinventoryv1alpha1.ClusterProfile
	err := p.mgr.GetLocalManager().GetClient().Get(ctx, req.NamespacedName, &cp)
	if apierrors.IsNotFound(err) || (err == nil && !cp.DeletionTimestamp.IsZero()) {
		p.remove(key)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	cfg, err := p.restConfig(ctx, &cp)
	if err != nil {
		// No usable access yet (a Secret not written yet, say): the watch brings it back.
		ctrl.LoggerFrom(ctx).Info("The ClusterProfile gives no access the hub can use; not engaged", "reason", err.Error())
		p.remove(key)
		return reconcile.Result{}, nil
	}
	hash, err := configHash(cfg)
	if err != nil {
		return reconcile.Result{}, err
	}
	p.mu.Lock()
	current := p.clusters[key]
	p.mu.Unlock()
	if current != nil && current.hash == hash {
		return reconcile.Result{}, nil
	}
	p.remove(key)
	return reconcile.Result{}, p.engage(ctx, key, cfg, hash)
}

// restConfig builds the member's access from the profile's access providers.
func (p *ClusterProfileProvider) restConfig(ctx context.Context, cp *clusterinventoryv1alpha1.ClusterProfile) (*rest.Config, error) {
	access := map[string]clusterinventoryv1alpha1.AccessProvider{}
	for _, a := range cp.Status.CredentialProviders {
		access[a.Name] = a
	}
	for _, a := range cp.Status.AccessProviders { // preferred over the deprecated field
		access[a.Name] = a
	}
	if a, ok := access[SecretReaderProvider]; ok {
		var secret corev1.Secret
		key := types.NamespacedName{Namespace: p.opts.ConsumerNamespace, Name: cp.Name}
		if err := p.mgr.GetLocalManager().GetClient().Get(ctx, key, &secret); err != nil {
			return nil, fmt.Errorf("secretreader: Secret %s: %w", key, err)
		}
		token := secret.Data["token"]
		if len(token) == 0 {
			return nil, fmt.Errorf("secretreader: Secret %s has no token", key)
		}
		return &rest.Config{Host: a.Cluster.Server, BearerToken: string(token),
			TLSClientConfig: rest.TLSClientConfig{CAData: a.Cluster.CertificateAuthorityData, ServerName: a.Cluster.TLSServerName, Insecure: a.Cluster.InsecureSkipTLSVerify}}, nil
	}
	if p.opts.Credentials != nil {
		return p.opts.Credentials.BuildConfigFromCP(cp)
	}
	return nil, fmt.Errorf("no access provider the hub serves (it serves %q and the exec plugins of its provider file)", SecretReaderProvider)
}

func configHash(cfg *rest.Config) (string, error) {
	data, err := json.Marshal(struct {
		Host, Token, ServerName string
		CA                      []byte
		Insecure                bool
		Exec                    any
	}{cfg.Host, cfg.BearerToken, cfg.ServerName, cfg.CAData, cfg.Insecure, cfg.ExecProvider})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// engage starts the member's cluster and engages it. It does not wait for the caches: a
// member that does not answer yet is engaged all the same, and shown unreachable.
func (p *ClusterProfileProvider) engage(ctx context.Context, key string, cfg *rest.Config, hash string) error {
	cl, err := cluster.New(cfg, p.opts.ClusterOptions...)
	if err != nil {
		return fmt.Errorf("member %s: %w", key, err)
	}
	p.mu.Lock()
	for _, ix := range p.indexers {
		if err := cl.GetFieldIndexer().IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			p.mu.Unlock()
			return err
		}
	}
	p.mu.Unlock()
	// The member lives as long as the provider's controller, not this one reconcile.
	clusterCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		if err := cl.Start(clusterCtx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "The member's cluster stopped", "member", key)
		}
	}()
	if err := (prefixed{p.mgr, clusterProfilePrefix}).Engage(clusterCtx, key, cl); err != nil {
		cancel()
		return err
	}
	p.mu.Lock()
	p.clusters[key] = &engaged{cluster: cl, cancel: cancel, hash: hash}
	p.mu.Unlock()
	return nil
}

func (p *ClusterProfileProvider) remove(key string) {
	p.mu.Lock()
	e := p.clusters[key]
	delete(p.clusters, key)
	p.mu.Unlock()
	if e != nil {
		e.cancel()
	}
}

// Stop disengages every member.
func (p *ClusterProfileProvider) Stop() {
	p.mu.Lock()
	keys := make([]string, 0, len(p.clusters))
	for k := range p.clusters {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	for _, k := range keys {
		p.remove(k)
	}
}

// Get returns the engaged member "<namespace>/<name>".
func (p *ClusterProfileProvider) Get(_ context.Context, name string) (cluster.Cluster, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clusters[name]; ok {
		return e.cluster, nil
	}
	return nil, multicluster.ErrClusterNotFound
}

// IndexField indexes the field on every member, now and later.
func (p *ClusterProfileProvider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.indexers = append(p.indexers, indexer{obj, field, extract})
	for _, e := range p.clusters {
		if err := e.cluster.GetFieldIndexer().IndexField(ctx, obj, field, extract); err != nil {
			return err
		}
	}
	return nil
}
