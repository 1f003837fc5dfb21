package operator

import (
	"slices"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// NewCache builds the manager's cache on a cluster that may not serve every kind
// CacheOptions configures. The cache asks, when it is built, whether each configured kind is
// namespaced, and fails for a kind the API server does not serve (the CSI snapshot API on a
// cluster without the external-snapshotter): the whole operator would not start. The cache's
// mapper therefore knows these kinds' scopes; nothing reads them before they are served (the
// migration controller waits for them, see vmvolumemigration.APIs), and when they are, the
// API server's own mapping is used.
func NewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	if opts.Mapper != nil {
		opts.Mapper = knownScopes{RESTMapper: opts.Mapper, mappings: optionalKinds}
	}
	return cache.New(cfg, opts)
}

// optionalKinds are the kinds CacheOptions configures that a cluster may not serve.
var optionalKinds = []*meta.RESTMapping{{
	Resource:         snapshotv1.SchemeGroupVersion.WithResource("volumesnapshots"),
	GroupVersionKind: snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshot"),
	Scope:            meta.RESTScopeNamespace,
}}

// knownScopes is a RESTMapper that falls back to fixed mappings for kinds the API server
// does not serve.
type knownScopes struct {
	meta.RESTMapper
	mappings []*meta.RESTMapping
}

func (k knownScopes) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m, err := k.RESTMapper.RESTMapping(gk, versions...)
	if err == nil || !meta.IsNoMatchError(err) {
		return m, err
	}
	for _, known := range k.mappings {
		anyVersion := len(versions) == 0 || slices.Contains(versions, "")
		if known.GroupVersionKind.GroupKind() == gk && (anyVersion || slices.Contains(versions, known.GroupVersionKind.Version)) {
			return known, nil
		}
	}
	return nil, err
}
