package fleet

import (
	"context"
	"errors"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// A member's name on the hub is its source's prefix and its name there: "kubeconfig/<secret>"
// or "clusterprofile/<namespace>/<name>". Its summary is named after the last part.
const (
	kubeconfigPrefix     = "kubeconfig/"
	clusterProfilePrefix = "clusterprofile/"
)

// Providers routes a member's name to the provider that engaged it. multicluster-runtime's
// providers/multi would do this, but its kubeconfig provider engages through the manager
// itself (SetupWithManager) rather than the Aware it is started with, so its clusters'
// names never get multi's prefix; engaging through prefixed (below) does the same for both.
type Providers struct {
	Kubeconfig     multicluster.Provider
	ClusterProfile multicluster.Provider
}

var _ multicluster.Provider = &Providers{}

// Get returns the engaged member cluster.
func (p *Providers) Get(ctx context.Context, name string) (cluster.Cluster, error) {
	switch {
	case strings.HasPrefix(name, kubeconfigPrefix) && p.Kubeconfig != nil:
		return p.Kubeconfig.Get(ctx, strings.TrimPrefix(name, kubeconfigPrefix))
	case strings.HasPrefix(name, clusterProfilePrefix) && p.ClusterProfile != nil:
		return p.ClusterProfile.Get(ctx, strings.TrimPrefix(name, clusterProfilePrefix))
	}
	return nil, multicluster.ErrClusterNotFound
}

// IndexField indexes the field on every member of both providers.
func (p *Providers) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	var errs []error
	for _, sub := range []multicluster.Provider{p.Kubeconfig, p.ClusterProfile} {
		if sub != nil {
			errs = append(errs, sub.IndexField(ctx, obj, field, extract))
		}
	}
	return errors.Join(errs...)
}

// prefixed is the manager as a provider sees it: the clusters it engages get its prefix.
type prefixed struct {
	mcmanager.Manager
	prefix string
}

func (m prefixed) Engage(ctx context.Context, name string, cl cluster.Cluster) error {
	return m.Manager.Engage(ctx, m.prefix+name, cl)
}

// registrationOf says which hub object registered the member, and the summary's name.
func registrationOf(member, kubeconfigNamespace string) (fleetv1alpha1.Registration, bool) {
	if name, ok := strings.CutPrefix(member, kubeconfigPrefix); ok {
		return fleetv1alpha1.Registration{Source: fleetv1alpha1.FromKubeconfigSecret, Namespace: kubeconfigNamespace, Name: name}, true
	}
	if rest, ok := strings.CutPrefix(member, clusterProfilePrefix); ok {
		if ns, name, ok := strings.Cut(rest, "/"); ok {
			return fleetv1alpha1.Registration{Source: fleetv1alpha1.FromClusterProfile, Namespace: ns, Name: name}, true
		}
	}
	return fleetv1alpha1.Registration{}, false
}
