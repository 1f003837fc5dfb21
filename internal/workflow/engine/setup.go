package engine

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// Setup builds the kind's controller on mgr: the kind's own watch; a watch of each kind of
// child the descriptor lists, mapped to its owner (OwnerOf) and only of the objects a
// workflow labelled; the watches that wake a step held by a gate when the plan is a
// workflow.GatedPlan (the claim's Lease, the NodewrightCluster, the deletion of any
// cluster-wide workflow); and the Workflow's own when it is a Watcher (never WithEventFilter,
// see the package comment). The manager's cache decides where the Lease is watched: the
// operator's holds only the claim's namespace.
func (e *Engine[O]) Setup(mgr ctrl.Manager) (controller.Controller, error) {
	d := e.Descriptor
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if e.Client == nil {
		e.Client = mgr.GetClient()
	}
	if e.APIReader == nil {
		e.APIReader = mgr.GetAPIReader()
	}
	namespaced, err := apiutil.IsObjectNamespaced(d.New(), mgr.GetScheme(), mgr.GetRESTMapper())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Kind.Name, err)
	}
	e.namespaced = namespaced
	_, gated := d.Plan(d.New()).(workflow.GatedPlan)
	if gated && e.gates.LockNamespace == "" {
		return nil, fmt.Errorf("%s: the gates need the namespace of the Lease %s", d.Controller, LockName)
	}
	b := ctrl.NewControllerManagedBy(mgr).Named(d.Controller).For(d.New())
	if gated {
		wake := handler.EnqueueRequestsFromMapFunc(e.waiting)
		b = b.Watches(&coordinationv1.Lease{}, wake, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == e.gates.LockNamespace && o.GetName() == LockName
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
	if w, ok := e.Workflow.(Watcher[O]); ok {
		b = w.Watches(b, e)
	}
	c, err := b.Build(e)
	if err != nil {
		return nil, err
	}
	if len(d.APIs) == 0 {
		// The children's watches start with the controller; with APIs, once they are served.
		for _, src := range e.childSources(mgr.GetCache()) {
			if err := c.Watch(src); err != nil {
				return nil, fmt.Errorf("%s: watching %s: %w", d.Kind.Name, src, err)
			}
		}
	} else {
		// The children's watches start once the APIs are served (apis.go).
		e.apis.controller, e.apis.cache, e.apis.discovery = c, mgr.GetCache(), e.Discovery
		if e.apis.discovery == nil {
			dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
			if err != nil {
				return nil, fmt.Errorf("building the discovery client: %w", err)
			}
			e.apis.discovery = dc
		}
		if missing, err := d.APIs.Missing(e.apis.discovery); err == nil && len(missing) > 0 {
			mgr.GetLogger().Info(d.Kind.Name+"s wait for APIs the cluster does not serve; they start once these are installed",
				"missing", missing.String())
		}
	}
	return c, nil
}

// labelled passes the objects a workflow of the kind labelled as its children.
func (e *Engine[O]) labelled() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[children.LabelManagedBy] == children.ManagedBy && o.GetLabels()[e.Descriptor.UIDLabel] != ""
	})
}

// waiting maps any change to the kind's workflows with a step held at its gates.
func (e *Engine[O]) waiting(ctx context.Context, _ client.Object) []reconcile.Request {
	return e.requests(ctx, func(o O) bool {
		st := o.GetWorkflowStatus()
		s := workflow.StateOf(st, e.Descriptor.Plan(o))
		return s.Phase == nwv1.WorkflowRunning && workflow.Waiting(st, s.Step)
	})
}

// Start builds the engine of the kind d describes with w's actions, registers its controller
// on mgr, and fills in what the controller left unset: its clients (the manager's; a test
// sets its own) and the clock of its deps.
func Start[O Object](mgr ctrl.Manager, d *Descriptor[O], w Workflow[O], deps *Deps, c *client.Client, r *client.Reader) (*Engine[O], error) {
	e := New(d, w, *deps)
	e.Client, e.APIReader = *c, *r
	if _, err := e.Setup(mgr); err != nil {
		return nil, err
	}
	*deps, *c, *r = e.Deps, e.Client, e.APIReader
	return e, nil
}
