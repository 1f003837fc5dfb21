// Package bondmodeflipplan is the controller of BondModeFlipPlan: it changes the storage
// bond's mode on every node, one node at a time, with the node's VMs protected, the DRBD
// resynchronisation towards it paused, and the change made by the node's agent under a local
// checkpoint that the operator commits only once it has seen the node well from outside; a
// failure anywhere brings every node back to its previous mode. The steps and their order come
// from the pure plan in internal/bondflip and run on the shared workflow engine; this package
// reads the cluster (the agents' reports and Leases, the VMs), asks the agents for the typed
// NodeOperations a step needs, and says what it observed.
package bondmodeflipplan

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bondmodeflipplans,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bondmodeflipplans/status,verbs=get;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bondmodeflipplans/finalizers,verbs=update
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,namespace=nodewright-agent,resources=nodeoperations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightagentstatuses,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=edgeprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=nodewright-system,resources=leases,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// poll is how often a step that waits for something no watch of the operator's sees (a VM's
// migration, read from the API server) looks again.
const poll = 2 * time.Second

// Reconciler runs BondModeFlipPlans.
type Reconciler struct {
	engine.Deps
	Client client.Client
	// APIReader reads past the cache: the VMs, which the operator does not watch.
	APIReader client.Reader
	// AgentNamespace is where the node agents run their NodeOperations and keep their
	// heartbeat Leases; without it no flip can start (its Preflight fails saying so).
	AgentNamespace string

	engine *engine.Engine[*nwv1.BondModeFlipPlan]
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	e, err := engine.Start(mgr, bondflip.Descriptor, r, &r.Deps, &r.Client, &r.APIReader)
	r.engine = e
	return err
}

// Watches wakes the running flips when an agent reports (the nodes' modes, DRBD, bonds) and,
// with agents, when one renews its heartbeat Lease (a node back after its change).
func (r *Reconciler) Watches(b *builder.Builder, e *engine.Engine[*nwv1.BondModeFlipPlan]) *builder.Builder {
	active := handler.EnqueueRequestsFromMapFunc(e.Active)
	b = b.Watches(&nwv1.NodewrightAgentStatus{}, active)
	if r.AgentNamespace != "" {
		b = b.Watches(&coordinationv1.Lease{}, active, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.AgentNamespace
		})))
	}
	return b
}

// Reconcile advances one flip by at most one action (the workflow engine's loop).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.engine.Reconcile(ctx, req)
}

// Prepare keeps status.nodes, the per-node view, current before anything else: before the flip
// starts it records the node order the spec leaves to the operator (which fixes the plan),
// and on every reconcile each node's state (from the steps) and mode (from its agent). The
// engine writes it with the rest.
func (r *Reconciler) Prepare(ctx context.Context, run *engine.Run[*nwv1.BondModeFlipPlan]) (engine.Hold, error) {
	f := run.Object
	agents, err := r.agents(ctx)
	if err != nil {
		return engine.Hold{}, err
	}
	view := nodeView(f, agents)
	f.Status.CurrentNode, f.Status.Progress = summary(f, view)
	f.Status.Nodes = view
	return engine.Hold{}, nil
}

// Actions are the steps' actions: the Preflight's, and a node's step's, forward or rollback,
// which carries out its parts (nodeStep).
func (r *Reconciler) Actions() engine.Actions[*nwv1.BondModeFlipPlan] {
	return engine.Scoped(r.newScope, map[workflow.Step]func(context.Context, *scope) (engine.Outcome, error){
		bondflip.Preflight:          r.preflight,
		bondflip.ActionNode:         r.nodeStep,
		bondflip.ActionRollbackNode: r.nodeStep,
	})
}

// Finish has nothing to tidy: the NodeOperations and VM migrations the flip made are its
// evidence and go with it (they are owned by it).
func (r *Reconciler) Finish(context.Context, *engine.Run[*nwv1.BondModeFlipPlan]) (engine.Finished, error) {
	return engine.Tidied("nothing to tidy: the flip's NodeOperations and VM migrations are its evidence and go with it"), nil
}
