package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
)

// The kinds the page knows, as it names them.
const (
	kindCluster   = "NodewrightCluster"
	kindAgent     = "NodewrightAgentStatus"
	kindMigration = "VMVolumeMigration"
	// kindFlip are the BondModeFlipPlans and kindUpgrade the ReplicationUpgrades,
	// cluster-scoped: shown whatever the page's namespace.
	kindFlip    = "BondModeFlipPlan"
	kindUpgrade = "ReplicationUpgrade"
	// kindOS are the OSVersionPolicies, cluster-scoped as well.
	kindOS      = "OSVersionPolicy"
	kindProfile = "EdgeProfile"
	// kindLegacy is the legacy DaemonSet's ConfigMap: its heartbeats are live, where the
	// agent statuses record only when freshness changed.
	kindLegacy = "LegacyConfigMap"
	// kindLegacyEvent are the Events about that ConfigMap (the DaemonSet's state changes).
	kindLegacyEvent = "LegacyEvent"
	// kindTrail is the local audit trail's folder, for its problems.
	kindTrail = "AuditTrail"
)

// source is one watch: a kind, where, and how an object is shown to the page.
type source struct {
	kind      string
	namespace string
	fields    fields.Selector
	newList   func() client.ObjectList
	example   client.Object
	// encode turns an object into what the page gets; by default the object without its
	// managed fields.
	encode func(client.Object) any
	// observe, if set, sees every object upserted.
	observe func(ctx context.Context, gen uint64, obj client.Object)
}

// startLocked begins a run: a watch per kind, and the trail's folder.
func (h *hub) startLocked() {
	h.runs++
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{gen: h.runs, ctx: ctx, cancel: cancel, progress: copyProgressSampler{jobs: map[string]sampling{}}}
	h.run = r
	sources := h.memberSources()
	if h.fleet {
		sources = fleetSources()
	}
	for _, src := range sources {
		r.wg.Go(func() { h.inform(ctx, r.gen, src) })
	}
	if h.trail.given() {
		// The files may have changed while nothing watched them.
		h.trail.invalidate()
		r.wg.Go(func() {
			h.trail.watch(ctx, func() { h.trailChanged(r.gen) }, func(msg string) { h.trailProblem(r.gen, msg) })
		})
	}
}

// memberSources are the watches of a page pointed at a Nodewright cluster.
func (h *hub) memberSources() []source {
	sources := []source{
		{kind: kindCluster, fields: fields.OneTermEqualSelector("metadata.name", nwv1.NodewrightClusterName),
			newList: func() client.ObjectList { return &nwv1.NodewrightClusterList{} }, example: &nwv1.NodewrightCluster{},
			observe: h.observeCluster},
		{kind: kindAgent, newList: func() client.ObjectList { return &nwv1.NodewrightAgentStatusList{} }, example: &nwv1.NodewrightAgentStatus{}},
		{kind: kindProfile, newList: func() client.ObjectList { return &nwv1.EdgeProfileList{} }, example: &nwv1.EdgeProfile{}},
		{kind: kindMigration, namespace: h.namespace,
			newList: func() client.ObjectList { return &nwv1.VMVolumeMigrationList{} }, example: &nwv1.VMVolumeMigration{},
			observe: h.observeMigration},
		{kind: kindFlip, newList: func() client.ObjectList { return &nwv1.BondModeFlipPlanList{} }, example: &nwv1.BondModeFlipPlan{},
			encode: encodeFlip},
		{kind: kindUpgrade, newList: func() client.ObjectList { return &nwv1.ReplicationUpgradeList{} }, example: &nwv1.ReplicationUpgrade{},
			encode: encodeUpgrade},
		{kind: kindOS, newList: func() client.ObjectList { return &nwv1.OSVersionPolicyList{} }, example: &nwv1.OSVersionPolicy{},
			encode: encodeOSPolicy},
	}
	if h.viewNamespace != "" {
		sources = append(sources, namespaceSources(h.viewNamespace)...)
	}
	return sources
}

// inform runs an informer for src with the user's client until ctx ends.
func (h *hub) inform(ctx context.Context, gen uint64, src source) {
	opts := func(raw metav1.ListOptions) *client.ListOptions {
		return &client.ListOptions{Namespace: src.namespace, FieldSelector: src.fields, Raw: &raw}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, raw metav1.ListOptions) (runtime.Object, error) {
			list := src.newList()
			if err := h.client.List(ctx, list, opts(raw)); err != nil {
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, raw metav1.ListOptions) (watch.Interface, error) {
			return h.client.Watch(ctx, src.newList(), opts(raw))
		},
	}
	inf := cache.NewSharedIndexInformer(lw, src.example, 0, cache.Indexers{})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		h.setProblem(gen, src.kind, describeWatchError(src, err))
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.informed(ctx, gen, src, obj) },
		UpdateFunc: func(_, obj any) { h.informed(ctx, gen, src, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(client.Object); ok {
				h.remove(gen, src.kind, objectKey(o))
			}
		},
	})
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			h.markSynced(gen, src.kind)
		}
	}()
	inf.RunWithContext(ctx)
}

func (h *hub) informed(ctx context.Context, gen uint64, src source, obj any) {
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	var shown any
	if src.encode != nil {
		shown = src.encode(o)
	} else {
		c := o.DeepCopyObject().(client.Object)
		c.SetManagedFields(nil)
		shown = c
	}
	data, err := json.Marshal(shown)
	if err != nil {
		return
	}
	h.upsert(gen, src.kind, objectKey(o), data)
	if src.observe != nil {
		src.observe(ctx, gen, o)
	}
}

