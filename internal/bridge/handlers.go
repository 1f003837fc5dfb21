package bridge

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
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

// ConfigMapHandler maps events of the legacy ConfigMap the cluster names to requests, while
// the bridge reads it (not in Managed, ReadsAgents): its creation and deletion to all of them,
// an update to those of what it can change
// (legacy.Compare at the clock's now). At steady state nearly every update is a heartbeat
// that only ticks forward, and it then costs a comparison, not a parse and a reconcile.
// While the cluster's HeartbeatsFresh condition is not True, every heartbeat is a change.
func ConfigMapHandler(c client.Reader, clk clock.PassiveClock,
	all func(context.Context, *nwv1.NodewrightCluster) []reconcile.Request,
	changed func(legacy.Changes) []reconcile.Request) handler.EventHandler {
	onAll := handler.EnqueueRequestsFromMapFunc(Matches(c, func(nwc *nwv1.NodewrightCluster, obj client.Object) bool {
		return IsConfigMap(nwc, obj) && !ReadsAgents(nwc)
	}, all))
	return handler.Funcs{
		CreateFunc:  onAll.Create,
		DeleteFunc:  onAll.Delete,
		GenericFunc: onAll.Generic,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, okBefore := e.ObjectOld.(*corev1.ConfigMap)
			after, okAfter := e.ObjectNew.(*corev1.ConfigMap)
			if !okBefore || !okAfter {
				return
			}
			nwc := Cluster(ctx, c)
			if nwc == nil || !IsConfigMap(nwc, after) || ReadsAgents(nwc) {
				return
			}
			var changes legacy.Changes
			if meta.IsStatusConditionTrue(nwc.Status.Conditions, nwv1.ConditionHeartbeatsFresh) {
				changes = legacy.Compare(before.Data, after.Data, clk.Now(), StaleAfter(nwc))
			} else {
				// Some node was last seen stale (or none was judged yet): a heartbeat may
				// bring it back. Whatever judged it (another threshold, a clock since
				// stepped back) need not agree with a judgement here, so each one counts.
				changes = legacy.CompareEvery(before.Data, after.Data)
			}
			for _, req := range changed(changes) {
				q.Add(req)
			}
		},
	}
}
