package nodehealth

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spectrocloud/nodewright/internal/linstor"
)

const (
	// SatelliteTimeout bounds a read of the satellites: the reconcile waits on it, and
	// LINSTOR's client would otherwise wait its own request timeout (2 minutes by default).
	SatelliteTimeout = 10 * time.Second
	// SatellitePoll is how soon a check that waits for a satellite reads LINSTOR again:
	// LINSTOR has no watch (a ReplicationUpgrade's default poll).
	SatellitePoll = 2 * time.Second
)

// Satellites reads the nodes' LINSTOR satellites through the LINSTOR gate, with a client made
// once per configuration, as replicationupgrade makes its own: the operator holds no LINSTOR
// credential, the gate (nodewright-linstor-gate) does, and its allowlist lets the nodes be
// read. The zero value is ready to use.
type Satellites struct {
	mu     sync.Mutex
	client *linstor.Client
	ca     []byte
}

// get is the client for cfg. The CA of the gate's certificate is read at each call: a renewed
// one (the kubelet updates the mounted ConfigMap in place) makes a new client.
func (g *Satellites) get(cfg linstor.Config) (*linstor.Client, error) {
	if cfg.CAFile != "" {
		ca, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("the CA of the LINSTOR gate's certificate: %w", err)
		}
		cfg.CA, cfg.CAFile = ca, ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.client != nil && bytes.Equal(g.ca, cfg.CA) {
		return g.client, nil
	}
	c, err := linstor.New(cfg)
	if err != nil {
		return nil, err
	}
	g.client, g.ca = c, cfg.CA
	return c, nil
}

// Red says which of the nodes' LINSTOR satellites is not ONLINE, as LINSTOR's controller sees
// it through the LINSTOR gate cfg names ("LINSTOR satellite edge-2 OFFLINE"), which LINSTOR
// does not know (Piraeus registers each satellite under its Kubernetes Node's name), or that
// LINSTOR could not be read, and why; "" when each is ONLINE. One request, bounded by
// SatelliteTimeout: a LINSTOR that does not answer is a red check, not a hung reconcile nor an
// error retried. checked is false when cfg names no gate: nothing is read.
func (g *Satellites) Red(ctx context.Context, cfg linstor.Config, nodes ...string) (red string, checked bool) {
	if cfg.URL == "" {
		return "", false
	}
	unread := func(err error) string {
		what := "LINSTOR satellite "
		if len(nodes) > 1 {
			what = "LINSTOR satellites "
		}
		return fmt.Sprintf("%s%s could not be read: %v", what, strings.Join(nodes, ", "), err)
	}
	c, err := g.get(cfg)
	if err != nil {
		return unread(err), true
	}
	ctx, cancel := context.WithTimeout(ctx, SatelliteTimeout)
	defer cancel()
	known, err := c.Nodes(ctx, nodes...)
	if err != nil {
		return unread(err), true
	}
	var out []string
	for _, name := range nodes {
		var n *linstor.Node
		for i := range known {
			if strings.EqualFold(known[i].Name, name) {
				n = &known[i]
			}
		}
		switch {
		case n == nil:
			out = append(out, fmt.Sprintf("LINSTOR knows no node %s: no satellite of it is registered", name))
		case n.Online():
		case n.ConnectionStatus == "":
			out = append(out, fmt.Sprintf("LINSTOR satellite %s reports no connection status", name))
		default:
			out = append(out, fmt.Sprintf("LINSTOR satellite %s %s", name, n.ConnectionStatus))
		}
	}
	return strings.Join(out, "; "), true
}
