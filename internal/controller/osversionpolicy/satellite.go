package osversionpolicy

import (
	"context"

	"github.com/spectrocloud/nodewright/internal/nodehealth"
)

const (
	satelliteTimeout = nodehealth.SatelliteTimeout
	satellitePoll    = nodehealth.SatellitePoll
)

// linstorUnchecked is what the Preflight says when the operator has no LINSTOR gate.
const linstorUnchecked = "the LINSTOR satellites are not checked (not at the Preflight, not in the soak): the operator has no LINSTOR gate (--linstor-gate-url, the chart's linstor.url)"

// satellitesRed says which of the nodes' LINSTOR satellites is not ONLINE through the
// operator's LINSTOR gate (nodehealth.Satellites.Red); checked is false without a gate.
func (r *Reconciler) satellitesRed(ctx context.Context, nodes ...string) (red string, checked bool) {
	return r.satellites.Red(ctx, r.LINSTOR, nodes...)
}
