package management

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The handover reads every Node (their names only), the agents' heartbeat Leases, and the
// legacy DaemonSet's pods (through the API server: the operator's cache holds only its own
// pods).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=nodewright-agent,resources=leases,verbs=get;list;watch

// Reader reads what the handover rules judge.
type Reader struct {
	// Cache reads the Nodes, the Leases and the legacy DaemonSet (the operator's cache, or the
	// API server).
	Cache client.Reader
	// Live reads the legacy DaemonSet's pods from the API server.
	Live client.Reader
	// AgentNamespace is where the agents keep their heartbeat Leases; empty: no agents.
	AgentNamespace string
}

// NodeList is an empty list of the Nodes' metadata, which is all the handover reads of them.
func NodeList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	return l
}

// NodeMeta is an empty Node's metadata, for a metadata-only watch of Nodes.
func NodeMeta() *metav1.PartialObjectMetadata {
	n := &metav1.PartialObjectMetadata{}
	n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	return n
}

// Nodes are the names of the cluster's Nodes, sorted.
func (r Reader) Nodes(ctx context.Context) ([]string, error) {
	list := NodeList()
	if err := r.Cache.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing the Nodes: %w", err)
	}
	names := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return NodeNames(names), nil
}

// Agents judges every Node's agent at now: a Lease in AgentNamespace named after the node,
// renewed within staleAfter. Without an agents' namespace there is no agent to judge, and no
// Node is read: the operator then watches neither (and its role, an older chart's say, need
// not allow it).
func (r Reader) Agents(ctx context.Context, now time.Time, staleAfter time.Duration) ([]Agent, error) {
	if r.AgentNamespace == "" {
		return nil, nil
	}
	nodes, err := r.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var leases coordinationv1.LeaseList
	if err := r.Cache.List(ctx, &leases, client.InNamespace(r.AgentNamespace)); err != nil {
		return nil, fmt.Errorf("listing the agents' heartbeat Leases in %s: %w", r.AgentNamespace, err)
	}
	return Agents(nodes, leases.Items, now, staleAfter), nil
}

// Legacy finds the legacy DaemonSet the cluster names (with its profile's names in force) and
// its pods that have not ended.
func (r Reader) Legacy(ctx context.Context, c *nwv1.NodewrightCluster) (LegacyPods, error) {
	ref := c.Spec.Legacy.DaemonSetRef
	out := LegacyPods{DaemonSet: ref}
	ds := &appsv1.DaemonSet{}
	if err := r.Cache.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, ds); err != nil {
		if apierrors.IsNotFound(err) {
			return out, nil
		}
		return out, fmt.Errorf("reading the legacy DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	out.Found = true
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return out, fmt.Errorf("the legacy DaemonSet %s/%s's selector: %w", ref.Namespace, ref.Name, err)
	}
	var pods corev1.PodList
	if err := r.Live.List(ctx, &pods, client.InNamespace(ref.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return out, fmt.Errorf("listing the legacy DaemonSet %s/%s's pods: %w", ref.Namespace, ref.Name, err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out.Pods = append(out.Pods, p.Name)
		}
	}
	slices.Sort(out.Pods)
	return out, nil
}

// Readiness reads everything the switch to Managed depends on, for the cluster c (with its
// profile's names and threshold in force) at now.
func (r Reader) Readiness(ctx context.Context, c *nwv1.NodewrightCluster, now time.Time, staleAfter time.Duration) (Readiness, error) {
	agents, err := r.Agents(ctx, now, staleAfter)
	if err != nil {
		return Readiness{}, err
	}
	legacy, err := r.Legacy(ctx, c)
	if err != nil {
		return Readiness{}, err
	}
	return Readiness{AgentNamespace: r.AgentNamespace, StaleAfter: staleAfter, Agents: agents, Legacy: legacy}, nil
}
