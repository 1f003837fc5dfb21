package site

import (
	"context"
	"fmt"
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

// registerNode creates or refreshes the site's Node: Ready, reachable at the loopback address
// with the kubelet's port, which is where the API server sends pods/log requests.
func (s *Site) registerNode(ctx context.Context, port int) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   s.opts.NodeName,
		Labels: map[string]string{corev1.LabelHostname: s.opts.NodeName, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"},
	}}
	if err := s.client.Create(ctx, node); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("site: registering Node %s: %w", node.Name, err)
		}
		if err := s.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return fmt.Errorf("site: reading Node %s: %w", node.Name, err)
		}
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "the local site's kubelet is ready", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		// Only an InternalIP: the API server prefers a Hostname address, which would not resolve.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: siteIP}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: "nodewright-site", OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "nodewright-site://1",
		},
	}
	status := node.Status
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

// leaseRenewInterval is how often the site renews its Node's Lease, as a kubelet does.
const leaseRenewInterval = 10 * time.Second

// heartbeat renews the Node's Lease in kube-node-lease until ctx ends, so that the node
// lifecycle controller of a cluster that runs one keeps the site's Node Ready.
func (s *Site) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(leaseRenewInterval)
	defer ticker.Stop()
	for {
		if err := s.renewLease(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.Error(err, "Renewing the site's Node Lease", "node", s.opts.NodeName)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (s *Site) renewLease(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: s.opts.NodeName}}
	err := s.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(lease), lease)
	if apierrors.IsNotFound(err) {
		lease.Spec = coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(s.opts.NodeName), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now,
		}
		return s.client.Create(ctx, lease)
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	return s.client.Update(ctx, lease)
}

// unregisterNode deletes the Node when the site stops; the caller's context is over by then.
// The bound only keeps a dead API server from holding the stop forever: a busy one may take
// many seconds.
func (s *Site) unregisterNode() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.opts.NodeName}}
	if err := ignoreGone(s.client.Delete(ctx, node)); err != nil {
		s.opts.Logger.Error(err, "Deleting the site's Node", "node", node.Name)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: s.opts.NodeName}}
	if err := ignoreGone(s.client.Delete(ctx, lease)); err != nil {
		s.opts.Logger.Error(err, "Deleting the site's Node Lease", "node", node.Name)
	}
}
