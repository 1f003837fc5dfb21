package agentstatus

import (
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// configMapHandler turns changes of the legacy ConfigMap into requests for the nodes they
// concern: when one node's DRBD report changes, only that node is reconciled, and a heartbeat
// that only ticks forward reconciles none (the node looks again at its deadline), which is
// what keeps a large cluster's steady state cheap.
func (r *Reconciler) configMapHandler(reader client.Reader) handler.EventHandler {
	return bridge.ConfigMapHandler(reader, r.Clock, r.allNodes, func(c legacy.Changes) []reconcile.Request {
		requests := make([]reconcile.Request, 0, len(c.Nodes))
		for name := range c.Nodes {
			requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
		return requests
	})
}
