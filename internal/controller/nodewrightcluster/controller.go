// Package nodewrightcluster is the controller of the NodewrightCluster singleton: it decides
// the management mode in effect (the handover from the legacy DaemonSet, handover.go) and rolls
// up into the cluster's status, in Observe, the legacy DaemonSet's ConfigMap, DaemonSet and
// Events, and in Managed, the node agents' heartbeat Leases.
package nodewrightcluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/management"
	"github.com/spectrocloud/nodewright/internal/profiletrust"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightclusters/status,verbs=get;patch;update

// eventComponentIndex indexes Events by the component that emitted them.
const eventComponentIndex = "nodewright.legacyEventComponent"

// Reconciler rolls the legacy state up into NodewrightCluster.status.
type Reconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	Clock    clock.PassiveClock
	// Audit, when set, receives a record of every legacy transition and anomaly observed;
	// Actor is who the records say observed it (the operator).
	Audit audit.Appender
	Actor string
	// Trust verifies the EdgeProfile spec.profileRef names.
	Trust profiletrust.Trust
	// LegacyNamespace, when set, is the only namespace the operator reads legacy objects in.
	LegacyNamespace string
	// AgentNamespace is where the node agents keep their heartbeat Leases; empty when no
	// agents are installed (the switch to Managed is then refused).
	AgentNamespace string
	// APIReader reads the legacy DaemonSet's pods, which the cache does not hold.
	APIReader client.Reader
	// Version is the operator's version, written to status.operatorVersion; empty: none.
	Version string
}

// EventLegacyNotRead is the reason of the Warning Event raised when the cluster names legacy
// objects outside the namespace the operator reads.
const EventLegacyNotRead = "LegacyNamespaceNotRead"

// SetupWithManager registers the controller and the Event index it lists by.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Event{}, eventComponentIndex, func(obj client.Object) []string {
		ev := obj.(*corev1.Event)
		if ev.Type != corev1.EventTypeWarning {
			return nil
		}
		return []string{ev.Source.Component, ev.ReportingController}
	}); err != nil {
		return fmt.Errorf("indexing Events by component: %w", err)
	}
	singleton := func(context.Context, *nwv1.NodewrightCluster) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: bridge.ClusterKey}}
	}
	reader := mgr.GetClient()
	isWarning := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		ev, ok := obj.(*corev1.Event)
		return ok && ev.Type == corev1.EventTypeWarning
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodewrightcluster").
		For(&nwv1.NodewrightCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, bridge.ConfigMapHandler(reader, r.Clock, singleton, func(c legacy.Changes) []reconcile.Request {
			if !c.Cluster {
				return nil
			}
			return singleton(ctx, nil)
		})).
		Watches(&appsv1.DaemonSet{}, handler.EnqueueRequestsFromMapFunc(bridge.Matches(reader, bridge.IsDaemonSet, singleton)),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: daemonSetPodsChanged})).
		Watches(&corev1.Event{}, handler.EnqueueRequestsFromMapFunc(bridge.Matches(reader, bridge.IsLegacyEventObject, singleton)),
			builder.WithPredicates(isWarning)).
		// The profile it names, and the keys that verify it.
		Watches(&nwv1.EdgeProfile{}, handler.EnqueueRequestsFromMapFunc(bridge.Matches(reader, namesProfile, singleton)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: bridge.ClusterKey}}
		}), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.Trust.ConfigMap.Namespace && o.GetName() == r.Trust.ConfigMap.Name
		})))
	if r.AgentNamespace != "" {
		// The handover and, in Managed, the rollup read the Nodes (which come and go) and the
		// agents' heartbeat Leases, watched only where the agents keep them (the operator's
		// cache holds no others). Without agents, neither is read.
		b = b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return singleton(ctx, nil)
		}), builder.OnlyMetadata, builder.WithPredicates(bridge.NodesComeAndGo)).
			Watches(&coordinationv1.Lease{}, bridge.LeaseHandler(reader, r.Clock, r.AgentNamespace, func(context.Context, string) []reconcile.Request {
				return singleton(ctx, nil)
			})).
			// Which nodes hold DRBD data: SingleNode or MultiNode storage.
			Watches(&nwv1.NodewrightAgentStatus{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
				return singleton(ctx, nil)
			}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				before, okBefore := e.ObjectOld.(*nwv1.NodewrightAgentStatus)
				after, okAfter := e.ObjectNew.(*nwv1.NodewrightAgentStatus)
				return !okBefore || !okAfter || HoldsData(before) != HoldsData(after)
			}}))
	}
	return b.Complete(r)
}

// namesProfile: obj is the EdgeProfile the cluster names.
func namesProfile(nwc *nwv1.NodewrightCluster, obj client.Object) bool {
	return nwc.Spec.ProfileRef != nil && nwc.Spec.ProfileRef.Name == obj.GetName()
}

// daemonSetPodsChanged passes only the updates that can change DaemonSetAvailable, or whether
// the DaemonSet has pods (the handover).
func daemonSetPodsChanged(e event.UpdateEvent) bool {
	before, okBefore := e.ObjectOld.(*appsv1.DaemonSet)
	after, okAfter := e.ObjectNew.(*appsv1.DaemonSet)
	return !okBefore || !okAfter ||
		before.Status.DesiredNumberScheduled != after.Status.DesiredNumberScheduled ||
		before.Status.NumberReady != after.Status.NumberReady ||
		before.Status.CurrentNumberScheduled != after.Status.CurrentNumberScheduled ||
		before.Status.NumberMisscheduled != after.Status.NumberMisscheduled
}

