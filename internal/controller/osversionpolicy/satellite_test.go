package osversionpolicy

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

// TestSatellitesRed reads the satellites from the played LINSTOR (test/site/linstorsim, every
// request and answer checked against LINSTOR's OpenAPI document): each one not ONLINE, not
// known to LINSTOR, or not read (LINSTOR unreachable, not answering, the gate's CA missing) is a
// red gate saying so; nothing is read without a LINSTOR gate. The envtest of the soak
// (TestTheSoakWaitsForTheLINSTORSatellite) reads them through the LINSTOR gate.
func TestSatellitesRed(t *testing.T) {
	sim := linstorsim.Start(t, linstorsim.Options{})
	for _, n := range []string{"edge-1", "edge-2"} {
		if err := sim.AddNode(linstorsim.Node{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.SetOnline("edge-2", false); err != nil {
		t.Fatal(err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	cases := []struct {
		name    string
		cfg     linstor.Config
		nodes   []string
		want    []string
		checked bool
	}{
		{name: "no LINSTOR gate", nodes: []string{"edge-2"}},
		{name: "online", cfg: linstor.Config{URL: sim.URL}, nodes: []string{"edge-1"}, checked: true},
		{name: "offline", cfg: linstor.Config{URL: sim.URL}, nodes: []string{"edge-2"}, checked: true,
			want: []string{"LINSTOR satellite edge-2 OFFLINE"}},
		{name: "unknown", cfg: linstor.Config{URL: sim.URL}, nodes: []string{"edge-9"}, checked: true,
			want: []string{"LINSTOR knows no node edge-9"}},
		{name: "several, as the Preflight reads them", cfg: linstor.Config{URL: sim.URL}, nodes: []string{"edge-1", "edge-2", "edge-9"}, checked: true,
			want: []string{"LINSTOR satellite edge-2 OFFLINE; LINSTOR knows no node edge-9"}},
		{name: "unreachable", cfg: linstor.Config{URL: closed.URL}, nodes: []string{"edge-1"}, checked: true,
			want: []string{"LINSTOR satellite edge-1 could not be read", "connection refused"}},
		{name: "the gate's CA missing", cfg: linstor.Config{URL: "https://127.0.0.1:8443", CAFile: filepath.Join(t.TempDir(), "ca.crt")}, nodes: []string{"edge-1"}, checked: true,
			want: []string{"LINSTOR satellite edge-1 could not be read: the CA of the LINSTOR gate's certificate"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &Reconciler{LINSTOR: c.cfg}
			red, checked := r.satellitesRed(t.Context(), c.nodes...)
			if checked != c.checked {
				t.Errorf("checked %t; want %t", checked, c.checked)
			}
			if len(c.want) == 0 && red != "" {
				t.Errorf("red %q; want green", red)
			}
			for _, w := range c.want {
				if !strings.Contains(red, w) {
					t.Errorf("red %q; want it to say %q", red, w)
				}
			}
		})
	}
}

// TestSatellitesRedIsBounded: a LINSTOR (or gate) that takes the connection and never answers
// is a red gate after satelliteTimeout, not a reconcile held for the client's own request
// timeout (2 minutes without one configured, as the chart's operator has none).
func TestSatellitesRedIsBounded(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-req.Context().Done():
		case <-release:
		}
	}))
	defer hung.Close()
	defer close(release)
	r := &Reconciler{LINSTOR: linstor.Config{URL: hung.URL}}
	type result struct {
		red  string
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		red, _ := r.satellitesRed(t.Context(), "edge-1")
		done <- result{red, time.Since(start)}
	}()
	// Generous for a busy machine, and far below the client's own 2 minutes.
	limit := satelliteTimeout + 30*time.Second
	select {
	case got := <-done:
		t.Logf("after %s: %s", got.took, got.red)
		if !strings.Contains(got.red, "LINSTOR satellite edge-1 could not be read") || !strings.Contains(got.red, "no answer within") {
			t.Errorf("red %q after %s; want the satellite not read, no answer", got.red, got.took)
		}
	case <-time.After(limit):
		t.Fatalf("the read of a LINSTOR that does not answer is still waiting after %s", limit)
	}
}
