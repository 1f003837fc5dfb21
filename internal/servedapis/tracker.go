package servedapis

import (
	"fmt"
	"slices"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
)

// Discovery lists the resources of one group version; client-go's DiscoveryClient is one.
type Discovery interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// Tracker says which of its kinds the API server does not serve. It asks discovery itself
// rather than a REST mapper: controller-runtime's mapper refreshes only on a miss, so it keeps
// mapping a kind whose definition was deleted. An answer that every kind is served is kept
// until Invalidate, which the watch on CustomResourceDefinitions calls (InvalidateOn); an
// answer that some are missing is never kept, so that a kind whose definition was just
// established is found as soon as discovery has it.
type Tracker struct {
	kinds     Kinds
	discovery Discovery

	mu     sync.Mutex
	served bool // every kind was served when last asked, and nothing changed since
}

// NewTracker tracks kinds through discovery.
func NewTracker(kinds Kinds, discovery Discovery) *Tracker {
	return &Tracker{kinds: kinds, discovery: discovery}
}

// Kinds are the kinds tracked.
func (t *Tracker) Kinds() Kinds { return t.kinds }

// Missing returns the kinds the API server does not serve. An error means discovery could
// not answer (the API server is unreachable, say): not that a kind is missing.
func (t *Tracker) Missing() (Kinds, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.served {
		return nil, nil
	}
	var missing Kinds
	byVersion := map[schema.GroupVersion][]schema.GroupVersionKind{}
	var versions []schema.GroupVersion
	for _, gvk := range t.kinds {
		gv := gvk.GroupVersion()
		if _, ok := byVersion[gv]; !ok {
			versions = append(versions, gv)
		}
		byVersion[gv] = append(byVersion[gv], gvk)
	}
	for _, gv := range versions {
		list, err := t.discovery.ServerResourcesForGroupVersion(gv.String())
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
	t.served = len(missing) == 0
	return missing, nil
}

// Invalidate forgets that every kind was served: the next Missing asks discovery again.
func (t *Tracker) Invalidate() {
	t.mu.Lock()
	t.served = false
	t.mu.Unlock()
}

// Concerns says whether a change of crd may change what is served: it defines a kind of one
// of the tracked groups.
func (t *Tracker) Concerns(crd *apiextensionsv1.CustomResourceDefinition) bool {
	return slices.Contains(t.kinds.Groups(), crd.Spec.Group)
}

// Informer is what InvalidateOn needs of an informer: client-go's and controller-runtime's.
type Informer interface {
	AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
}

// InvalidateOn calls Invalidate on every change of a CustomResourceDefinition the tracker is
// concerned with that informer (one of CustomResourceDefinitions) sees.
func (t *Tracker) InvalidateOn(informer Informer) error {
	invalidate := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); !ok || t.Concerns(crd) {
			t.Invalidate()
		}
	}
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    invalidate,
		UpdateFunc: func(_, obj any) { invalidate(obj) },
		DeleteFunc: invalidate,
	})
	return err
}
