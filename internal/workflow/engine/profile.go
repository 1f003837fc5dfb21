package engine

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// ProfileInForce is the EdgeProfile in force, the one the NodewrightCluster verified and names
// in its status: what a cluster-wide workflow reads of the site. Nil when none is (no
// NodewrightCluster, no verified profile, or the profile gone).
func ProfileInForce(ctx context.Context, c client.Reader) (*nwv1.EdgeProfile, error) {
	nwc := &nwv1.NodewrightCluster{}
	if err := c.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if nwc.Status.Profile == nil {
		return nil, nil
	}
	p := &nwv1.EdgeProfile{}
	if err := c.Get(ctx, client.ObjectKey{Name: nwc.Status.Profile.Name}, p); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return p, nil
}
