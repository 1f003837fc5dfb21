package linstor

import (
	"context"
	"net/url"
)

// The LINSTOR gate (cmd/nodewright-linstor-gate, internal/linstorgate) holds LINSTOR's client
// certificate in the operator's place and forwards only what a replication upgrade asks of
// LINSTOR. The operator's client talks to it as to LINSTOR, with a bearer token (TokenFile).
const (
	// GateStampProp is the property the gate sets on every resource it creates, and the only
	// resources it deletes carry it: the replicas and tiebreakers a replication upgrade
	// placed, never a replica LINSTOR held before.
	GateStampProp = "Aux/nodewright.spectrocloud.com/placed-by"
	// GateStampValue is its value.
	GateStampValue = "nodewright-linstor-gate"
	// GateUpstreamPath is the gate's own read of where it forwards to.
	GateUpstreamPath = "/nodewright/v1/upstream"
)

// GateUpstream is where a LINSTOR gate forwards to: LINSTOR's base URL and the client Secret
// (namespace/name, empty without one), from the gate's own flags.
type GateUpstream struct {
	URL          string `json:"url"`
	ClientSecret string `json:"clientSecret,omitempty"`
}

// GateUpstream asks the LINSTOR gate this client talks to where it forwards (an *Error
// matching ErrNotFound from a LINSTOR controller, which has no such path).
func (c *Client) GateUpstream(ctx context.Context) (GateUpstream, error) {
	var out GateUpstream
	if err := c.get(ctx, "read the LINSTOR gate's upstream", GateUpstreamPath, url.Values{}, &out); err != nil {
		return GateUpstream{}, err
	}
	return out, nil
}
