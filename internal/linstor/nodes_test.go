package linstor_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

func TestVersion(t *testing.T) {
	s := newSite(t, linstorsim.Options{})
	v, err := s.client.Version(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if v.RESTAPI != "1.28.0" {
		t.Fatalf("REST API %q, want the document's 1.28.0", v.RESTAPI)
	}
}

func TestNodesAndWhetherTheirSatellitesAreOnline(t *testing.T) {
	s := newSite(t, linstorsim.Options{})
	must(t, s.sim.SetOnline("n3", false))
	ctx := ctxFor(t)
	nodes, err := s.client.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range nodes {
		got = append(got, n.Name+":"+n.ConnectionStatus)
		if n.Online() != (n.Name != "n3") || n.Type != "Satellite" || n.Address == "" {
			t.Errorf("%+v", n)
		}
	}
	if strings.Join(got, " ") != "n1:ONLINE n2:ONLINE n3:OFFLINE" {
		t.Fatalf("nodes %v", got)
	}
	n2, err := s.client.Node(ctx, "n2")
	if err != nil || n2.Name != "n2" || !n2.Online() {
		t.Fatalf("Node(n2): %+v, %v", n2, err)
	}
	_, err = s.client.Node(ctx, "n9")
	if !errors.Is(err, linstor.ErrNotFound) || !strings.Contains(err.Error(), `read node "n9"`) {
		t.Fatalf("Node(n9): %v, want ErrNotFound naming it", err)
	}
	if _, err := s.client.Node(ctx, "a/b"); !errors.Is(err, linstor.ErrRefused) {
		t.Fatalf("Node(a/b): %v, want ErrRefused", err)
	}
}

// Where Piraeus does not run LINSTOR, Nodewright registers the satellites.
func TestRegisterNode(t *testing.T) {
	s := newSite(t, linstorsim.Options{})
	s.sim.AddSatellite("n4", "10.0.1.4")
	ctx := ctxFor(t)
	if err := s.client.RegisterNode(ctx, linstor.Satellite{Name: "n4", Address: "10.0.1.4"}); err != nil {
		t.Fatal(err)
	}
	n4, err := s.client.Node(ctx, "n4")
	if err != nil || !n4.Online() || n4.Address != "10.0.1.4" {
		t.Fatalf("n4 after registering: %+v, %v", n4, err)
	}
	// Again, as after a crash: success.
	if err := s.client.RegisterNode(ctx, linstor.Satellite{Name: "n4", Address: "10.0.1.4"}); err != nil {
		t.Fatalf("registering again: %v", err)
	}
	// The same name at another address: LINSTOR has it, and says so.
	err = s.client.RegisterNode(ctx, linstor.Satellite{Name: "n4", Address: "10.0.1.5"})
	if !errors.Is(err, linstor.ErrExists) || !strings.Contains(err.Error(), "registered already, at 10.0.1.4") {
		t.Fatalf("registering n4 at another address: %v", err)
	}
	// A node where no satellite answers is registered, and stays OFFLINE.
	if err := s.client.RegisterNode(ctx, linstor.Satellite{Name: "n5", Address: "10.0.1.5"}); err != nil {
		t.Fatal(err)
	}
	if n5, err := s.client.Node(ctx, "n5"); err != nil || n5.Online() {
		t.Fatalf("n5 without a satellite: %+v, %v", n5, err)
	}
	for _, bad := range []linstor.Satellite{{Name: "", Address: "10.0.0.1"}, {Name: "n6", Address: "n6.example"}, {Name: "n6", Address: "10.0.0.6", Port: 70000}} {
		if err := s.client.RegisterNode(ctx, bad); !errors.Is(err, linstor.ErrRefused) {
			t.Errorf("%+v: %v, want ErrRefused", bad, err)
		}
	}
}

func TestStoragePoolsWithTheirFreeCapacity(t *testing.T) {
	s := newSite(t, linstorsim.Options{}, "pvc-1")
	ctx := ctxFor(t)
	pools, err := s.client.StoragePools(ctx, "n1", "n2")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]linstor.StoragePool{}
	for _, p := range pools {
		got[p.Node+"/"+p.Name] = p
	}
	if len(got) != 4 {
		t.Fatalf("pools %+v, want thin and the diskless pool on n1 and n2", pools)
	}
	if p := got["n1/thin"]; p.FreeKiB != 99*gib || p.TotalKiB != 100*gib || p.Provider != "LVM_THIN" || !p.Fits(gib) || p.Fits(100*gib) {
		t.Errorf("n1/thin: %+v (one 1 GiB volume placed)", p)
	}
	if p := got["n2/"+linstorsim.DisklessPool]; !p.Diskless() || p.Fits(1) {
		t.Errorf("the diskless pool: %+v", p)
	}
	all, err := s.client.StoragePools(ctx)
	if err != nil || len(all) != 6 {
		t.Fatalf("every pool: %d, %v", len(all), err)
	}
}

// A controller that is not there fails the call, naming it, within the request timeout.
func TestAControllerThatIsNotThere(t *testing.T) {
	sim := linstorsim.Start(t, linstorsim.Options{})
	client := newClient(t, linstor.Config{URL: sim.URL, RequestTimeout: 5 * time.Second})
	sim.Close()
	_, err := client.Nodes(ctxFor(t))
	if err == nil || !strings.Contains(err.Error(), "LINSTOR: list nodes: ") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("with the controller gone: %v", err)
	}
}

// Something in front of the controller (a proxy) answering for it: its answer is quoted, not
// taken for LINSTOR's.
func TestAnAnswerThatIsNotLINSTORs(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "<html>upstream connect error</html>", http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	client := newClient(t, linstor.Config{URL: proxy.URL})
	for _, call := range []func() error{
		func() error { _, err := client.Nodes(ctxFor(t)); return err },
		func() error { _, err := client.Resources(ctxFor(t), linstor.ResourceFilter{}); return err },
	} {
		err := call()
		var e *linstor.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadGateway || !strings.Contains(err.Error(), "not LINSTOR's: <html>upstream connect error</html>") {
			t.Fatalf("through a proxy answering 502: %v", err)
		}
	}
}
