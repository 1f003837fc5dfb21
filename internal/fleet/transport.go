package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
)

// memberTransport is the HTTP transport of one member, as client-go would build it (its
// dialer, TLS handshake timeout, idle connections and HTTP/2), with two differences:
//
//   - Its connections have TCP keepalives that the kernel keeps: a connection that received
//     nothing for idle is probed, then every second, and closed (TCP_USER_TIMEOUT) once
//     nothing came from the member for userTimeout, a probe's acknowledgement or data, or
//     data sent went unacknowledged that long. A member's watches then fail at once rather
//     than wait on a dead link, and its check follows at once (heard.onLost). No HTTP/2
//     PING is sent: a probe costs the hub no system call and no wake-up, a PING a TLS
//     write, two reads and two wake-ups, and thousands of members sent hundreds a second.
//     Over HTTP/1.1 the same holds.
//   - It counts, in heard, the member's connections that are open and over which the member
//     sent something: one such is a link over which the member's kernel answered within
//     userTimeout. The health checks take that as the member's answer, and ask /readyz only
//     now and then (Checker).
//
// A probe proves that the member's kernel answers, not its API server: one that hangs is
// found by /readyz (HealthOptions.ReadyInterval). Through a proxy (HTTPS_PROXY in the hub's
// environment) the probes reach the proxy, not the member.
//
// The returned configuration carries the transport in place of its TLS options, which the
// transport holds; client-go adds the credentials, as it does to a transport it built.
func memberTransport(cfg *rest.Config, idle, userTimeout time.Duration) (*rest.Config, *heard, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	h := &heard{}
	dialer := &net.Dialer{
		Timeout:         30 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: idle, Interval: time.Second},
		Control:         withUserTimeout(userTimeout),
	}
	t := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         h.dial(dialer.DialContext),
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	out := rest.CopyConfig(cfg)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Transport = t
	return out, h, nil
}

// withUserTimeout has a socket's kernel close its connection once the peer has sent nothing
// for d (TCP_USER_TIMEOUT): with keepalives, a probe unanswered that long; otherwise data
// unacknowledged that long.
func withUserTimeout(d time.Duration) func(network, address string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		}); cerr != nil {
			return cerr
		}
		if err != nil {
			return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", err)
		}
		return nil
	}
}

// heard counts a member's open connections over which it sent something, and says when the
// last of them is lost.
type heard struct {
	// open counts the member's connections that it sent something on and that are not lost.
	open atomic.Int64
	// lost, once set (onLost), is called when the member's last open connection is lost.
	lost atomic.Pointer[func()]
}

// onLost has f called each time the member's last open connection is lost (heardConn): the
// health checks then ask the member at once rather than at their next turn (Checker.lost).
// A connection lost while another is open says nothing: the transport closes the spare one
// of two dialled at once, and a member with an open connection answers on it.
func (h *heard) onLost(f func()) { h.lost.Store(&f) }

// answers says whether a connection to the member is open over which it sent something: its
// kernel answered within the transport's user timeout.
func (h *heard) answers() bool { return h != nil && h.open.Load() > 0 }

func (h *heard) dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &heardConn{Conn: c, heard: h}, nil
	}
}

// heardConn counts itself open once the member sent something on it (its first read), and
// lost, once, when a read fails (the kernel closed it, its keepalives unanswered; the member
// reset it) or the hub closes it (after the member closed it: TLS then reads the member's
// close_notify and reads no more, so that no read fails). The loss of the member's last open
// connection moves its check to now, which asks /readyz.
//
// A connection is not counted at its dial: TCP's handshake is the member's kernel's alone,
// and a link that fails after it (or a listener that takes connections and then hears
// nothing, as the member simulator's cut link does) would have the member counted as
// answering until the kernel gave the connection up.
type heardConn struct {
	net.Conn
	heard *heard
	// read is set at the first read of a byte: no lock is taken after that.
	read atomic.Bool
	mu   sync.Mutex
	// counted: the connection is in heard.open; lost: it was lost (and is counted no more).
	counted, lost bool
}

func (c *heardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.read.Load() {
		c.count()
	}
	if err != nil {
		c.lose()
	}
	return n, err
}

func (c *heardConn) Close() error {
	c.lose()
	return c.Conn.Close()
}

// count counts the connection open, unless it was lost already.
func (c *heardConn) count() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read.Store(true)
	if !c.counted && !c.lost {
		c.counted = true
		c.heard.open.Add(1)
	}
}

// lose counts the connection lost, once; when it was the member's last open one, it says so
// (heard.onLost). A connection over which the member never sent anything was not counted,
// and its loss says nothing: the member's check finds it.
func (c *heardConn) lose() {
	c.mu.Lock()
	counted := c.counted && !c.lost
	c.lost = true
	c.mu.Unlock()
	if !counted || c.heard.open.Add(-1) > 0 {
		return
	}
	if lost := c.heard.lost.Load(); lost != nil {
		(*lost)()
	}
}
