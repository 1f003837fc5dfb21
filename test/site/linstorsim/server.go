package linstorsim

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// Options configure a stand-in.
type Options struct {
	// SyncTime is how long a new replica's initial synchronisation takes from 0 to 100 % while
	// its node and a source are online; 2 s when zero.
	SyncTime time.Duration
	// TLS makes the stand-in serve HTTPS, as LINSTOR's port 3371 does, and require a client
	// certificate signed by its own CA; ClientSecret gives one, as Piraeus' client Secret holds it.
	TLS bool
	// BalanceInterval, when set, plays LINSTOR's balance task: this often (checked at every
	// request), unless the controller property BalanceResourcesEnabled is "false", every
	// resource definition with fewer diskful replicas than its group's place count is
	// autoplaced up to it.
	BalanceInterval time.Duration

	// StalledSyncs is a fault hook: these synchronisations stop at a percentage and stay there.
	StalledSyncs []StalledSync
	// SlowGroupModify is a fault hook: a resource group modify that raises the place count
	// plays linstor-server#253.
	SlowGroupModify *SlowGroupModify
}

// StalledSync stops the synchronisation of the replica of Resource on Node (either empty:
// every one) at AtPercent.
type StalledSync struct {
	Resource, Node string
	AtPercent      float64
}

// SlowGroupModify plays linstor-server#253: `resource-group modify --place-count` over many
// resource definitions (about 190 there) never answers, the client gives up (after 300 s
// there), and only some definitions got their new replica, some of them StandAlone.
//
// The modify is committed at once (the group shows the new place count); then the definitions
// below it are autoplaced one after the other, each taking PerResource, until Placed of them
// have their replicas; the rest are never placed. The request is never answered: it is held
// until the client goes away (or the stand-in closes). Every StandAloneEvery-th replica
// placed (0: none) comes up StandAlone: it never connects and never synchronises.
type SlowGroupModify struct {
	PerResource     time.Duration
	Placed          int
	StandAloneEvery int
}

// Server is a LINSTOR controller's REST API, played in memory.
type Server struct {
	// URL is the stand-in's base URL (http://127.0.0.1:port, or https:// with Options.TLS).
	URL string

	opts  Options
	spec  *spec
	http  *httptest.Server
	certs *certs

	mu         sync.Mutex
	st         *state
	violations []string
	requests   map[string]int

	// closing is closed by Close: it releases the requests the slow modify holds.
	closing   chan struct{}
	closeOnce sync.Once
	slow      sync.WaitGroup
}

// New starts a stand-in listening on 127.0.0.1. Close stops it.
func New(opts Options) (*Server, error) {
	sp, err := loadSpec()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, spec: sp, st: newState(), requests: map[string]int{}, closing: make(chan struct{})}
	// The balance task first runs one interval after the controller started, as LINSTOR's does.
	s.st.lastBalance = time.Now()
	s.http = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	// A refused TLS handshake is the client's to report, not the server's log's.
	s.http.Config.ErrorLog = log.New(io.Discard, "", 0)
	if opts.TLS {
		c, err := newCerts()
		if err != nil {
			return nil, err
		}
		s.certs = c
		s.http.TLS = &tls.Config{
			Certificates: []tls.Certificate{c.server},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    c.pool,
			MinVersion:   tls.VersionTLS12,
		}
		s.http.StartTLS()
	} else {
		s.http.Start()
	}
	s.URL = s.http.URL
	return s, nil
}

// Start runs a stand-in for the test: it is closed when the test ends, and the test fails
// then if any request or response broke LINSTOR's OpenAPI document (or asked for something
// the stand-in does not play) and was not taken with TakeViolations.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		for _, v := range s.TakeViolations() {
			t.Errorf("linstorsim: %s", v)
		}
	})
	return s
}

// Close stops the stand-in, releasing the requests it holds.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.slow.Wait()
		s.http.Close()
	})
}

// TakeViolations returns what broke LINSTOR's OpenAPI document, or asked for something the
// stand-in does not play, since the last call, and forgets it.
func (s *Server) TakeViolations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.violations
	s.violations = nil
	return out
}

// Requests counts the requests served, by the document's operationId.
func (s *Server) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.requests))
	for k, v := range s.requests {
		out[k] = v
	}
	return out
}

// ClientSecret is what Piraeus keeps in its client Secret (linstor-client-tls): a client
// certificate the stand-in accepts (tls.crt, tls.key) and the CA of its serving certificate
// (ca.crt). Nil without Options.TLS.
func (s *Server) ClientSecret() map[string][]byte {
	if s.certs == nil {
		return nil
	}
	return map[string][]byte{"tls.crt": s.certs.clientCert, "tls.key": s.certs.clientKey, "ca.crt": s.certs.caCert}
}

func (s *Server) violate(format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	s.mu.Unlock()
	return msg
}

// maxBody bounds what the stand-in reads of a request; LINSTOR's requests are small.
const maxBody = 1 << 20

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, s.violate("%s %s: the body could not be read whole (%v)", r.Method, r.URL.Path, err), http.StatusInternalServerError)
		return
	}
	c, err := s.spec.checkRequest(r.Context(), r, body)
	if err != nil {
		http.Error(w, s.violate("%v", err), http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	s.requests[c.operation]++
	s.mu.Unlock()
	handle := handlers[c.operation]
	if handle == nil {
		http.Error(w, s.violate("%s %s (%s) is LINSTOR's, but the stand-in does not play it", r.Method, r.URL.Path, c.operation), http.StatusNotImplemented)
		return
	}
	status, out := handle(s, &call{checked: c, req: r})
	if status == 0 {
		// The request was held until the client went away or the stand-in closed: no answer
		// is sent, and the connection is dropped as a controller that stops would drop it.
		panic(http.ErrAbortHandler)
	}
	payload, err := json.Marshal(out)
	if err != nil {
		http.Error(w, s.violate("encoding the answer to %s: %v", c.operation, err), http.StatusInternalServerError)
		return
	}
	header := http.Header{"Content-Type": []string{"application/json"}}
	if err := s.spec.checkResponse(r.Context(), c, status, header, payload); err != nil {
		http.Error(w, s.violate("%v", err), http.StatusInternalServerError)
		return
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	_, _ = io.Copy(w, bytes.NewReader(payload))
}

// call is one request being answered.
type call struct {
	*checked
	req *http.Request
}

func (c *call) query(name string) []string {
	return slices.DeleteFunc(slices.Clone(c.req.URL.Query()[name]), func(v string) bool { return v == "" })
}

// decode reads the request's body, already validated against the document, into out.
func (c *call) decode(out any) error {
	if len(bytes.TrimSpace(c.body)) == 0 {
		return nil
	}
	return json.Unmarshal(c.body, out)
}

// handler answers one operation: the status and what to encode. Status 0 sends nothing.
type handler func(s *Server, c *call) (int, any)

// hold keeps a request unanswered until its client goes away or the stand-in closes.
func (s *Server) hold(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.closing:
	}
}
