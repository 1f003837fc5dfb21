// Package clusterspec applies the NodewrightCluster singleton's spec from a ConfigMap, the one
// the Helm chart writes from its values. The chart cannot create the NodewrightCluster itself:
// its admission webhooks are served by the operator the same release starts, so the object
// would be refused until the operator is ready. The operator applies it once it is, with
// server-side apply, as the owner of the fields the ConfigMap sets; fields set by others are
// left alone.
package clusterspec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightclusters,verbs=create
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightclusters,verbs=patch,resourceNames=nodewright

const (
	// Key is the ConfigMap key that holds the spec, as YAML.
	Key = "spec.yaml"
	// FieldManager owns the fields applied from the ConfigMap.
	FieldManager = "nodewright-cluster-spec"
	// EventInvalid is the reason of the Warning Event on the ConfigMap when its spec cannot be
	// applied; EventApplied of the Normal one when it was.
	EventInvalid = "InvalidClusterSpec"
	EventApplied = "ClusterSpecApplied"
	// DefaultRetryRefused is how soon a spec the API server refused is applied again.
	DefaultRetryRefused = 30 * time.Second
)

// Reconciler applies the spec in ConfigMap to the NodewrightCluster singleton.
type Reconciler struct {
	Client    client.Client
	Recorder  record.EventRecorder
	ConfigMap types.NamespacedName
	// RetryRefused is how soon a spec the API server refused is applied again;
	// DefaultRetryRefused when zero.
	RetryRefused time.Duration

	mu sync.Mutex
	// announced is the UID of the last NodewrightCluster whose creation was announced.
	announced types.UID
}

// SetupWithManager watches the ConfigMap, and the NodewrightCluster so that a deleted cluster
// object, or a field the chart sets edited by hand, is applied again (GenerationChangedPredicate
// passes creations and deletions; it filters only updates).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	theConfigMap := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == r.ConfigMap.Namespace && o.GetName() == r.ConfigMap.Name
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("clusterspec").
		For(&corev1.ConfigMap{}, builder.WithPredicates(theConfigMap)).
		Watches(&nwv1.NodewrightCluster{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: r.ConfigMap}}
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A profile the spec names may be created (or signed with a newly trusted key) after it:
		// admission refuses the spec until then.
		Watches(&nwv1.EdgeProfile{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: r.ConfigMap}}
		})).
		Complete(r)
}

// Reconcile applies the ConfigMap's spec. A ConfigMap that is gone leaves the cluster object
// as it is: it holds the site's history in its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	spec, err := Parse(cm.Data[Key])
	if err != nil {
		r.Recorder.Event(cm, corev1.EventTypeWarning, EventInvalid, err.Error())
		// Only a change to the ConfigMap can fix it.
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return ctrl.Result{}, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": fields}}
	u.SetAPIVersion(nwv1.GroupVersion.String())
	u.SetKind("NodewrightCluster")
	u.SetName(nwv1.NodewrightClusterName)
	// What the cache holds may be older than the object the apply meets: a cluster deleted
	// a moment ago is still there, or one created a moment ago is not yet. The apply's answer
	// says which object it wrote; see announceCreation.
	cached := &nwv1.NodewrightCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, cached); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	err = r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership)
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		// Refused by a webhook or the CRD's schema, which name the field; say where the spec
		// came from. A profile it names may not exist yet: the EdgeProfile watch wakes the
		// controller when one changes, and a steady retry covers the rest, rather than a
		// backoff that grows to many minutes.
		r.Recorder.Event(cm, corev1.EventTypeWarning, EventInvalid, "applying NodewrightCluster "+nwv1.NodewrightClusterName+": "+err.Error())
		retry := r.RetryRefused
		if retry == 0 {
			retry = DefaultRetryRefused
		}
		ctrl.LoggerFrom(ctx).Info("The NodewrightCluster spec was refused; retrying", "refusal", err.Error(), "after", retry)
		return ctrl.Result{RequeueAfter: retry}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the NodewrightCluster from ConfigMap %s: %w", req.NamespacedName, err)
	}
	r.announceCreation(cm, cached.UID, u.GetUID())
	return ctrl.Result{}, nil
}

// announceCreation records the Normal Event of a creation once per NodewrightCluster object.
// The object the apply wrote (applied) is new when the cache did not hold it (cached is
// another UID, or none) and it was not announced already: a reconcile that runs before the
// cache catches up sees the same object again, and must not announce it twice.
func (r *Reconciler) announceCreation(cm *corev1.ConfigMap, cached, applied types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if applied == "" || applied == cached || applied == r.announced {
		return
	}
	r.announced = applied
	r.Recorder.Event(cm, corev1.EventTypeNormal, EventApplied, "created NodewrightCluster "+nwv1.NodewrightClusterName)
}

// Parse reads a NodewrightCluster spec written as YAML, refusing unknown fields, and checks
// what the CRD's schema would refuse first, naming the field.
func Parse(text string) (nwv1.NodewrightClusterSpec, error) {
	var spec nwv1.NodewrightClusterSpec
	if text == "" {
		return spec, fmt.Errorf("%s: empty; want a NodewrightCluster spec", Key)
	}
	data, err := yaml.YAMLToJSONStrict([]byte(text))
	if err != nil {
		return spec, fmt.Errorf("%s: %w", Key, err)
	}
	// Decoded as the API server decodes: keys match fields case-sensitively (encoding/json,
	// which yaml.UnmarshalStrict uses, takes "configmapref" for configMapRef), a field unknown
	// or twice is named by its path, and a number is not taken for a string.
	strict, err := kjson.UnmarshalStrict(data, &spec, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		return spec, fmt.Errorf("%s: %w", Key, err)
	}
	l := spec.Legacy
	for _, f := range []struct{ field, value string }{
		{"legacy.configMapRef.namespace", l.ConfigMapRef.Namespace}, {"legacy.configMapRef.name", l.ConfigMapRef.Name},
		{"legacy.daemonSetRef.namespace", l.DaemonSetRef.Namespace}, {"legacy.daemonSetRef.name", l.DaemonSetRef.Name},
		{"legacy.eventComponent", l.EventComponent},
	} {
		if f.value == "" {
			return spec, fmt.Errorf("%s: %s is required", Key, f.field)
		}
	}
	if n := len(l.EventComponent); n > 128 {
		return spec, fmt.Errorf("%s: legacy.eventComponent: %d characters; at most 128", Key, n)
	}
	// The CRD's bounds, named here rather than as the API server's rule.
	if d := spec.HeartbeatStaleAfter.Duration; d != 0 && (d < time.Second || d > time.Hour) {
		return spec, fmt.Errorf("%s: heartbeatStaleAfter: %s is not between 1s and 1h", Key, d)
	}
	return spec, nil
}
