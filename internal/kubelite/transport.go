package kubelite

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// HTTPClient is an http.Client for the API server of c: its TLS (the CA, the server name, the
// client certificate) and its bearer token. Its transport is client-go's: HTTP/2 where the
// server speaks it, with a ping after 30 s without a frame and the connection closed when
// the ping is not answered within 15 s, so that a request on a connection that died (a node
// cut off the network) fails within a minute rather than hanging.
func (c *Config) HTTPClient() (*http.Client, error) {
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	proxy := http.ProxyFromEnvironment
	if c.ProxyURL != "" {
		u, err := proxyURL(c.ProxyURL)
		if err != nil {
			return nil, fmt.Errorf("the proxy: %w", err)
		}
		proxy = http.ProxyURL(u)
	}
	transport := &http.Transport{
		Proxy:               proxy,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	var rt http.RoundTripper = transport
	if c.Token != "" || c.TokenFile != "" {
		rt = &bearer{next: transport, token: c.Token, file: c.TokenFile, reread: c.TokenReread, read: time.Now()}
	}
	return &http.Client{Transport: rt}, nil
}

func (c *Config) tlsConfig() (*tls.Config, error) {
	u, err := c.baseURL()
	if err != nil {
		return nil, err
	}
	if u.Scheme == "http" {
		if c.Insecure || len(c.CAData) > 0 || len(c.CertData) > 0 {
			return nil, fmt.Errorf("the server %s is plain http: TLS settings would not be used", c.Host)
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.Insecure}
	if len(c.CAData) > 0 {
		if cfg.RootCAs, err = certPool(c.CAData); err != nil {
			return nil, fmt.Errorf("the certificate authority: %w", err)
		}
	}
	if len(c.CertData) > 0 || len(c.KeyData) > 0 {
		cert, err := tls.X509KeyPair(c.CertData, c.KeyData)
		if err != nil {
			return nil, fmt.Errorf("the client certificate and key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// certPool holds the PEM certificates of data, of which there must be one at least.
func certPool(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

func proxyURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "http", "https", "socks5":
	default:
		return nil, fmt.Errorf("%q: the scheme must be http, https or socks5", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q names no host", s)
	}
	return u, nil
}

// bearer adds the bearer token to each request. With a token file, the file is read again
// once reread has passed since it was last read, and at once after the server answered 401
// Unauthorized: the request is then sent once more with the token read anew, if it changed.
type bearer struct {
	next   http.RoundTripper
	file   string
	reread time.Duration

	mu    sync.Mutex
	token string
	read  time.Time
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return b.next.RoundTrip(req)
	}
	token := b.current(false)
	resp, err := b.next.RoundTrip(withToken(req, token))
	if err != nil || resp.StatusCode != http.StatusUnauthorized || b.file == "" || (req.Body != nil && req.GetBody == nil) {
		return resp, err
	}
	fresh := b.current(true)
	if fresh == token {
		return resp, nil
	}
	retry := withToken(req, fresh)
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			// The first answer stands when the body cannot be sent again.
			return resp, nil
		}
		retry.Body = body
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return b.next.RoundTrip(retry)
}

// current is the token to send: the file read again when reread has passed, or now when
// force. A file that cannot be read leaves the token last read.
func (b *bearer) current(force bool) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	reread := b.reread
	if reread <= 0 {
		reread = time.Minute
	}
	if b.file != "" && (force || time.Since(b.read) >= reread) {
		if token, err := readToken(b.file); err == nil {
			b.token = token
		}
		b.read = time.Now()
	}
	return b.token
}

// withToken is a copy of req with token as its bearer token (none when empty): a
// RoundTripper must not change the request it is given.
func withToken(req *http.Request, token string) *http.Request {
	r := req.Clone(req.Context())
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}
