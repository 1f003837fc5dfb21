// Package nodewrightcluster is the controller of the NodewrightCluster singleton: it rolls the
// legacy DaemonSet's ConfigMap, DaemonSet and Events up into the cluster's status.
package nodewrightcluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodewrightcluster").
		For(&nwv1.NodewrightCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, bridge.ConfigMapHandler(reader, r.Clock, singleton, func(c legacy.Changes) []reconcile.Request {
			if !c.Cluster {
				return nil
			}
			return singleton(ctx, nil)
		})).
		Watches(&appsv1.DaemonSet{}, handler.EnqueueRequestsFromMapFunc(bridge.Matches(reader, bridge.IsDaemonSet, singleton)),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: daemonSetReadinessChanged})).
		Watches(&corev1.Event{}, handler.EnqueueRequestsFromMapFunc(bridge.Matches(reader, bridge.IsLegacyEventObject, singleton)),
			builder.WithPredicates(isWarning)).
		// The profile it names, and the keys that verify it.
		Watches(&nwv1.EdgeProfile{}, handler.EnqueueRequestsFromMapFunc(bridge.Matches(reader, namesProfile, singleton)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: bridge.ClusterKey}}
		}), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.Trust.ConfigMap.Namespace && o.GetName() == r.Trust.ConfigMap.Name
		}))).
		Complete(r)
}

// namesProfile: obj is the EdgeProfile the cluster names.
func namesProfile(nwc *nwv1.NodewrightCluster, obj client.Object) bool {
	return nwc.Spec.ProfileRef != nil && nwc.Spec.ProfileRef.Name == obj.GetName()
}

// daemonSetReadinessChanged passes only the updates that can change DaemonSetAvailable.
func daemonSetReadinessChanged(e event.UpdateEvent) bool {
	before, okBefore := e.ObjectOld.(*appsv1.DaemonSet)
	after, okAfter := e.ObjectNew.(*appsv1.DaemonSet)
	return !okBefore || !okAfter ||
		before.Status.DesiredNumberScheduled != after.Status.DesiredNumberScheduled ||
		before.Status.NumberReady != after.Status.NumberReady
}

// Reconcile observes the legacy objects and writes the status when, and only when, it
// changed; it asks to be woken when the next heartbeat goes stale.
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
	cm, err := bridge.ObserveConfigMap(ctx, r.Client, observedAs)
	if err != nil {
		return ctrl.Result{}, err
	}
	ds, err := bridge.DaemonSet(ctx, r.Client, observedAs)
	if err != nil {
		return ctrl.Result{}, err
	}
	var events corev1.EventList
	// Read only: the cache's own objects, not copies.
	if err := r.Client.List(ctx, &events, client.MatchingFields{eventComponentIndex: observedAs.Spec.Legacy.EventComponent},
		client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the legacy Warning Events: %w", err)
	}

	status, anomalies, deadline := computeStatus(observed{configMap: cm, daemonSet: ds, events: events.Items,
		now: now, staleAfter: bridge.StaleAfter(observedAs), cluster: observedAs})
	setProfileStatus(&status, verdict)
	// Recorded before the status that remembers them is written: a crash in between observes
	// them again, and the records, built with the same IDs, are not added twice.
	r.recordLegacy(ctx, nwc, cm.Legacy, status, anomalies, now)
	if !equality.Semantic.DeepEqual(status, nwc.Status) {
		before := nwc.DeepCopy()
		nwc.Status = status
		// A conflict means a newer object exists; the error retries with it.
		if err := r.Client.Status().Patch(ctx, nwc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the NodewrightCluster status: %w", err)
		}
	}
	// Only once the status that records them is written: the optimistic lock then makes sure
	// that a retry, or a reconcile from a stale cache, does not raise them a second time.
	for _, a := range anomalies {
		r.Recorder.Event(nwc, corev1.EventTypeWarning, string(a.Kind), a.Message)
	}
	if deadline.IsZero() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: deadline.Sub(now)}, nil
}
