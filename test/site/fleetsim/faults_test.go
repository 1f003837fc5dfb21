package fleetsim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

func startSim(t *testing.T, o Options) *Sim {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	return s
}

// memberConfig is a client's access to the member, as the hub builds it from Kubeconfig.
func memberConfig(s *Sim, m *Member, token string) *rest.Config {
	return &rest.Config{Host: m.Server(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: s.CA()}, QPS: -1}
}

func readyz(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// h2Conn is an HTTP/2 connection to the member of its own, to send PINGs on.
func h2Conn(t *testing.T, s *Sim, m *Member) *http2.ClientConn {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.CA())
	conn, err := tls.Dial("tcp", strings.TrimPrefix(m.Server(), "https://"), &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cc, err := (&http2.Transport{}).NewClientConn(conn)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func TestFaults(t *testing.T) {
	t.Parallel()
	s := startSim(t, Options{Members: 2, BookmarkInterval: time.Hour})
	m := s.Members()[0]
	ctx := context.Background()
	cfg := memberConfig(s, m, m.Token())
	if err := readyz(ctx, cfg); err != nil {
		t.Fatalf("a running member's /readyz: %v", err)
	}

	t.Run("stop refuses connections and resume answers again", func(t *testing.T) {
		m.Stop()
		if err := readyz(ctx, cfg); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("a stopped member's /readyz = %v, want connection refused", err)
		}
		if err := m.Resume(); err != nil {
			t.Fatal(err)
		}
		if err := readyz(ctx, cfg); err != nil {
			t.Fatalf("a resumed member's /readyz: %v", err)
		}
	})

	t.Run("freeze holds requests and open watches until thaw", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cms := cs.CoreV1().ConfigMaps("nodewright-system")
		list, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		m.Freeze()
		short, cancel := context.WithTimeout(ctx, time.Second)
		err = readyz(short, cfg)
		cancel()
		if err == nil || short.Err() == nil {
			t.Fatalf("a frozen member's /readyz with a 1 s timeout = %v, want the timeout", err)
		}
		changed := list.Items[0].DeepCopy()
		changed.Data["frozen"] = "yes"
		if err := m.Put(changed); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w.ResultChan():
			t.Fatalf("a frozen member's watch delivered %s", ev.Type)
		case <-time.After(time.Second): // the one wait that proves an absence
		}
		m.Thaw()
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				t.Fatalf("after the thaw the watch delivered %s, want MODIFIED", ev.Type)
			}
		case <-time.After(time.Minute):
			t.Fatal("after the thaw the watch delivered nothing")
		}
	})

	t.Run("a frozen member answers PINGs; a cut one answers nothing until mended", func(t *testing.T) {
		cc := h2Conn(t, s, m)
		ping := func() error {
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return cc.Ping(short)
		}
		if err := ping(); err != nil {
			t.Fatalf("a PING to a running member: %v", err)
		}
		m.Freeze()
		err := ping()
		m.Thaw()
		if err != nil {
			t.Fatalf("a PING to a frozen member: %v, want its answer (its API server hangs, its link works)", err)
		}
		m.Cut()
		if err := ping(); err == nil {
			t.Fatal("a PING to a cut member was answered")
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		err = readyz(short, cfg)
		cancel()
		if err == nil || short.Err() == nil {
			t.Fatalf("a cut member's /readyz with a 1 s timeout = %v, want the timeout", err)
		}
		m.Mend()
		// What the cut dropped arrives with TCP's next retransmission, which backs off.
		long, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := cc.Ping(long); err != nil {
			t.Fatalf("a PING to a mended member: %v", err)
		}
		if err := readyz(ctx, cfg); err != nil {
			t.Fatalf("a mended member's /readyz: %v", err)
		}
	})

	t.Run("a cut member's kernel acknowledges nothing: TCP keepalives find the link gone", func(t *testing.T) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(s.CA())
		// Probed after a second of silence, then every second; three probes unanswered end
		// the connection (ETIMEDOUT). Answered, they keep it open for as long as it lasts.
		dialer := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 3}}
		conn, err := tls.DialWithDialer(dialer, "tcp", strings.TrimPrefix(m.Server(), "https://"), &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err) // the handshake completed: the member accepted the connection
		}
		defer func() { _ = conn.Close() }()
		read := make(chan error, 1)
		go func() { _, err := conn.Read(make([]byte, 1)); read <- err }()
		select {
		case err := <-read:
			t.Fatalf("an idle connection to a running member ended: %v", err)
		case <-time.After(5 * time.Second): // the one wait that proves an absence: probes answered
		}
		m.Cut()
		defer m.Mend()
		select {
		case err := <-read:
			if !errors.Is(err, syscall.ETIMEDOUT) {
				t.Fatalf("a connection to a cut member ended with %v, want ETIMEDOUT (its keepalives unanswered)", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a connection to a cut member was still open a minute later: its kernel answered the keepalives")
		}
	})

	t.Run("slow delays every answer", func(t *testing.T) {
		m.Slow(300 * time.Millisecond)
		start := time.Now()
		if err := readyz(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Fatalf("a slowed member answered in %s, want at least 300ms", took)
		}
		m.Slow(0)
	})

	t.Run("revoke refuses the old token and accepts the new one", func(t *testing.T) {
		old := m.Token()
		fresh := m.Revoke()
		if err := readyz(ctx, memberConfig(s, m, old)); !apierrors.IsUnauthorized(err) {
			t.Fatalf("the revoked token's /readyz = %v, want 401", err)
		}
		if err := readyz(ctx, memberConfig(s, m, fresh)); err != nil {
			t.Fatalf("the new token's /readyz: %v", err)
		}
		cfg = memberConfig(s, m, fresh)
	})

	t.Run("burst changes each member once", func(t *testing.T) {
		members := s.Members()
		s.Burst(members, 200*time.Millisecond, func(c *nwv1.NodewrightCluster) { c.Status.Nodes.Ready = 1 })
		testenv.Eventually(t, time.Minute, func() string {
			for _, mm := range members {
				cs, err := kubernetes.NewForConfig(memberConfig(s, mm, mm.Token()))
				if err != nil {
					return err.Error()
				}
				var nwc nwv1.NodewrightCluster
				if err := cs.Discovery().RESTClient().Get().AbsPath("/apis/nodewright.spectrocloud.com/v1alpha1/nodewrightclusters/nodewright").Do(ctx).Into(&nwc); err != nil {
					return err.Error()
				}
				if nwc.Status.Nodes.Ready != 1 {
					return fmt.Sprintf("%s: ready nodes %d, want 1", mm.Name(), nwc.Status.Nodes.Ready)
				}
			}
			return ""
		})
	})
}

