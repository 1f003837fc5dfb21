package nodewrightcluster

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/profile"
)

// profileVerdict is what became of the cluster's profileRef.
type profileVerdict struct {
	// profile is the EdgeProfile to apply; nil when none is (no ref, or it failed a check).
	profile *nwv1.EdgeProfile
	// active is what status.profile becomes: the applied profile, or the one applied before
	// when this one failed, so that a lower version is never applied after it.
	active *nwv1.ActiveProfile
	// condition is ProfileApplied; nil when there is no profileRef.
	condition *metav1.Condition
}

// resolveProfile checks the profile the cluster names, as the admission webhook did: it
// exists, its signature is one of its spec by a trusted key, and its version is not lower
// than the one in force. The webhook can be bypassed or deleted; this check cannot.
func (r *Reconciler) resolveProfile(ctx context.Context, nwc *nwv1.NodewrightCluster) (profileVerdict, error) {
	// status.profile stays when the ref is cleared: it is the last profile applied.
	v := profileVerdict{active: nwc.Status.Profile}
	if nwc.Spec.ProfileRef == nil {
		return v, nil
	}
	refuse := func(reason, format string, args ...any) (profileVerdict, error) {
		v.condition = &metav1.Condition{Type: nwv1.ConditionProfileApplied, Status: metav1.ConditionFalse, Reason: reason, ObservedGeneration: nwc.Generation,
			Message: fmt.Sprintf(format, args...) + "; the NodewrightCluster's own legacy names and threshold are used meanwhile"}
		return v, nil
	}
	name := nwc.Spec.ProfileRef.Name
	p := &nwv1.EdgeProfile{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return refuse(nwv1.ReasonProfileNotFound, "EdgeProfile %s does not exist", name)
		}
		return v, fmt.Errorf("reading EdgeProfile %s: %w", name, err)
	}
	active, err := r.Trust.Verify(ctx, p)
	if err != nil {
		if isTransient(err) {
			return v, err
		}
		return refuse(nwv1.ReasonProfileUnverified, "EdgeProfile %s is not applied: %v", name, err)
	}
	floor, err := r.Trust.Floor(ctx)
	if err != nil {
		return v, err
	}
	for _, before := range []string{floor, versionOf(nwc.Status.Profile)} {
		if err := profile.CheckUpgrade(before, p.Spec.Version); err != nil {
			return refuse(nwv1.ReasonProfileDowngrade, "EdgeProfile %s is not applied: %v", name, err)
		}
	}
	// The floor rises before the profile is in force: a crash in between leaves a floor no
	// lower than what was applied.
	if err := r.Trust.RaiseFloor(ctx, r.Client, p.Spec.Version); err != nil {
		return v, fmt.Errorf("raising the profile version floor to %s: %w", p.Spec.Version, err)
	}
	v.profile, v.active = p, &active
	v.condition = &metav1.Condition{Type: nwv1.ConditionProfileApplied, Status: metav1.ConditionTrue, Reason: nwv1.ReasonProfileApplied, ObservedGeneration: nwc.Generation,
		Message: fmt.Sprintf("EdgeProfile %s version %s (%s), signed by trusted key %s, is in force", name, active.Version, active.Digest, active.KeyID)}
	return v, nil
}

func versionOf(p *nwv1.ActiveProfile) string {
	if p == nil {
		return ""
	}
	return p.Version
}

// isTransient: the error is the API server's, not the profile's (reading the keys failed).
func isTransient(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// setProfileStatus writes the verdict into the status being computed.
func setProfileStatus(status *nwv1.NodewrightClusterStatus, v profileVerdict) {
	status.Profile = v.active
	if v.condition == nil {
		meta.RemoveStatusCondition(&status.Conditions, nwv1.ConditionProfileApplied)
		return
	}
	meta.SetStatusCondition(&status.Conditions, *v.condition)
}
