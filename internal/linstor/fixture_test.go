package linstor_test

import (
	"context"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

// waitLimit bounds every wait on observed state: only a stuck test reaches it.
const waitLimit = 2 * time.Minute

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// site is a single-node storage cluster about to be upgraded: n1 holds every volume, n2 and
// n3 are registered with empty pools.
type site struct {
	sim    *linstorsim.Server
	client *linstor.Client
}

const (
	gib  = int64(1 << 20) // KiB
	pool = "thin"
)

func newSite(t *testing.T, opts linstorsim.Options, volumes ...string) site {
	t.Helper()
	sim := linstorsim.Start(t, opts)
	must(t,
		sim.AddNode(linstorsim.Node{Name: "n1"}),
		sim.AddNode(linstorsim.Node{Name: "n2"}),
		sim.AddNode(linstorsim.Node{Name: "n3"}),
		sim.AddStoragePool(linstorsim.Pool{Node: "n1", Name: pool, TotalKiB: 100 * gib, FreeKiB: 100 * gib}),
		sim.AddStoragePool(linstorsim.Pool{Node: "n2", Name: pool, TotalKiB: 100 * gib, FreeKiB: 100 * gib}),
		sim.AddStoragePool(linstorsim.Pool{Node: "n3", Name: pool, TotalKiB: 100 * gib, FreeKiB: 100 * gib}),
		sim.AddResourceGroup(linstorsim.Group{Name: "sc-replicated", PlaceCount: 1, StoragePool: pool}),
	)
	for _, v := range volumes {
		must(t,
			sim.AddResourceDefinition(linstorsim.Definition{Name: v, Group: "sc-replicated", SizesKiB: []int64{gib}}),
			sim.AddResource(linstorsim.Resource{Definition: v, Node: "n1", Pool: pool}),
		)
	}
	return site{sim: sim, client: newClient(t, linstor.Config{URL: sim.URL})}
}

func newClient(t *testing.T, cfg linstor.Config) *linstor.Client {
	t.Helper()
	c, err := linstor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// resourceOn reads the resource of def on node, failing the test when it is not there.
func (s site) resourceOn(t *testing.T, def, node string) linstor.Resource {
	t.Helper()
	rs, err := s.client.Resources(ctxFor(t), linstor.ResourceFilter{Definitions: []string{def}, Nodes: []string{node}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d resources of %q on %q, want 1: %+v", len(rs), def, node, rs)
	}
	return rs[0]
}

// until polls cond until it holds, failing the test at waitLimit with the last state.
func until(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; last: %s", what, waitLimit, last)
}
