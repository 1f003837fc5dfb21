package engine

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Setup builds the kind's controller on mgr: the kind's own watch, the watches that wake a
// step held by a gate when the plan is a workflow.GatedPlan (the claim's Lease, the
// NodewrightCluster, the deletion of any cluster-wide workflow), and whatever more watches
// adds (children, say; never WithEventFilter, see the package comment). The manager's cache
// decides where the Lease is watched: the operator's holds only the claim's namespace.
func (e *Engine[O]) Setup(mgr ctrl.Manager, name string, watches func(*builder.Builder) *builder.Builder) (controller.Controller, error) {
	if e.Clock == nil {
		e.Clock = clock.RealClock{}
	}
	if e.Client == nil {
		e.Client = mgr.GetClient()
	}
	if e.APIReader == nil {
		e.APIReader = mgr.GetAPIReader()
	}
	_, gated := e.Workflow.Plan(e.Workflow.New()).(workflow.GatedPlan)
	if gated && e.Gates.LockNamespace == "" {
		return nil, fmt.Errorf("%s: the gates need the namespace of the Lease %s", name, LockName)
	}
	b := ctrl.NewControllerManagedBy(mgr).Named(name).For(e.Workflow.New())
	if gated {
		wake := handler.EnqueueRequestsFromMapFunc(e.waiting)
		b = b.Watches(&coordinationv1.Lease{}, wake, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == e.Gates.LockNamespace && o.GetName() == LockName
		}))).Watches(&nwv1.NodewrightCluster{}, wake)
		// A holder deleted without releasing the claim (its finalizer removed by hand)
		// frees it too.
		deleted := predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false }, DeleteFunc: func(event.DeleteEvent) bool { return true },
		}
		for _, kind := range ClusterWide() {
			b = b.Watches(kind, wake, builder.WithPredicates(deleted))
		}
	}
	if watches != nil {
		b = watches(b)
	}
	return b.Build(e)
}

// waiting maps any change to the kind's workflows with a step held at its gates.
func (e *Engine[O]) waiting(ctx context.Context, _ client.Object) []reconcile.Request {
	list := e.Workflow.NewList()
	if err := e.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the workflows a gate may hold", "kind", e.Kind.Name)
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, item := range items {
		o, ok := item.(O)
		if !ok {
			continue
		}
		st := o.GetWorkflowStatus()
		if s := workflow.StateOf(st, e.Workflow.Plan(o)); s.Phase == nwv1.WorkflowRunning && workflow.Waiting(st, s.Step) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return out
}

// ClusterWide lists the kinds of the cluster-wide workflows, one of which at a time holds the
// claim.
func ClusterWide() []client.Object {
	return []client.Object{&nwv1.BondModeFlipPlan{}, &nwv1.ReplicationUpgrade{}}
}
