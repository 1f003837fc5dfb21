package agentstatus

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// configMapHandler turns changes of the legacy ConfigMap into requests for the nodes they
// concern: when one node's heartbeat ticks, only that node is reconciled, not all of them,
// which is what keeps a large cluster's steady state cheap.
func (r *Reconciler) configMapHandler(reader client.Reader) handler.EventHandler {
	all := handler.EnqueueRequestsFromMapFunc(bridge.Matches(reader, bridge.IsConfigMap, r.allNodes))
	return handler.Funcs{
		CreateFunc:  all.Create,
		DeleteFunc:  all.Delete,
		GenericFunc: all.Generic,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, okBefore := e.ObjectOld.(*corev1.ConfigMap)
			after, okAfter := e.ObjectNew.(*corev1.ConfigMap)
			nwc := bridge.Cluster(ctx, reader)
			if !okBefore || !okAfter || nwc == nil || !bridge.IsConfigMap(nwc, after) {
				return
			}
			for name := range changedNodes(before.Data, after.Data) {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
			}
		},
	}
}

// changedNodes names the nodes whose keys differ between two versions of the ConfigMap's
// data, and every node of both lists when the list itself changed.
func changedNodes(before, after map[string]string) map[string]bool {
	changed := map[string]bool{}
	if before[legacy.KeyNodes] != after[legacy.KeyNodes] {
		for _, list := range []string{before[legacy.KeyNodes], after[legacy.KeyNodes]} {
			for _, name := range strings.Split(list, ",") {
				if name = strings.TrimSpace(name); name != "" {
					changed[name] = true
				}
			}
		}
	}
	note := func(key string) {
		if rest, ok := strings.CutPrefix(key, "node."); ok {
			if i := strings.LastIndexByte(rest, '.'); i > 0 {
				changed[rest[:i]] = true
			}
		}
	}
	for k, v := range after {
		if old, ok := before[k]; !ok || old != v {
			note(k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			note(k)
		}
	}
	return changed
}
