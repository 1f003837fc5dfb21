// Package profiletrust verifies EdgeProfiles against the trusted public keys configured in
// the operator's namespace, and keeps the version floor beside them, for the admission
// webhook, the NodewrightCluster controller (which applies a profile only once it verified)
// and the EdgeProfile controller (which shows the verdict in each profile's
// SignatureVerified condition). It is a service, not a controller, so that the webhook and
// the controllers share it without importing one another.
package profiletrust

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/profile"
)

// The trusted keys and the version floor are ConfigMaps in the operator's namespace; the
// operator raises the floor, creating it the first time.
// +kubebuilder:rbac:groups="",namespace=nodewright-system,resources=configmaps,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",namespace=nodewright-system,resources=configmaps,verbs=update,resourceNames=nodewright-profile-floor

// DefaultTrustConfigMap holds the trusted public keys: every data key of the ConfigMap is one
// PEM document with one or more "PUBLIC KEY" blocks (cosign.pub, say).
var DefaultTrustConfigMap = types.NamespacedName{Namespace: "nodewright-system", Name: "nodewright-profile-keys"}

// Trust reads the trusted public keys from their ConfigMap.
type Trust struct {
	Reader    client.Reader
	ConfigMap types.NamespacedName
}

// Keys are the trusted public keys. No ConfigMap, or one without keys, is
// profile.ErrNoTrustedKeys; a key that does not parse is an error naming its data key. The
// node agent reads the same ConfigMap with the same code (profile.TrustedKeys).
func (t Trust) Keys(ctx context.Context) ([]profile.PublicKey, error) {
	cm := &corev1.ConfigMap{}
	if err := t.Reader.Get(ctx, t.ConfigMap, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: ConfigMap %s does not exist", profile.ErrNoTrustedKeys, t.ConfigMap)
		}
		return nil, fmt.Errorf("reading the trusted keys from ConfigMap %s: %w", t.ConfigMap, err)
	}
	return profile.TrustedKeys("ConfigMap "+t.ConfigMap.String(), cm.Data)
}

// Verify checks p's signature against the trusted keys and describes it as the profile in
// force. The error names what is wrong, starting with the field ("signature: ...").
func (t Trust) Verify(ctx context.Context, p *nwv1.EdgeProfile) (nwv1.ActiveProfile, error) {
	keys, err := t.Keys(ctx)
	if err != nil {
		return nwv1.ActiveProfile{}, fmt.Errorf("signature: cannot be verified: %w", err)
	}
	return profile.VerifyProfile(p, keys)
}

// Reason is the condition reason for a verification error.
func Reason(err error) string {
	switch {
	case err == nil:
		return nwv1.ReasonSignatureValid
	case errors.Is(err, profile.ErrUnsigned):
		return nwv1.ReasonUnsigned
	case errors.Is(err, profile.ErrNoTrustedKeys):
		return nwv1.ReasonNoTrustedKeys
	}
	return nwv1.ReasonSignatureInvalid
}

// floorName is the ConfigMap, beside the trusted keys, that remembers the highest profile
// version ever applied, under floorKey.
const (
	floorName = "nodewright-profile-floor"
	floorKey  = "version"
)

// Floor is the highest profile version ever applied to the cluster: no profile with a lower
// version is applied after it. It is kept in a ConfigMap of the operator's namespace, not in
// the NodewrightCluster, so that clearing spec.profileRef, re-creating the cluster object or
// writing its status does not lower it. "" when no profile was ever applied.
func (t Trust) Floor(ctx context.Context) (string, error) {
	cm := &corev1.ConfigMap{}
	err := t.Reader.Get(ctx, types.NamespacedName{Namespace: t.ConfigMap.Namespace, Name: floorName}, cm)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the profile version floor: %w", err)
	}
	return cm.Data[floorKey], nil
}

// RaiseFloor makes the floor at least version.
func (t Trust) RaiseFloor(ctx context.Context, c client.Client, version string) error {
	key := types.NamespacedName{Namespace: t.ConfigMap.Namespace, Name: floorName}
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Data: map[string]string{floorKey: version}}
		return c.Create(ctx, cm)
	}
	if err != nil {
		return err
	}
	if cmp, err := profile.CompareVersions(version, cm.Data[floorKey]); err == nil && cmp <= 0 {
		return nil
	}
	// The operator's cache hands out its own ConfigMaps, not copies.
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[floorKey] = version
	// Update carries the resourceVersion read: a concurrent raise is read again.
	return c.Update(ctx, cm)
}
