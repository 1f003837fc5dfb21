package bridge

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/management"
)

// ReadsAgents reports whether the bridge reads the agents rather than the legacy ConfigMap:
// the mode in effect (status.management) is Managed. The legacy ConfigMap is then not read.
func ReadsAgents(c *nwv1.NodewrightCluster) bool {
	return c.Status.Management == nwv1.ManagementManaged
}

// WatchesAgents reports whether the agents' Leases matter to the cluster: the bridge reads
// them, or spec.management asks for a handover that waits for them.
func WatchesAgents(c *nwv1.NodewrightCluster) bool {
	return ReadsAgents(c) || management.Requested(c) == nwv1.ManagementManaged
}

// NodesComeAndGo passes a Node's creation and deletion, and none of its updates: the bridge
// reads only which Nodes exist.
var NodesComeAndGo = predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}

// LeaseHandler maps events of the agents' heartbeat Leases, in namespace ns, to requests
// (requests says which for the node a Lease is named after) while they matter to the cluster
// (WatchesAgents). At steady state nearly every event is an agent renewing its Lease every
// 10 s, which changes nothing the bridge derives: a renewal is quiet, and reconciles nothing,
// when the bridge reads the agents, the cluster's HeartbeatsFresh is True, the renewal moved
// forward and the one before was fresh at the clock's now. The node was then fresh when last
// observed, and its controller is due to look again when that renewal goes stale, which is no
// later than the new one will (legacy.QuietHeartbeat is the same rule for the ConfigMap).
func LeaseHandler(c client.Reader, clk clock.PassiveClock, ns string, requests func(ctx context.Context, node string) []reconcile.Request) handler.EventHandler {
	enqueue := func(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if obj.GetNamespace() != ns {
			return
		}
		if nwc := Cluster(ctx, c); nwc == nil || !WatchesAgents(nwc) {
			return
		}
		for _, req := range requests(ctx, obj.GetName()) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, okBefore := e.ObjectOld.(*coordinationv1.Lease)
			after, okAfter := e.ObjectNew.(*coordinationv1.Lease)
			if !okBefore || !okAfter || after.Namespace != ns {
				return
			}
			nwc := Cluster(ctx, c)
			if nwc == nil || !WatchesAgents(nwc) {
				return
			}
			if ReadsAgents(nwc) && meta.IsStatusConditionTrue(nwc.Status.Conditions, nwv1.ConditionHeartbeatsFresh) &&
				QuietRenewal(before, after, clk, StaleAfter(nwc)) {
				return
			}
			for _, req := range requests(ctx, after.Name) {
				q.Add(req)
			}
		},
	}
}

// QuietRenewal reports whether a Lease going from before to after is a renewal that changes
// nothing derived from it, judged at the clock's now: both were renewed, after not earlier,
// and before was fresh.
func QuietRenewal(before, after *coordinationv1.Lease, clk clock.PassiveClock, staleAfter time.Duration) bool {
	b, a := before.Spec.RenewTime, after.Spec.RenewTime
	if b == nil || a == nil || a.Before(b) {
		return false
	}
	return clk.Now().Sub(b.Time) <= staleAfter
}
