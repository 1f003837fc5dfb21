package bridge

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/profile"
)

// WithProfile is the cluster as observed: its legacy names and heartbeat threshold replaced
// by those of the EdgeProfile p, which the caller verified. A profile leaves what it does
// not name to the NodewrightCluster.
func WithProfile(nwc *nwv1.NodewrightCluster, p *nwv1.EdgeProfile) *nwv1.NodewrightCluster {
	out := nwc.DeepCopy()
	if p.Spec.Legacy != nil {
		out.Spec.Legacy = *p.Spec.Legacy
	}
	if d := p.Spec.Thresholds.HeartbeatStaleAfter; d.Duration > 0 {
		out.Spec.HeartbeatStaleAfter = d
	}
	return out
}

// Effective is the cluster with its profile's names and thresholds, when the status says a
// profile is in force (ProfileApplied) and the profile's spec is still the one that was
// verified (same digest); otherwise the cluster as it is. The watch handlers and the agent
// status controller read it; the NodewrightCluster controller, which verifies the profile,
// applies it with WithProfile.
func Effective(ctx context.Context, c client.Reader, nwc *nwv1.NodewrightCluster) *nwv1.NodewrightCluster {
	active := nwc.Status.Profile
	if active == nil || nwc.Spec.ProfileRef == nil || nwc.Spec.ProfileRef.Name != active.Name ||
		!meta.IsStatusConditionPresentAndEqual(nwc.Status.Conditions, nwv1.ConditionProfileApplied, metav1.ConditionTrue) {
		return nwc
	}
	p := &nwv1.EdgeProfile{}
	if err := c.Get(ctx, client.ObjectKey{Name: active.Name}, p); err != nil {
		return nwc
	}
	if digest, err := profile.Digest(p.Spec); err != nil || digest != active.Digest {
		return nwc
	}
	return WithProfile(nwc, p)
}
