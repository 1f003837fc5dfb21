package fleet

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterinventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"
)

// SecretReaderProvider is the access provider name of the Secret Reader (cluster-inventory-api's
// cmd/secretreader-plugin), which the hub serves in process: it notices a rotated token
// through a watch, and it keys the token by the ClusterProfile's namespace and name.
const SecretReaderProvider = "secretreader"

// The Secret Reader's Secret: in the hub's namespace, named SecretReaderSecretName.
const (
	// SecretReaderTokenKey holds the bearer token.
	SecretReaderTokenKey = "token"
	// SecretReaderServerKey holds the server the token is for: the hub sends the token only
	// to a ClusterProfile whose server is this one, so that whoever writes the inventory
	// cannot point the token elsewhere.
	SecretReaderServerKey = "server"
	// SecretReaderCAKey optionally holds the server's CA (PEM): the hub then trusts it rather
	// than the ClusterProfile's.
	SecretReaderCAKey = "ca.crt"
)

// SecretReaderSecretName is the name of the Secret Reader's Secret of the ClusterProfile
// namespace/name, in the hub's namespace: "<namespace>.<name>". A namespace holds no dot, so
// two profiles never share one. (Upstream's plugin reads <its namespace>/<clusterName>, the
// clusterName taken from the profile's own exec extension: whoever writes the profile picks
// the Secret.)
func SecretReaderSecretName(namespace, name string) string { return namespace + "." + name }

// ClusterProfileOptions configure the ClusterProfiles' members.
type ClusterProfileOptions struct {
	// Namespace holds the ClusterProfiles (the cluster inventory); required.
	Namespace string
	// ConsumerNamespace is the hub's own namespace, where the Secret Reader's Secrets are.
	ConsumerNamespace string
	// Credentials are the exec credential plugins the hub may run for the other access
	// providers (cluster-inventory-api's provider file, --clusterprofile-provider-file).
	Credentials *credentials.CredentialsProvider
	Policy      AccessPolicy
}

// clusterProfiles engages a member for each ClusterProfile (KEP-4322) of the inventory
// namespace, so that the clusters any fleet manager registers appear on the hub without new
// code.
//
// KEP-4322 splits access in two: the ClusterProfile's status.accessProviders (and the
// deprecated credentialProviders) say where the cluster is (server, CA) per access provider
// name; the consumer, here the hub, says which credential plugin serves each name. The hub
// serves the Secret Reader ("secretreader", in process) and any exec plugin of Credentials.
// Whatever the profile says is checked as a kubeconfig is (checkCluster, checkConfig).
type clusterProfiles struct {
	opts    ClusterProfileOptions
	members *members
	hub     client.Reader
}

func (p *clusterProfiles) SetupWithManager(mgr manager.Manager) error {
	p.hub = mgr.GetClient()
	inventory := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == p.opts.Namespace })
	tokenSecret := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == p.opts.ConsumerNamespace })
	return ctrl.NewControllerManagedBy(mgr).Named("clusterprofile-members").
		// Engaging a member builds its client: thousands at start-up, several at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: registrationWorkers}).
		For(&clusterinventoryv1alpha1.ClusterProfile{}, builder.WithPredicates(inventory)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(p.profileOf), builder.WithPredicates(tokenSecret)).
		Complete(p)
}

