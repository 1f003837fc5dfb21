// Package agentstatus is the controller of NodewrightAgentStatus: one object per node, created
// and deleted as nodes come and go. In Observe, the nodes the legacy DaemonSet manages, with
// each node's role, heartbeat, DRBD health and bond mode from its ConfigMap; in Managed, the
// cluster's Nodes, with each node's heartbeat from its agent's Lease (managed.go).
package agentstatus

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// patch: once, moving the status fields the operator wrote before v0.2 with merge patches to
// its server-side apply manager (apply.go), a change of metadata.managedFields.
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightagentstatuses,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightagentstatuses/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightclusters,verbs=get;list;watch
// The controller reference on each NodewrightAgentStatus blocks the cluster's deletion, which
// clusters enforcing owner-reference permissions allow only with this.
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightclusters/finalizers,verbs=update

// Event reasons on NodewrightAgentStatus.
const (
	EventHeartbeatStale   = "HeartbeatStale"
	EventHeartbeatResumed = "HeartbeatResumed"
)

// Reconciler keeps one NodewrightAgentStatus per managed node. Requests are named after the
// node.
type Reconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	// LegacyNamespace, when set, is the only namespace the operator reads legacy objects in.
	LegacyNamespace string
	// AgentNamespace is where the node agents keep their heartbeat Leases; empty when no
	// agents are installed.
	AgentNamespace string

	mu sync.Mutex
	// withReport: whether the bridge's last apply to a node's status held the report fields;
	// a node missing from it is unknown (not applied since the operator started).
	withReport map[string]bool
}

// mayHoldReport says whether the bridge may still hold report fields of a node it is to apply
// without them (report false: its agent reports it, or the Managed mode): then it applies once
// without them, even with nothing else to change.
func (r *Reconciler) mayHoldReport(as *nwv1.NodewrightAgentStatus, report bool) bool {
	if report {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	held, known := r.withReport[as.Name]
	return held || !known
}

func (r *Reconciler) appliedWithReport(node string, held bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.withReport == nil {
		r.withReport = map[string]bool{}
	}
	r.withReport[node] = held
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	reader := mgr.GetClient()
	always := func(*nwv1.NodewrightCluster, client.Object) bool { return true }
	node := func(_ context.Context, name string) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodewrightagentstatus").
		// Creation (at start, to prune objects of departed nodes), deletion (to recreate) and
		// an agent taking the report over (to let go of its fields) matter: the other status
		// updates are this controller's own writes, or the agent's.
		For(&nwv1.NodewrightAgentStatus{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: reporterChanged,
		})).
		Watches(&corev1.ConfigMap{}, r.configMapHandler(reader)).
		// Its spec, and the profile in force, name the ConfigMap and the threshold; the mode
		// in effect says whether the ConfigMap or the agents are read.
		Watches(&nwv1.NodewrightCluster{}, handler.EnqueueRequestsFromMapFunc(bridge.Matches(reader, always, r.allNodes)),
			builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, profileChanged, modeChanged)))
	if r.AgentNamespace != "" {
		// In Managed, the nodes are the cluster's Nodes and their heartbeats the agents'
		// Leases. Without agents, neither is read.
		inManaged := func(ctx context.Context, name string) []reconcile.Request {
			if nwc := bridge.Cluster(ctx, reader); nwc == nil || !bridge.ReadsAgents(nwc) {
				return nil
			}
			return node(ctx, name)
		}
		b = b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return inManaged(ctx, o.GetName())
		}), builder.OnlyMetadata, builder.WithPredicates(bridge.NodesComeAndGo)).
			Watches(&coordinationv1.Lease{}, bridge.LeaseHandler(reader, r.Clock, r.AgentNamespace, inManaged))
	}
	return b.Complete(r)
}

// modeChanged passes the updates that change the mode in effect, which decides what the
// nodes are and where their heartbeats are read.
var modeChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, okBefore := e.ObjectOld.(*nwv1.NodewrightCluster)
	after, okAfter := e.ObjectNew.(*nwv1.NodewrightCluster)
	return !okBefore || !okAfter || bridge.ReadsAgents(before) != bridge.ReadsAgents(after)
}}

// reporterChanged passes the updates that change who reports the node.
func reporterChanged(e event.UpdateEvent) bool {
	before, okBefore := e.ObjectOld.(*nwv1.NodewrightAgentStatus)
	after, okAfter := e.ObjectNew.(*nwv1.NodewrightAgentStatus)
	return okBefore && okAfter && before.Status.Reporter != after.Status.Reporter
}

// profileChanged passes the updates that change the profile in force, whose legacy names
// and threshold replace the cluster's (bridge.Effective).
var profileChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, okBefore := e.ObjectOld.(*nwv1.NodewrightCluster)
	after, okAfter := e.ObjectNew.(*nwv1.NodewrightCluster)
	return !okBefore || !okAfter || !equality.Semantic.DeepEqual(before.Status.Profile, after.Status.Profile) ||
		meta.IsStatusConditionTrue(before.Status.Conditions, nwv1.ConditionProfileApplied) !=
			meta.IsStatusConditionTrue(after.Status.Conditions, nwv1.ConditionProfileApplied)
}}

