package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/servedapis"
)

// Optional APIs. A kind that needs APIs a cluster may lack, gain after the operator started,
// or lose (KubeVirt's, the CSI snapshot API) names them in Descriptor.APIs. While one is not
// served, its workflows wait: one not yet started with its Succeeded condition Unknown for
// APIsMissing, naming them and why (from their CustomResourceDefinitions), a running one with
// its step saying so; a deleted one that never started is let go. The watches of the kind's
// children, and its Watcher's, start only once every API is served, from a reconcile, with
// no restart of the operator: registered before, a watch of a kind that is not served would
// hold the controller's start until its cache syncs, and fail it. While a workflow waits, the
// CustomResourceDefinitions of the APIs' groups are watched, to wake it when they change
// (only then: a role that may not read them, an older chart's, costs nothing where every API
// is served).

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// definitionsWait bounds explain's wait for the definitions' cache.
const definitionsWait = 30 * time.Second

// apiWatches starts the watches that need the APIs, once each.
type apiWatches struct {
	mu                                 sync.Mutex
	controller                         controller.Controller
	cache                              cache.Cache
	discovery                          servedapis.Discovery
	watchingDefinitions, watchingKinds bool
}

// servedOrHold asks discovery whether the kind's APIs are served, starts the watches that
// can start, and says what holds the workflow when one is missing.
func (e *Engine[O]) servedOrHold(ctx context.Context) (Hold, error) {
	missing, err := e.Descriptor.APIs.Missing(e.apis.discovery)
	if err != nil {
		return Hold{}, err
	}
	if err := e.watchAPIs(len(missing) == 0); err != nil {
		return Hold{}, err
	}
	if len(missing) == 0 {
		return Hold{}, nil
	}
	why := e.explain(ctx, missing)
	h := Hold{Reason: nwv1.ReasonAPIsMissing,
		Message:     "waiting to start: " + why.Message + "; the " + e.Descriptor.Kind.Noun + " starts once they are served",
		StepMessage: "waiting: " + why.Message + "; the step goes on once they are served again",
		// Discovery has the definitions in moments, and no further change of theirs will
		// wake the workflow: the retries back off.
		Backoff: why.CatchingUp}
	return h, nil
}

// watchAPIs starts, once each, the watches a reconcile needs: while an API is missing, on
// the CustomResourceDefinitions of the APIs' groups; once every API is served, on the kind's
// children and its Watcher's sources.
func (e *Engine[O]) watchAPIs(served bool) error {
	a := &e.apis
	a.mu.Lock()
	defer a.mu.Unlock()
	if !served {
		if !a.watchingDefinitions {
			if err := a.controller.Watch(e.definitionsSource()); err != nil {
				return fmt.Errorf("watching CustomResourceDefinitions: %w", err)
			}
			a.watchingDefinitions = true
		}
		return nil
	}
	if a.watchingKinds {
		return nil
	}
	sources := e.childSources(a.cache)
	if w, ok := e.Workflow.(APIWatcher); ok {
		sources = append(sources, w.SourcesOnceServed(a.cache)...)
	}
	for _, src := range sources {
		if err := a.controller.Watch(src); err != nil {
			return fmt.Errorf("watching %s: %w", src, err)
		}
	}
	a.watchingKinds = true
	return nil
}

// APIWatcher is a Workflow of a kind with APIs (Descriptor.APIs) that watches more than its
// children once they are served (a migration: its VM).
type APIWatcher interface {
	SourcesOnceServed(c cache.Cache) []source.Source
}

// childSources are the watches of the kind's children, each mapped to its owner and only of
// the objects a workflow labelled.
func (e *Engine[O]) childSources(c cache.Cache) []source.Source {
	out := make([]source.Source, 0, len(e.Descriptor.Children))
	for _, child := range e.Descriptor.Children {
		if child.Unwatched {
			continue
		}
		out = append(out, source.Kind[client.Object](c, child.Object, handler.EnqueueRequestsFromMapFunc(e.OwnerOf), e.labelled()))
	}
	return out
}

// definitionsSource wakes every workflow of the kind when a CustomResourceDefinition of one
// of the APIs' groups changes: installed, established, deleted.
func (e *Engine[O]) definitionsSource() source.Source {
	groups := e.Descriptor.APIs.Groups()
	ofTheGroups := predicate.NewTypedPredicateFuncs(func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return slices.Contains(groups, crd.Spec.Group)
	})
	all := handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ *apiextensionsv1.CustomResourceDefinition) []reconcile.Request {
		return e.All(ctx, nil)
	})
	return source.Kind(e.apis.cache, &apiextensionsv1.CustomResourceDefinition{}, all, ofTheGroups)
}

// explain says why the missing APIs are not served, from their definitions. It waits a
// bounded time for the definitions' cache, which a role without read access to them (an
// older chart's) never fills: the reason is then the missing kinds alone.
func (e *Engine[O]) explain(ctx context.Context, missing servedapis.Kinds) servedapis.Explanation {
	ctx, cancel := context.WithTimeout(ctx, definitionsWait)
	defer cancel()
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := e.Client.List(ctx, &crds); err != nil {
		return servedapis.Explanation{Message: fmt.Sprintf("the API server does not serve %s (their CustomResourceDefinitions cannot be read: %v)", missing, err)}
	}
	return servedapis.Explain(missing, crds.Items)
}
