// Package clusterplay writes, for a workflow's tests and benchmarks, what the operator's other
// controllers would have written for a healthy cluster handed over to Nodewright: the
// NodewrightCluster's status (Managed, MultiNode, every heartbeat fresh, an EdgeProfile in
// force) and the EdgeProfile itself, signed, with the trusted public key where the chart
// keeps it (the nodes' agents verify the profile themselves), and the nodes' roles. Nothing
// here runs: the objects are written once, as those controllers write them (their own tests
// prove that they do).
package clusterplay

import (
	"context"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/profile"
)

// ProfileName is the EdgeProfile Managed writes.
const ProfileName = "played-site"

// KeysConfigMap holds the played site's trusted public key, where the chart keeps the trusted
// keys (nodewright-profile-keys in the release's namespace) and where an agent reads them by
// default (its --profile-keys-configmap).
var KeysConfigMap = types.NamespacedName{Namespace: "nodewright-system", Name: "nodewright-profile-keys"}

var signing struct {
	once sync.Once
	key  *profile.PrivateKey
	err  error
}

// SigningKey is the played site's profile signing key, made once per process.
func SigningKey() (*profile.PrivateKey, error) {
	signing.once.Do(func() {
		priv, _, err := profile.GenerateKeyPair(nil)
		if err != nil {
			signing.err = err
			return
		}
		signing.key, signing.err = profile.LoadPrivateKey(priv, nil)
	})
	return signing.key, signing.err
}

// Sign signs p's spec with the played site's key, as cosign sign-blob would.
func Sign(p *nwv1.EdgeProfile) error {
	key, err := SigningKey()
	if err != nil {
		return err
	}
	p.Signature, err = profile.Sign(p.Spec, key)
	return err
}

// TrustKeys writes KeysConfigMap (and its namespace, if missing) with the public half of the
// played site's key alone, as the chart writes profile.trustedKeys.
func TrustKeys(ctx context.Context, c client.Client) error {
	key, err := SigningKey()
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KeysConfigMap.Namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: KeysConfigMap.Namespace, Name: KeysConfigMap.Name},
		Data: map[string]string{"cosign.pub": string(key.Public().PEM())}}
	err = c.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		err = c.Update(ctx, cm)
	}
	return err
}

// Managed writes the EdgeProfile (the storage bond bond in mode, its switch carrying allowed
// too), signed with the played site's key, which it makes the trusted one (TrustKeys), and the
// NodewrightCluster, Managed and healthy with that profile in force. The returned function
// deletes the profile and the cluster.
func Managed(ctx context.Context, c client.Client, bond string, mode nwv1.BondMode, allowed ...nwv1.BondMode) (func(), error) {
	return ManagedWith(ctx, c, func(s *nwv1.EdgeProfileSpec) {
		s.Network = nwv1.ProfileNetwork{BondInterface: bond, BondMode: mode, AllowedBondModes: allowed}
	})
}

// ManagedWith is Managed with the profile's spec as change makes it (its network, its OS and
// the OS images it allows, say), before it is signed.
func ManagedWith(ctx context.Context, c client.Client, change func(*nwv1.EdgeProfileSpec)) (func(), error) {
	p := &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: ProfileName}, Spec: nwv1.EdgeProfileSpec{
		Version: "1.0.0", Topology: nwv1.TopologyThreeNode, OS: nwv1.HostOSSystemdNetworkd,
		Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR}}}
	change(&p.Spec)
	if err := Sign(p); err != nil {
		return nil, err
	}
	if err := TrustKeys(ctx, c); err != nil {
		return nil, err
	}
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