// profileOf maps a Secret Reader Secret to its ClusterProfile.
func (p *clusterProfiles) profileOf(_ context.Context, secret client.Object) []reconcile.Request {
	ns, name, ok := strings.Cut(secret.GetName(), ".")
	if !ok || ns != p.opts.Namespace {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// Reconcile engages, re-engages (new address or credentials), refuses or forgets one member.
func (p *clusterProfiles) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	name := clusterProfilePrefix + req.Namespace + "/" + req.Name
	var cp clusterinventoryv1alpha1.ClusterProfile
	err := p.hub.Get(ctx, req.NamespacedName, &cp)
	if apierrors.IsNotFound(err) || (err == nil && !cp.DeletionTimestamp.IsZero()) {
		p.members.forget(name)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	cfg, err := p.restConfig(ctx, &cp)
	if err != nil {
		// Refused, or no usable access yet (a Secret not written yet, say): the summary says
		// which, and the watches bring the profile back when either changes.
		p.members.refuse(ctx, name, refusalOf(err))
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, p.members.engage(ctx, name, cfg)
}

// restConfig builds the member's access from the profile's access providers, the Secret
// Reader first.
func (p *clusterProfiles) restConfig(ctx context.Context, cp *clusterinventoryv1alpha1.ClusterProfile) (*rest.Config, error) {
	access := map[string]clusterinventoryv1alpha1.AccessProvider{}
	field := map[string]string{}
	for _, a := range cp.Status.CredentialProviders {
		access[a.Name], field[a.Name] = a, fmt.Sprintf("status.credentialProviders[%q].cluster.", a.Name)
	}
	for _, a := range cp.Status.AccessProviders { // preferred over the deprecated field
		access[a.Name], field[a.Name] = a, fmt.Sprintf("status.accessProviders[%q].cluster.", a.Name)
	}
	if a, ok := access[SecretReaderProvider]; ok {
		return p.secretReader(ctx, cp, a, field[a.Name])
	}
	if p.opts.Credentials != nil {
		// The exec plugins are the hub operator's (the provider file), run for the first of
		// its providers that the profile names, as BuildConfigFromCP chooses.
		for _, provider := range p.opts.Credentials.Providers {
			if a, ok := access[provider.Name]; ok {
				if err := checkCluster(field[a.Name], a.Cluster, p.opts.Policy); err != nil {
					return nil, err
				}
				cfg, err := p.opts.Credentials.BuildConfigFromCP(cp)
				if err != nil {
					return nil, err
				}
				cfg = memberConfig(cfg) // drops the proxy function BuildConfigFromCP sets
				if err := checkConfig(cfg, p.opts.Policy, true); err != nil {
					return nil, err
				}
				return cfg, nil
			}
		}
	}
	return nil, fmt.Errorf("no access provider the hub serves (it serves %q and the exec plugins of its provider file)", SecretReaderProvider)
}

// secretReader is the Secret Reader's access: the token of the Secret keyed by the profile's
// namespace and name, sent only to the server that Secret names.
func (p *clusterProfiles) secretReader(ctx context.Context, cp *clusterinventoryv1alpha1.ClusterProfile, a clusterinventoryv1alpha1.AccessProvider, field string) (*rest.Config, error) {
	if err := checkCluster(field, a.Cluster, p.opts.Policy); err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: p.opts.ConsumerNamespace, Name: SecretReaderSecretName(cp.Namespace, cp.Name)}
	if len(key.Name) > validation.DNS1123SubdomainMaxLength {
		return nil, refuse("metadata.name", "the Secret Reader's Secret would be named %s, longer than %d characters: shorten the namespace or name", key.Name, validation.DNS1123SubdomainMaxLength)
	}
	var secret corev1.Secret
	if err := p.hub.Get(ctx, key, &secret); err != nil {
		return nil, fmt.Errorf("the Secret Reader's Secret %s: %w", key, err)
	}
	token, server := string(secret.Data[SecretReaderTokenKey]), string(secret.Data[SecretReaderServerKey])
	switch {
	case token == "":
		return nil, fmt.Errorf("the Secret Reader's Secret %s has no %s", key, SecretReaderTokenKey)
	case server == "":
		return nil, fmt.Errorf("the Secret Reader's Secret %s names no %s: the hub sends a token only to the server its Secret names", key, SecretReaderServerKey)
	case trimURL(server) != trimURL(a.Cluster.Server):
		return nil, refuse(field+"server", "%q is not the server the Secret Reader's Secret %s names for its token (%q)", a.Cluster.Server, key, server)
	}
	// Whom the token is sent to is the Secret's to say, not the inventory's: a profile's own
	// CA (or TLS server name) would let whoever writes the inventory vouch for a server of its
	// own at the member's address. The Secret's ca.crt is trusted, else the system's roots;
	// the profile's insecure-skip-tls-verify only where the hub allows it (checkCluster).
	tls := rest.TLSClientConfig{Insecure: a.Cluster.InsecureSkipTLSVerify}
	if pinned := secret.Data[SecretReaderCAKey]; len(pinned) > 0 {
		tls = rest.TLSClientConfig{CAData: pinned, ServerName: a.Cluster.TLSServerName}
	}
	cfg := &rest.Config{Host: a.Cluster.Server, BearerToken: token, TLSClientConfig: tls}
	if err := checkConfig(cfg, p.opts.Policy, false); err != nil {
		return nil, err
	}
	return cfg, nil
}
