package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/text"
)

// Prober checks, after a network change, that the node still reaches what it must: its peers'
// storage addresses (an ICMP echo each), the API server (an HTTPS request to /livez), and its
// DRBD connections (drbdsetup status: every connection Connected).
type Prober struct {
	// APIServer asks the API server whether it is live; nil: the API server is not probed
	// and its probe fails, saying so.
	APIServer func(ctx context.Context) error
	// DRBD runs drbdsetup; nil: the DRBD probe fails, saying so.
	DRBD drbd.Runner
	// Timeout bounds each probe; 1s when zero.
	Timeout time.Duration
}

// Probe runs every probe asked for once, in parallel, and returns each result, peers first,
// in the order asked.
func (p Prober) Probe(ctx context.Context, probes nwv1.BondProbes) []nwv1.ProbeResult {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = time.Second
	}
	checks := make([]func(context.Context) nwv1.ProbeResult, 0, len(probes.Peers)+2)
	for _, peer := range probes.Peers {
		checks = append(checks, func(ctx context.Context) nwv1.ProbeResult { return ping(ctx, peer) })
	}
	if ptr.Deref(probes.APIServer, true) {
		checks = append(checks, p.apiServer)
	}
	if ptr.Deref(probes.DRBDConnections, true) {
		checks = append(checks, p.drbdConnections)
	}
	results := make([]nwv1.ProbeResult, len(checks))
	var wg sync.WaitGroup
	for i, check := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			results[i] = check(cctx)
			results[i].Message = text.Shorten(results[i].Message, 256)
		}()
	}
	wg.Wait()
	return results
}

// ProbeUntil probes again and again, every 250 ms, until every probe answers or budget has
// passed; it returns the last results and whether all answered.
func (p Prober) ProbeUntil(ctx context.Context, probes nwv1.BondProbes, budget time.Duration) ([]nwv1.ProbeResult, bool) {
	end := time.Now().Add(budget)
	for {
		results := p.Probe(ctx, probes)
		if allOK(results) || time.Now().After(end) || ctx.Err() != nil {
			return results, allOK(results)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func allOK(results []nwv1.ProbeResult) bool {
	for _, r := range results {
		if !r.OK {
			return false
		}
	}
	return true
}

// failed names the probes that did not answer.
func failed(results []nwv1.ProbeResult) string {
	s := ""
	for _, r := range results {
		if !r.OK {
			if s != "" {
				s += "; "
			}
			s += r.Target + ": " + r.Message
		}
	}
	return s
}

// ProbeAPIServer is the Prober's APIServer for a client of the API server: GET /livez, which
// every client may ask (system:public-info-viewer).
func ProbeAPIServer(c *http.Client, host string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/livez", nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/livez answered %s", resp.Status)
		}
		return nil
	}
}

func (p Prober) apiServer(ctx context.Context) nwv1.ProbeResult {
	r := nwv1.ProbeResult{Target: "api-server"}
	if p.APIServer == nil {
		r.Message = "this agent has no way to probe the API server"
		return r
	}
	start := time.Now()
	if err := p.APIServer(ctx); err != nil {
		r.Message = err.Error()
	} else {
		r.OK, r.Message = true, fmt.Sprintf("live, answered in %s", time.Since(start).Round(time.Millisecond))
	}
	return r
}

func (p Prober) drbdConnections(ctx context.Context) nwv1.ProbeResult {
	r := nwv1.ProbeResult{Target: "drbd"}
	if p.DRBD == nil {
		r.Message = "this agent has no way to read DRBD's status"
		return r
	}
	out, err := p.DRBD.Run(ctx, []string{"drbdsetup", "status", "--json"})
	if err != nil {
		r.Message = err.Error()
		return r
	}
	resources, err := drbd.ParseStatus(out.Stdout)
	if err != nil {
		r.Message = err.Error()
		return r
	}
	for _, res := range resources {
		for _, c := range res.Connections {
			if c.ConnectionState != "Connected" {
				r.Target = "drbd:" + res.Name + ":" + c.Name
				r.Message = "connection " + c.ConnectionState
				return r
			}
		}
	}
	r.OK, r.Message = true, fmt.Sprintf("%d resources, every connection Connected", len(resources))
	return r
}

// ping sends one ICMP echo to addr and waits for its reply until ctx ends. It needs a raw
// socket (CAP_NET_RAW), which the agent has.
func ping(ctx context.Context, addr string) nwv1.ProbeResult {
	r := nwv1.ProbeResult{Target: addr}
	ip := net.ParseIP(addr)
	if ip == nil {
		r.Message = "not an IP address"
		return r
	}
	network, proto, echo := "ip4:icmp", 1, icmp.Type(ipv4.ICMPTypeEcho)
	listen, reply := "0.0.0.0", icmp.Type(ipv4.ICMPTypeEchoReply)
	if ip.To4() == nil {
		network, proto, echo, listen, reply = "ip6:ipv6-icmp", 58, ipv6.ICMPTypeEchoRequest, "::", ipv6.ICMPTypeEchoReply
	}
	conn, err := icmp.ListenPacket(network, listen)
	if err != nil {
		r.Message = err.Error()
		return r
	}
	defer func() { _ = conn.Close() }()
	id, seq := rand.IntN(0xffff), rand.IntN(0xffff)
	msg, _ := (&icmp.Message{Type: echo, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("nodewright-probe")}}).Marshal(nil)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second)
	}
	_ = conn.SetDeadline(deadline)
	start := time.Now()
	if _, err := conn.WriteTo(msg, &net.IPAddr{IP: ip}); err != nil {
		r.Message = err.Error()
		return r
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("no echo reply within %s", deadline.Sub(start).Round(time.Millisecond))
			}
			r.Message = err.Error()
			return r
		}
		if a, ok := from.(*net.IPAddr); !ok || !a.IP.Equal(ip) {
			continue
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != reply {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && e.Seq == seq {
			r.OK, r.Message = true, fmt.Sprintf("echo reply in %s", time.Since(start).Round(time.Microsecond))
			return r
		}
	}
}