// TestThousandsOfMembers starts 3,500 members and asks each for /readyz: the scale the hub's
// benchmark needs, in one process.
func TestThousandsOfMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3,500 members")
	}
	t.Parallel()
	const members = 3500
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	s := startSim(t, Options{Members: members})
	started := time.Since(start)
	var startedMem runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&startedMem)
	// One transport for every member, as a hub with shared HTTP/2 transports would have:
	// what is measured is the simulator's cost, not a client's per member.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CA())
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	var failed atomic.Int64
	var firstErr sync.Once
	work := make(chan *Member)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range work {
				if err := rawReadyz(hc, m); err != nil {
					failed.Add(1)
					firstErr.Do(func() { t.Errorf("%s: /readyz: %v", m.Name(), err) })
				}
			}
		}()
	}
	for _, m := range s.Members() {
		work <- m
	}
	close(work)
	wg.Wait()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d members started in %s, holding %d MiB of heap (%.1f KiB a member); /readyz on each in %s more (%d failed), "+
		"with the client's connections open: heap %d MiB, %d goroutines, %d requests",
		members, started.Round(time.Millisecond), startedMem.HeapAlloc>>20, float64(startedMem.HeapAlloc-before.HeapAlloc)/1024/members,
		(time.Since(start) - started).Round(time.Millisecond), failed.Load(), after.HeapAlloc>>20, runtime.NumGoroutine(), s.Requests())
}

func rawReadyz(hc *http.Client, m *Member) error {
	req, err := http.NewRequest(http.MethodGet, m.Server()+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+m.Token())
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("answered %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
	return nil
}
