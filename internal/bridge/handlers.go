package bridge

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Cluster returns the singleton from the cache, with its profile's names in force (see
// Effective), or nil.
func Cluster(ctx context.Context, c client.Reader) *nwv1.NodewrightCluster {
	nwc := &nwv1.NodewrightCluster{}
	if err := c.Get(ctx, ClusterKey, nwc); err != nil {
		return nil
	}
	return Effective(ctx, c, nwc)
}

// Matches returns a map function that enqueues the result of requests when obj is one of the
// legacy objects the cluster names (match decides which), and nothing otherwise, so that
// unrelated ConfigMaps, DaemonSets and Events cost no reconcile.
func Matches(c client.Reader, match func(*nwv1.NodewrightCluster, client.Object) bool,
	requests func(context.Context, *nwv1.NodewrightCluster) []reconcile.Request) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		nwc := Cluster(ctx, c)
		if nwc == nil || !match(nwc, obj) {
			return nil
		}
		return requests(ctx, nwc)
	}
}

// IsLegacyEventObject adapts IsLegacyEvent to Matches.
func IsLegacyEventObject(nwc *nwv1.NodewrightCluster, obj client.Object) bool {
	ev, ok := obj.(*corev1.Event)
	return ok && IsLegacyEvent(nwc, ev)
}
