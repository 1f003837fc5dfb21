// Package bridge is the shared part of the observation bridge's two controllers: reading the
// legacy DaemonSet's objects named by the NodewrightCluster, and mapping changes to those
// objects onto reconcile requests.
package bridge

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// The bridge only reads the legacy objects, and only in the legacy namespace (node-init
// here; the chart renders these Roles into its legacy.namespace) and, for Warning Events
// about Nodes, in default.
// +kubebuilder:rbac:groups="",namespace=node-init,resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,namespace=node-init,resources=daemonsets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=node-init,resources=events,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=default,resources=events,verbs=get;list;watch

// DefaultStaleAfter is the heartbeat staleness threshold when the spec leaves it unset.
const DefaultStaleAfter = 30 * time.Second

// ClusterKey is the name of the NodewrightCluster singleton.
var ClusterKey = types.NamespacedName{Name: nwv1.NodewrightClusterName}

// Observation is what the legacy ConfigMap said at one moment.
type Observation struct {
	// Found is false when the ConfigMap does not exist.
	Found    bool
	Legacy   legacy.Observation
	Problems []legacy.Problem
}

// ObserveConfigMap reads and parses the legacy ConfigMap the cluster names. A missing
// ConfigMap is an observation (Found false), not an error.
func ObserveConfigMap(ctx context.Context, c client.Reader, cluster *nwv1.NodewrightCluster) (Observation, error) {
	cm := &corev1.ConfigMap{}
	ref := cluster.Spec.Legacy.ConfigMapRef
	if err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return Observation{}, nil
		}
		return Observation{}, fmt.Errorf("reading the legacy ConfigMap %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	obs, problems := legacy.Parse(cm.Data)
	return Observation{Found: true, Legacy: obs, Problems: problems}, nil
}

// StaleAfter is the cluster's heartbeat threshold.
func StaleAfter(cluster *nwv1.NodewrightCluster) time.Duration {
	if d := cluster.Spec.HeartbeatStaleAfter.Duration; d > 0 {
		return d
	}
	return DefaultStaleAfter
}

// IsConfigMap reports whether obj is the legacy ConfigMap the cluster names.
func IsConfigMap(cluster *nwv1.NodewrightCluster, obj client.Object) bool {
	ref := cluster.Spec.Legacy.ConfigMapRef
	return obj.GetNamespace() == ref.Namespace && obj.GetName() == ref.Name
}

// IsDaemonSet reports whether obj is the legacy DaemonSet the cluster names.
func IsDaemonSet(cluster *nwv1.NodewrightCluster, obj client.Object) bool {
	ref := cluster.Spec.Legacy.DaemonSetRef
	return obj.GetNamespace() == ref.Namespace && obj.GetName() == ref.Name
}

// IsLegacyEvent reports whether ev was emitted by the legacy DaemonSet the cluster names.
func IsLegacyEvent(cluster *nwv1.NodewrightCluster, ev *corev1.Event) bool {
	component := cluster.Spec.Legacy.EventComponent
	return ev.Source.Component == component || ev.ReportingController == component
}

// DaemonSet reads the legacy DaemonSet; nil when it does not exist.
func DaemonSet(ctx context.Context, c client.Reader, cluster *nwv1.NodewrightCluster) (*appsv1.DaemonSet, error) {
	ds := &appsv1.DaemonSet{}
	ref := cluster.Spec.Legacy.DaemonSetRef
	if err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, ds); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the legacy DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return ds, nil
}

// InScope reports, as an error naming the field, a legacy object the cluster names outside
// namespace ns, the only namespace the operator reads legacy objects in (--legacy-namespace).
// An empty ns means every namespace is read.
func InScope(cluster *nwv1.NodewrightCluster, ns string) error {
	if ns == "" {
		return nil
	}
	refs := []struct {
		field string
		ref   nwv1.NamespacedObjectReference
	}{
		{"spec.legacy.configMapRef.namespace", cluster.Spec.Legacy.ConfigMapRef},
		{"spec.legacy.daemonSetRef.namespace", cluster.Spec.Legacy.DaemonSetRef},
	}
	for _, r := range refs {
		if r.ref.Namespace != ns {
			return fmt.Errorf("%s: %q is not read by the operator, which reads the legacy objects only in namespace %q (its --legacy-namespace, the chart's legacy.namespace)",
				r.field, r.ref.Namespace, ns)
		}
	}
	return nil
}