// allNodes names every node (those the ConfigMap lists, in Managed the cluster's Nodes) and
// every existing NodewrightAgentStatus, so that nodes that joined get an object and nodes that
// left lose theirs.
func (r *Reconciler) allNodes(ctx context.Context, nwc *nwv1.NodewrightCluster) []reconcile.Request {
	names := map[string]bool{}
	if bridge.ReadsAgents(nwc) {
		if nodes, err := r.agents().Nodes(ctx); err == nil && r.AgentNamespace != "" {
			for _, n := range nodes {
				names[n] = true
			}
		}
	} else if obs, err := bridge.ObserveConfigMap(ctx, r.Client, nwc); err == nil {
		for _, n := range obs.Legacy.Nodes {
			names[n.Name] = true
		}
	}
	var existing nwv1.NodewrightAgentStatusList
	if err := r.Client.List(ctx, &existing); err == nil {
		for _, as := range existing.Items {
			names[as.Name] = true
		}
	}
	requests := make([]reconcile.Request, 0, len(names))
	for name := range names {
		requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return requests
}

// Reconcile makes the node's NodewrightAgentStatus exist (or not) and match what the legacy
// ConfigMap says, writing only on change, and asks to be woken when its heartbeat goes stale.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Before reading: a heartbeat found stale here is then stale at the later moment the
	// ConfigMap handler judges the next tick, which therefore wakes this node (see
	// legacy.QuietHeartbeat).
	now := r.Clock.Now()
	nwc := &nwv1.NodewrightCluster{}
	if err := r.Client.Get(ctx, bridge.ClusterKey, nwc); err != nil {
		// Without the cluster object, the garbage collector removes its children.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	nwc = bridge.Effective(ctx, r.Client, nwc)
	if bridge.ReadsAgents(nwc) {
		return r.reconcileAgent(ctx, req.Name, nwc, now)
	}
	if err := bridge.InScope(nwc, r.LegacyNamespace); err != nil {
		// The NodewrightCluster controller reports it; keep what exists.
		return ctrl.Result{}, nil
	}
	obs, err := bridge.ObserveConfigMap(ctx, r.Client, nwc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !obs.Found {
		// Which nodes are managed is unknown until the ConfigMap is back; keep what exists.
		return ctrl.Result{}, nil
	}
	staleAfter := bridge.StaleAfter(nwc)
	roll := legacy.Roll(obs.Legacy, obs.Problems, now, staleAfter)
	var node *legacy.NodeHealth
	for i := range roll.Nodes {
		if roll.Nodes[i].Name == req.Name {
			node = &roll.Nodes[i]
		}
	}

	as, exists, err := r.ensure(ctx, req.Name, nwc, func(as *nwv1.NodewrightAgentStatus) bool {
		// A node its agent reports is there, whatever the legacy DaemonSet says.
		return node != nil || agentReports(as.Status)
	})
	if err != nil || as == nil || node == nil {
		return ctrl.Result{}, err
	}
	status := computeStatus(as.Status, *node, staleAfter, obs.Problems)
	if err := r.write(ctx, as, exists, status, !agentReports(status), staleAfter); err != nil {
		return ctrl.Result{}, err
	}
	if node.Stale {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: node.StaleAt.Sub(now)}, nil
}

// ensure makes the node's NodewrightAgentStatus exist while keep says it should, owned by the
// cluster, and deletes it otherwise. It returns the object (nil when it is not kept) and
// whether it existed before.
func (r *Reconciler) ensure(ctx context.Context, name string, nwc *nwv1.NodewrightCluster, keep func(*nwv1.NodewrightAgentStatus) bool) (*nwv1.NodewrightAgentStatus, bool, error) {
	as := &nwv1.NodewrightAgentStatus{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, as)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	if !keep(as) {
		if exists {
			if err := r.Client.Delete(ctx, as); client.IgnoreNotFound(err) != nil {
				return nil, false, fmt.Errorf("deleting the status of departed node %s: %w", name, err)
			}
		}
		return nil, exists, nil
	}
	if !exists {
		as = &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := controllerutil.SetControllerReference(nwc, as, r.Client.Scheme()); err != nil {
			return nil, false, err
		}
		if err := r.Client.Create(ctx, as); err != nil {
			return nil, false, fmt.Errorf("creating the status of node %s: %w", name, err)
		}
	}
	return as, exists, nil
}

// write applies the bridge's fields of the node's status (with report, the report fields too)
// when they changed, or it may still hold report fields it is to let go of, and raises an Event
// when its heartbeat went stale or came back.
func (r *Reconciler) write(ctx context.Context, as *nwv1.NodewrightAgentStatus, existed bool, status nwv1.NodewrightAgentStatusStatus, report bool, staleAfter time.Duration) error {
	if equality.Semantic.DeepEqual(status, as.Status) && !r.mayHoldReport(as, report) {
		return nil
	}
	freshnessChanged := existed && status.Heartbeat.Stale != as.Status.Heartbeat.Stale
	if err := r.applyStatus(ctx, as, status, report); err != nil {
		return fmt.Errorf("writing the status of node %s: %w", as.Name, err)
	}
	r.appliedWithReport(as.Name, report)
	// Only once written: the optimistic lock then makes sure that a retry, or a reconcile
	// from a stale cache, does not raise the Event a second time.
	switch {
	case freshnessChanged && status.Heartbeat.Stale:
		r.Recorder.Eventf(as, corev1.EventTypeWarning, EventHeartbeatStale, "heartbeat older than %s", staleAfter)
	case freshnessChanged:
		r.Recorder.Event(as, corev1.EventTypeNormal, EventHeartbeatResumed, "heartbeat fresh again")
	}
	return nil
}
