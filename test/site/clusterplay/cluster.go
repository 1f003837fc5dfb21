// Package clusterplay writes, for a workflow's tests and benchmarks, what the operator's other
// controllers would have written for a healthy cluster handed over to Nodewright: the
// NodewrightCluster's status (Managed, MultiNode, every heartbeat fresh, an EdgeProfile in
// force) and the EdgeProfile itself, and the nodes' roles. Nothing here runs: the objects are
// written once, as those controllers write them (their own tests prove that they do).
package clusterplay

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// ProfileName is the EdgeProfile Managed writes.
const ProfileName = "played-site"

// Managed writes the EdgeProfile (the storage bond bond in mode, its switch carrying allowed
// too) and the NodewrightCluster, Managed and healthy with that profile in force. The returned
// function deletes both.
func Managed(ctx context.Context, c client.Client, bond string, mode nwv1.BondMode, allowed ...nwv1.BondMode) (func(), error) {
	p := &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: ProfileName}, Spec: nwv1.EdgeProfileSpec{
		Version: "1.0.0", Topology: nwv1.TopologyThreeNode, OS: nwv1.HostOSSystemdNetworkd,
		Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR},
		Network: nwv1.ProfileNetwork{BondInterface: bond, BondMode: mode, AllowedBondModes: allowed}}}
	if err := c.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	cluster := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{Management: nwv1.ManagementManaged, ProfileRef: &nwv1.ProfileReference{Name: p.Name},
			Legacy: nwv1.LegacySource{
				ConfigMapRef: nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"},
				DaemonSetRef: nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"}, EventComponent: "absent"}}}
	cleanup := func() {
		_ = c.Delete(context.Background(), cluster)
		_ = c.Delete(context.Background(), p)
	}
	if err := c.Create(ctx, cluster); err != nil {
		cleanup()
		return nil, err
	}
	cluster.Status.Phase = nwv1.ClusterMultiNode
	cluster.Status.Management = nwv1.ManagementManaged
	cluster.Status.Profile = &nwv1.ActiveProfile{Name: p.Name, Version: p.Spec.Version, Digest: "sha256:" + strings.Repeat("0", 64)}
	meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{Type: nwv1.ConditionHeartbeatsFresh, Status: metav1.ConditionTrue,
		Reason: nwv1.ReasonHeartbeatsFresh, Message: "every node's heartbeat is fresh"})
	meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{Type: nwv1.ConditionManagementApplied, Status: metav1.ConditionTrue,
		Reason: nwv1.ReasonHandedOver, Message: "Nodewright manages the nodes"})
	if err := c.Status().Update(ctx, cluster); err != nil {
		cleanup()
		return nil, err
	}
	return cleanup, nil
}

// SetRole writes node's role in its NodewrightAgentStatus, as the operator's bridge does.
func SetRole(ctx context.Context, c client.Client, node string, role nwv1.NodeRole) error {
	as := &nwv1.NodewrightAgentStatus{}
	if err := c.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
		return err
	}
	base := as.DeepCopy()
	as.Status.Role = role
	return c.Status().Patch(ctx, as, client.MergeFrom(base))
}
