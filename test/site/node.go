package site

import (
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// registerNodes registers the kubelet's Node (registerNode) and a Node for each other site node
// that has none, which the site then owns (registered).
func (s *Site) registerNodes(ctx context.Context, port int) error {
	if err := s.registerNode(ctx, port); err != nil {
		return err
	}
	for _, name := range s.opts.Nodes {
		if name == s.opts.NodeName {
			continue
		}
		created, err := s.registerOtherNode(ctx, name)
		if created { // the site's from now on, even if its status could not be written
			s.registered = append(s.registered, name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// registerNode creates or refreshes the site's Node: Ready, reachable at the loopback address
// with the kubelet's port, which is where the API server sends pods/log requests.
func (s *Site) registerNode(ctx context.Context, port int) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.opts.NodeName, Labels: nodeLabels(s.opts.NodeName)}}
	if err := s.client.Create(ctx, node); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("site: registering Node %s: %w", node.Name, err)
		}
		if err := s.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return fmt.Errorf("site: reading Node %s: %w", node.Name, err)
		}
	}
	if err := s.writeNodeStatus(ctx, node, nodeStatus(port, "the local site's kubelet is ready")); err != nil {
		return err
	}
	return s.untaintReady(ctx, node)
}

// registerOtherNode creates the Node of a site node without a kubelet, Ready, unless a Node of
// that name exists already; it says whether it created one.
func (s *Site) registerOtherNode(ctx context.Context, name string) (bool, error) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nodeLabels(name)}}
	if err := s.client.Create(ctx, node); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("site: registering Node %s: %w", name, err)
	}
	if err := s.writeNodeStatus(ctx, node, nodeStatus(0, "the local site plays this node's VirtualMachineInstances; it has no kubelet")); err != nil {
		return true, err
	}
	return true, s.untaintReady(ctx, node)
}

// untaintReady removes the node.kubernetes.io/not-ready taint the API server puts on a new
// Node, as the node lifecycle controller does once the Node is Ready: a cluster without
// kube-controller-manager (a test's) has none, and the site places VMIs only on Nodes whose
// taints they tolerate.
func (s *Site) untaintReady(ctx context.Context, node *corev1.Node) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeNotReady && t.Effect == corev1.TaintEffectNoSchedule
		})
		if len(taints) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = taints
		return s.client.Update(ctx, node)
	})
	if err != nil {
		return fmt.Errorf("site: removing the not-ready taint of Node %s: %w", node.Name, err)
	}
	return nil
}

func nodeLabels(name string) map[string]string {
	return map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}
}

// nodeStatus is a Ready Node's status; port is its kubelet's, 0 for none.
func nodeStatus(port int, ready string) corev1.NodeStatus {
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: ready, LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		// Only an InternalIP: the API server prefers a Hostname address, which would not resolve.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: siteIP}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: "nodewright-site", OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "nodewright-site://1",
		},
	}
}

func (s *Site) writeNodeStatus(ctx context.Context, node *corev1.Node, status corev1.NodeStatus) error {
	// The node lifecycle controller of a cluster with kube-controller-manager (the demo's)
	// may write the Node between the read and this write: read again and retry.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return err
		}
		node.Status = status
		return s.client.Status().Update(ctx, node)
	})
	if err != nil {
		return fmt.Errorf("site: writing the status of Node %s: %w", node.Name, err)
	}
	return nil
}

// leaseRenewInterval is how often the site renews its Nodes' Leases, as a kubelet does.
const leaseRenewInterval = 10 * time.Second

// heartbeat renews the Leases in kube-node-lease of the kubelet's Node and of the Nodes the
// site registered until ctx ends, so that the node lifecycle controller of a cluster that
// runs one keeps them Ready.
func (s *Site) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(leaseRenewInterval)
	defer ticker.Stop()
	for {
		for _, name := range s.ownNodes() {
			if err := s.renewLease(ctx, name); err != nil && ctx.Err() == nil {
				s.opts.Logger.Error(err, "Renewing a site Node's Lease", "node", name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// ownNodes are the Nodes the site answers for: its kubelet's and those it registered.
func (s *Site) ownNodes() []string { return append([]string{s.opts.NodeName}, s.registered...) }

func (s *Site) renewLease(ctx context.Context, name string) error {
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name}}
	err := s.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(lease), lease)
	if apierrors.IsNotFound(err) {
		lease.Spec = coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now,
		}
		return s.client.Create(ctx, lease)
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	return s.client.Update(ctx, lease)
}

// unregisterNodes deletes the site's Nodes and their Leases when the site stops; the caller's
// context is over by then. The bound only keeps a dead API server from holding the stop
// forever: a busy one may take many seconds.
func (s *Site) unregisterNodes() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range s.ownNodes() {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := ignoreGone(s.client.Delete(ctx, node)); err != nil {
			s.opts.Logger.Error(err, "Deleting a site Node", "node", name)
		}
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name}}
		if err := ignoreGone(s.client.Delete(ctx, lease)); err != nil {
			s.opts.Logger.Error(err, "Deleting a site Node's Lease", "node", name)
		}
	}
}
