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
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bondmodeflipplans,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bondmodeflipplans/status,verbs=get;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bondmodeflipplans/finalizers,verbs=update
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,namespace=nodewright-agent,resources=nodeoperations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightagentstatuses,verbs=get;list;watch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=edgeprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=nodewright-system,resources=leases,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// DefaultReportInterval is the agents' default --report-interval (internal/agent).
const DefaultReportInterval = 10 * time.Second

// Finalizer holds a flip until a running one is rolled back.
const Finalizer = "nodewright.spectrocloud.com/bondflip"

// poll is how often a step that waits for something no watch of the operator's sees (a VM's
// migration, read from the API server) looks again.
const poll = 2 * time.Second

// Reconciler runs BondModeFlipPlans.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache: the VMs, which the operator does not watch.
	APIReader client.Reader
	Recorder  record.EventRecorder
	Clock     clock.PassiveClock
	// Audit, when set, receives one record per transition; Actor is who the records say did it.
	Audit audit.Appender
	Actor string
	// LockNamespace is where the cluster-wide claim is kept (the operator's namespace).
	LockNamespace string
	// AgentNamespace is where the node agents run their NodeOperations and keep their
	// heartbeat Leases; without it no flip can start (its Preflight fails saying so).
	AgentNamespace string
	// ReportInterval is how often the agents read their host (their --report-interval);
	// DefaultReportInterval when zero. A node's change is confirmed from its peers' reports
	// only once they have read their DRBD connections after it.
	ReportInterval time.Duration

	engine *engine.Engine[*nwv1.BondModeFlipPlan]
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.engine = &engine.Engine[*nwv1.BondModeFlipPlan]{
		Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder, Clock: r.Clock,
		Kind: bondflip.Kind, Finalizer: Finalizer, Audit: r.Audit, Actor: r.Actor, Workflow: r,
		Gates: engine.GateConfig{LockNamespace: r.LockNamespace, ClusterPhases: []nwv1.ClusterPhase{nwv1.ClusterMultiNode}},
	}
	_, err := r.engine.Setup(mgr, "bondmodeflipplan", func(b *builder.Builder) *builder.Builder {
		active := handler.EnqueueRequestsFromMapFunc(r.active)
		// The agents' reports: the nodes' modes, DRBD, bonds.
		b = b.Watches(&nwv1.NodewrightAgentStatus{}, active)
		if r.AgentNamespace != "" {
			// The flip's operations, and the agents' heartbeats: a node renewing its Lease
			// after its change.
			b = b.Watches(&nwv1.NodeOperation{}, handler.EnqueueRequestsFromMapFunc(byOwnerLabel)).
				Watches(&coordinationv1.Lease{}, active, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
					return o.GetNamespace() == r.AgentNamespace
				})))
		}
		return b
	})
	return err
}

// byOwnerLabel maps a flip's child to the flip its labels name.
func byOwnerLabel(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[bondflip.LabelName]
	if name == "" || o.GetLabels()[bondflip.LabelUID] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
}

// active maps any change to the flips that are running or rolling back.
func (r *Reconciler) active(ctx context.Context, _ client.Object) []reconcile.Request {
	var list nwv1.BondModeFlipPlanList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if p := list.Items[i].Status.Phase; p == "" || p.Active() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile advances one flip by at most one action (the workflow engine's loop).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.engine.Reconcile(ctx, req)
}

// The flip as the engine's workflow: New, NewList, Plan, Prepare, Act and Finish.

// New is an empty flip.
func (r *Reconciler) New() *nwv1.BondModeFlipPlan { return &nwv1.BondModeFlipPlan{} }

// NewList is an empty list of flips.
func (r *Reconciler) NewList() client.ObjectList { return &nwv1.BondModeFlipPlanList{} }

// Plan is the flip's plan.
func (r *Reconciler) Plan(f *nwv1.BondModeFlipPlan) workflow.Plan { return bondflip.PlanOf(f) }

// Prepare keeps status.nodes, the per-node view, current before anything else: before the flip
// starts it records the node order the spec leaves to the operator (which fixes the plan),
// and on every reconcile each node's state (from the steps) and mode (from its agent). The
// record of each node's parts it keeps as the steps wrote it.
func (r *Reconciler) Prepare(ctx context.Context, f *nwv1.BondModeFlipPlan) (bool, ctrl.Result, error) {
	agents, err := r.agents(ctx)
	if err != nil {
		return true, ctrl.Result{}, err
	}
	view := nodeView(f, agents)
	current, progress := summary(f, view)
	if equality.Semantic.DeepEqual(view, f.Status.Nodes) && current == f.Status.CurrentNode && progress == f.Status.Progress {
		return false, ctrl.Result{}, nil
	}
	base := f.DeepCopy()
	f.Status.Nodes, f.Status.CurrentNode, f.Status.Progress = view, current, progress
	if err := r.Client.Status().Patch(ctx, f, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return true, ctrl.Result{}, err
	}
	return true, ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// Act performs the running step's action.
func (r *Reconciler) Act(ctx context.Context, run *engine.Run[*nwv1.BondModeFlipPlan]) (engine.Outcome, error) {
	s, err := r.newScope(ctx, run)
	if err != nil {
		return engine.Outcome{}, err
	}
	return r.perform(ctx, s)
}

// Finish has nothing to tidy: the NodeOperations and VM migrations the flip made are its
// evidence and go with it (they are owned by it).
func (r *Reconciler) Finish(_ context.Context, run *engine.Run[*nwv1.BondModeFlipPlan]) (engine.Outcome, error) {
	return engine.Outcome{Release: run.Deleting}, nil
}