// observe reads what the rollup of the mode in effect reads: in Managed, the agents (which the
// handover read); in Observe, the legacy ConfigMap and DaemonSet; in both, the legacy
// DaemonSet's Warning Events (none come once it is gone; those seen stay among the warnings).
func (r *Reconciler) observe(ctx context.Context, observedAs *nwv1.NodewrightCluster, h handover, now time.Time, staleAfter time.Duration) (observed, error) {
	o := observed{now: now, staleAfter: staleAfter, cluster: observedAs, agentNamespace: r.AgentNamespace}
	var err error
	if h.Mode == nwv1.ManagementManaged {
		o.managed, o.agents = true, h.readiness.Agents
		if o.holdingData, err = r.holdingData(ctx, o.agents); err != nil {
			return o, err
		}
	} else {
		if o.configMap, err = bridge.ObserveConfigMap(ctx, r.Client, observedAs); err != nil {
			return o, err
		}
		if o.daemonSet, err = bridge.DaemonSet(ctx, r.Client, observedAs); err != nil {
			return o, err
		}
	}
	var events corev1.EventList
	// Read only: the cache's own objects, not copies.
	if err := r.Client.List(ctx, &events, client.MatchingFields{eventComponentIndex: observedAs.Spec.Legacy.EventComponent},
		client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing the legacy Warning Events: %w", err)
	}
	o.events = events.Items
	return o, nil
}

// Reconcile decides the management mode in effect, observes what its rollup reads, and writes
// the status when, and only when, it changed; it asks to be woken when the next heartbeat (or
// agent) goes stale.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Before reading: see legacy.QuietHeartbeat.
	now := r.Clock.Now()
	nwc := &nwv1.NodewrightCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, nwc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	verdict, err := r.resolveProfile(ctx, nwc)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The legacy names and threshold in force: the profile's, once it verified.
	observedAs := nwc
	if verdict.profile != nil {
		observedAs = bridge.WithProfile(nwc, verdict.profile)
	}
	if err := bridge.InScope(observedAs, r.LegacyNamespace); err != nil {
		// The spec (or its profile) must change first, and that wakes the controller.
		r.Recorder.Event(nwc, corev1.EventTypeWarning, EventLegacyNotRead, err.Error())
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	staleAfter := bridge.StaleAfter(observedAs)
	h, err := r.decideHandover(ctx, nwc, observedAs, now, staleAfter)
	if err != nil {
		return ctrl.Result{}, err
	}
	o, err := r.observe(ctx, observedAs, h, now, staleAfter)
	if err != nil {
		return ctrl.Result{}, err
	}
	status, anomalies, deadline := computeStatus(o)
	setProfileStatus(&status, verdict)
	setHandover(&status, h)
	status.OperatorVersion = r.Version
	// A handover that waits for agents looks again when the next one goes stale.
	if next := management.NextStale(h.readiness.Agents); !next.IsZero() && (deadline.IsZero() || next.Before(deadline)) {
		deadline = next
	}
	// Recorded before the status that remembers them is written: a crash in between observes
	// them again, and the records, built with the same IDs, are not added twice.
	r.recordLegacy(ctx, nwc, o.configMap.Legacy, status, anomalies, now)
	if err := r.recordSwitch(ctx, nwc, h, now); err != nil {
		return ctrl.Result{}, err
	}
	before := nwc.Status
	if !equality.Semantic.DeepEqual(status, nwc.Status) {
		base := nwc.DeepCopy()
		nwc.Status = status
		// A conflict means a newer object exists; the error retries with it.
		if err := r.Client.Status().Patch(ctx, nwc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the NodewrightCluster status: %w", err)
		}
	}
	// Only once the status that records them is written: the optimistic lock then makes sure
	// that a retry, or a reconcile from a stale cache, does not raise them a second time.
	for _, a := range anomalies {
		r.Recorder.Event(nwc, corev1.EventTypeWarning, string(a.Kind), a.Message)
	}
	r.announceHandover(ctx, nwc, before, h)
	if deadline.IsZero() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: deadline.Sub(now)}, nil
}

// holdingData lists the agents' nodes whose agents report DRBD data on the node.
func (r *Reconciler) holdingData(ctx context.Context, agents []management.Agent) ([]string, error) {
	var out []string
	for _, a := range agents {
		as := &nwv1.NodewrightAgentStatus{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: a.Node}, as); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		if HoldsData(as) {
			out = append(out, a.Node)
		}
	}
	return out, nil
}

// HoldsData reports whether the agent reports a DRBD resource with a disk on its node (not a
// diskless client or tiebreaker).
func HoldsData(as *nwv1.NodewrightAgentStatus) bool {
	if as.Status.Reporter != nwv1.ReporterAgent || as.Status.Storage == nil {
		return false
	}
	for _, res := range as.Status.Storage.ResourceStatuses {
		for _, v := range res.Volumes {
			if !v.Client && v.DiskState != "Diskless" {
				return true
			}
		}
	}
	return false
}
