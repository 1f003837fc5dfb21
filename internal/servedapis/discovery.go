package servedapis

import (
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Discovery lists the resources of one group version; client-go's DiscoveryClient is one.
type Discovery interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// Missing returns the kinds the API server does not serve, asking discovery (one request per
// group version). It does not ask a REST mapper: controller-runtime's refreshes only on a
// miss, so it keeps mapping a kind whose definition was deleted. An error means discovery
// could not answer (the API server is unreachable, say), not that a kind is missing.
func (k Kinds) Missing(d Discovery) (Kinds, error) {
	var missing Kinds
	byVersion := map[schema.GroupVersion][]schema.GroupVersionKind{}
	var versions []schema.GroupVersion
	for _, gvk := range k {
		gv := gvk.GroupVersion()
		if _, ok := byVersion[gv]; !ok {
			versions = append(versions, gv)
		}
		byVersion[gv] = append(byVersion[gv], gvk)
	}
	for _, gv := range versions {
		list, err := d.ServerResourcesForGroupVersion(gv.String())
		if apierrors.IsNotFound(err) {
			missing = append(missing, byVersion[gv]...)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("asking the API server whether it serves %s: %w", gv, err)
		}
		for _, gvk := range byVersion[gv] {
			if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == gvk.Kind }) {
				missing = append(missing, gvk)
			}
		}
	}
	return missing, nil
}