func objectKey(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// describeWatchError says why a kind cannot be shown, in the user's terms.
func describeWatchError(src source, err error) string {
	where := "in any namespace"
	if src.namespace != "" {
		where = "in namespace " + src.namespace
	}
	switch {
	case src.kind == kindMember && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err)):
		return fmt.Sprintf("this cluster does not serve %s: it is not a fleet hub (start the UI with --fleet against the hub's kubeconfig context, where nodewright-fleet runs): %v", src.kind, err)
	case kubevirtKinds[src.kind] && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err)):
		return fmt.Sprintf("the cluster does not serve %s (is KubeVirt installed?): %v", src.kind, err)
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("your kubeconfig's user may not list or watch %s %s: %v", src.kind, where, err)
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the cluster does not serve %s (is Nodewright installed?): %v", src.kind, err)
	}
	return fmt.Sprintf("watching %s: %v", src.kind, err)
}

// observeCluster records the legacy state the cluster shows in the timeline, and points the
// legacy watches at the ConfigMap the cluster observes (its profile's, when one is in force).
func (h *hub) observeCluster(ctx context.Context, gen uint64, obj client.Object) {
	nwc, ok := obj.(*nwv1.NodewrightCluster)
	if !ok {
		return
	}
	effective := bridge.Effective(ctx, h.client, nwc)
	ref := effective.Spec.Legacy.ConfigMapRef

	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.current(gen) {
		return
	}
	if entry, ok := h.timeline.observe(nwc, time.Now()); ok {
		h.broadcastLocked(newEvent("transition", entry))
	}
	key := ref.Namespace + "/" + ref.Name
	if ref.Name == "" || key == h.run.legacy {
		return
	}
	if h.run.legacyCancel != nil {
		h.run.legacyCancel()
		h.resetLocked(kindLegacy)
		h.resetLocked(kindLegacyEvent)
	}
	legacyCtx, cancel := context.WithCancel(h.run.ctx)
	h.run.legacy, h.run.legacyCancel = key, cancel
	cm := source{kind: kindLegacy, namespace: ref.Namespace, fields: fields.OneTermEqualSelector("metadata.name", ref.Name),
		newList: func() client.ObjectList { return &corev1.ConfigMapList{} }, example: &corev1.ConfigMap{},
		encode: func(o client.Object) any {
			c := o.(*corev1.ConfigMap)
			return map[string]any{"namespace": c.Namespace, "name": c.Name, "data": c.Data}
		}}
	events := source{kind: kindLegacyEvent, namespace: ref.Namespace,
		fields: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", "ConfigMap"),
			fields.OneTermEqualSelector("involvedObject.name", ref.Name)),
		newList: func() client.ObjectList { return &corev1.EventList{} }, example: &corev1.Event{},
		encode: encodeEvent}
	r := h.run
	for _, src := range []source{cm, events} {
		r.wg.Go(func() { h.inform(legacyCtx, gen, src) })
	}
}

// shownEvent is what the page needs of an Event.
type shownEvent struct {
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message"`
	Component string    `json:"component"`
	Time      time.Time `json:"time"`
	Count     int32     `json:"count"`
}

func encodeEvent(o client.Object) any {
	ev := o.(*corev1.Event)
	at := ev.LastTimestamp.Time
	if at.IsZero() {
		at = ev.EventTime.Time
	}
	if at.IsZero() {
		at = ev.FirstTimestamp.Time
	}
	component := ev.Source.Component
	if component == "" {
		component = ev.ReportingController
	}
	return shownEvent{Type: ev.Type, Reason: ev.Reason, Message: ev.Message, Component: component, Time: at, Count: ev.Count}
}

// shownFlip is a flip with where it stands (bondflip.ProgressOf), so that the page shows what
// `kubectl nodewright flip watch` shows without deriving it again.
type shownFlip struct {
	*nwv1.BondModeFlipPlan
	Progress bondflip.Progress `json:"progress"`
}

func encodeFlip(o client.Object) any {
	f := o.(*nwv1.BondModeFlipPlan).DeepCopy()
	f.ManagedFields = nil
	return shownFlip{BondModeFlipPlan: f, Progress: bondflip.ProgressOf(f)}
}

// shownUpgrade is an upgrade with where it stands (replupgrade.ProgressOf), so that the page
// shows what `kubectl nodewright upgrade watch` shows without deriving it again.
type shownUpgrade struct {
	*nwv1.ReplicationUpgrade
	Progress replupgrade.Progress `json:"progress"`
}

func encodeUpgrade(o client.Object) any {
	u := o.(*nwv1.ReplicationUpgrade).DeepCopy()
	u.ManagedFields = nil
	return shownUpgrade{ReplicationUpgrade: u, Progress: replupgrade.ProgressOf(u)}
}

// shownOSPolicy is an OS version policy with where it stands (osupgrade.ProgressOf), so that
// the page shows what `kubectl nodewright os watch` shows without deriving it again.
type shownOSPolicy struct {
	*nwv1.OSVersionPolicy
	Progress osupgrade.Progress `json:"progress"`
}

func encodeOSPolicy(o client.Object) any {
	p := o.(*nwv1.OSVersionPolicy).DeepCopy()
	p.ManagedFields = nil
	return shownOSPolicy{OSVersionPolicy: p, Progress: osupgrade.ProgressOf(p)}
}
