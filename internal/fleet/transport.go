package fleet

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// memberTransport is the HTTP transport of one member, as client-go would build it (its
// dialer, TLS handshake timeout, idle connections and HTTP/2), with two differences:
//
//   - It sends an HTTP/2 PING on a connection that received nothing for ping, and closes it
//     when the PING is not answered within pingTimeout (client-go: 30 s and 15 s, set for a
//     whole process by environment variables). A member's watches then fail at once rather
//     than wait on a dead link.
//   - It records, in heard, when bytes last arrived from the member on any of its
//     connections: a PING's answer, a watch's event or bookmark, any answer. The health
//     checks take that as the member's answer, and ask /readyz only now and then (Checker).
//
// A member reached over HTTP/1.1 gets no PING: only its watches' traffic is heard, and the
// checks ask /readyz when that is not enough.
//
// The returned configuration carries the transport in place of its TLS options, which the
// transport holds; client-go adds the credentials, as it does to a transport it built.
func memberTransport(cfg *rest.Config, ping, pingTimeout time.Duration) (*rest.Config, *heard, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	h := &heard{}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         h.dial(dialer.DialContext),
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: ping, PingTimeout: pingTimeout},
	}
	out := rest.CopyConfig(cfg)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Transport = t
	return out, h, nil
}

// heard is when bytes last arrived from a member, in Unix nanoseconds; 0 before any did, and
// after a connection was lost.
type heard struct {
	at atomic.Int64
	// open counts the member's connections not lost yet.
	open atomic.Int64
	// lost, once set (onLost), is called when the member's last open connection is lost.
	lost atomic.Pointer[func()]
}

// onLost has f called each time the member's last open connection is lost (heardConn): the
// health checks then ask the member at once rather than at their next turn (Checker.lost).
// A connection lost while another is open says nothing: the transport closes the spare one
// of two dialled at once, and a member with an open connection is heard on it.
func (h *heard) onLost(f func()) { h.lost.Store(&f) }

// since says whether bytes arrived from the member at t or later.
func (h *heard) since(t time.Time) bool { return h != nil && h.at.Load() >= t.UnixNano() }

func (h *heard) dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		h.open.Add(1)
		return &heardConn{Conn: c, heard: h}, nil
	}
}

// heardConn records in heard each read that brought bytes, and forgets when the member was
// heard once its last connection is lost: a read failed, or the hub closed it (after a PING
// went unanswered, or after the member closed it: TLS then reads the member's close_notify
// and reads no more, so that no read fails). The check, which that moves to now, asks
// /readyz rather than wait for the silence to last.
type heardConn struct {
	net.Conn
	heard *heard
	once  sync.Once
}

func (c *heardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	switch {
	case err != nil:
		c.lose()
	case n > 0:
		c.heard.at.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *heardConn) Close() error {
	c.lose()
	return c.Conn.Close()
}

// lose counts the connection lost, once; when it was the member's last, it forgets when the
// member was heard, and says so (heard.onLost).
func (c *heardConn) lose() {
	c.once.Do(func() {
		if c.heard.open.Add(-1) > 0 {
			return
		}
		c.heard.at.Store(0)
		if lost := c.heard.lost.Load(); lost != nil {
			(*lost)()
		}
	})
}
