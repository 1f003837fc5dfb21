package linstor_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

func progress(t *testing.T, s site, def, node string) (float64, bool, linstor.Resource) {
	t.Helper()
	r := s.resourceOn(t, def, node)
	p, ok := r.SyncProgress()
	return p, ok, r
}

// A stalled synchronisation stops at its percentage and stays there, while others finish.
func TestFaultStalledSync(t *testing.T) {
	s := newSite(t, linstorsim.Options{
		SyncTime:     time.Second,
		StalledSyncs: []linstorsim.StalledSync{{Resource: "pvc-1", Node: "n2", AtPercent: 40}},
	}, "pvc-1", "pvc-2")
	ctx := ctxFor(t)
	must(t, s.client.PlaceReplica(ctx, "pvc-1", "n2", pool), s.client.PlaceReplica(ctx, "pvc-2", "n2", pool))
	until(t, "pvc-1 at 40 %", func() (bool, string) {
		p, ok, r := progress(t, s, "pvc-1", "n2")
		return ok && p == 40, fmt.Sprint(r.Volumes)
	})
	// pvc-2, placed after it, synchronising as fast: it finishing shows time went on.
	until(t, "pvc-2 UpToDate", func() (bool, string) {
		r := s.resourceOn(t, "pvc-2", "n2")
		return r.UpToDate(), fmt.Sprint(r.Volumes)
	})
	p, ok, r := progress(t, s, "pvc-1", "n2")
	if !ok || p != 40 || r.UpToDate() || r.Volumes[0].Replication["n1"].State != "SyncTarget" {
		t.Fatalf("the stalled sync moved: %.1f%% %+v", p, r.Volumes)
	}
}

// A satellite offline: its node OFFLINE, its resources' state unknown, its peers' replication
// towards it Off, its synchronisation held; all of it back once it returns.
func TestFaultSatelliteOffline(t *testing.T) {
	// Long enough that pvc-1 cannot finish on n2 between being seen started and going offline.
	s := newSite(t, linstorsim.Options{SyncTime: 4 * time.Second}, "pvc-1", "pvc-2", "pvc-3")
	ctx := ctxFor(t)
	must(t, s.client.PlaceReplica(ctx, "pvc-1", "n2", pool))
	var before float64
	until(t, "pvc-1 on its way", func() (bool, string) {
		p, ok, _ := progress(t, s, "pvc-1", "n2")
		before = p
		return ok && p > 0, fmt.Sprint(p)
	})
	must(t, s.sim.SetOnline("n2", false))
	if n2, err := s.client.Node(ctx, "n2"); err != nil || n2.Online() || n2.ConnectionStatus != "OFFLINE" {
		t.Fatalf("n2 offline: %+v, %v", n2, err)
	}
	r := s.resourceOn(t, "pvc-1", "n2")
	if r.StateKnown() || r.InUse != nil || r.Volumes[0].DiskState != "" || len(r.Volumes[0].Replication) != 0 {
		t.Fatalf("the resource on the offline node: %+v", r)
	}
	if _, ok := r.SyncProgress(); ok {
		t.Fatal("progress reported for a node offline")
	}
	src := s.resourceOn(t, "pvc-1", "n1")
	if rs := src.Volumes[0].Replication["n2"]; rs.State != "Off" || src.Connections["n2"].State != "Connecting" || src.Connections["n2"].Connected {
		t.Fatalf("n1 towards the offline n2: %+v %+v", rs, src.Connections)
	}
	// LINSTOR takes a resource for the offline node and deploys it when the satellite returns;
	// it deletes one there then too.
	must(t, s.client.PlaceReplica(ctx, "pvc-2", "n2", pool))
	if r := s.resourceOn(t, "pvc-2", "n2"); r.StateKnown() {
		t.Fatalf("a resource created on the offline node: %+v", r)
	}
	must(t, s.client.PlaceReplica(ctx, "pvc-3", "n2", pool))
	must(t, s.client.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-3", Node: "n2", Original: "n1"}))
	if r := s.resourceOn(t, "pvc-3", "n2"); !r.Deleting {
		t.Fatalf("deleted on the offline node: %+v", r)
	}
	// Time goes on (a replica on the online n3 synchronises whole); n2's sync does not.
	must(t, s.client.PlaceReplica(ctx, "pvc-1", "n3", pool))
	until(t, "pvc-1 UpToDate on n3", func() (bool, string) {
		r := s.resourceOn(t, "pvc-1", "n3")
		return r.UpToDate(), fmt.Sprint(r.Volumes)
	})
	must(t, s.sim.SetOnline("n2", true))
	p, ok, _ := progress(t, s, "pvc-1", "n2")
	if !ok || p < before || p >= 100 {
		t.Fatalf("pvc-1 on n2 back online at %v (ok %v), seen at %v before going offline: it should resume where it stopped", p, ok, before)
	}
	if rs, _ := s.client.Resources(ctx, linstor.ResourceFilter{Definitions: []string{"pvc-3"}}); len(rs) != 1 {
		t.Fatalf("pvc-3 after n2 returned: %+v, want the deletion done", rs)
	}
	for _, def := range []string{"pvc-1", "pvc-2"} {
		until(t, def+" UpToDate on n2", func() (bool, string) {
			r := s.resourceOn(t, def, "n2")
			return r.UpToDate(), fmt.Sprint(r.Volumes)
		})
	}
}

// linstor-server#253: a resource group modify raising the place count over many definitions
// never answers, and places only some of them, one of them StandAlone.
func TestFaultSlowGroupModify(t *testing.T) {
	defs := []string{"pvc-1", "pvc-2", "pvc-3", "pvc-4", "pvc-5", "pvc-6"}
	s := newSite(t, linstorsim.Options{
		SyncTime:        500 * time.Millisecond,
		SlowGroupModify: &linstorsim.SlowGroupModify{PerResource: 50 * time.Millisecond, Placed: 3, StandAloneEvery: 2},
	}, defs...)
	client := newClient(t, linstor.Config{URL: s.sim.URL, RequestTimeout: time.Second})
	ctx := ctxFor(t)
	start := time.Now()
	_, err := client.SetPlaceCount(ctx, "sc-replicated", 2)
	if !errors.Is(err, linstor.ErrNoAnswer) || !strings.Contains(err.Error(), "no answer within 1s") || !strings.Contains(err.Error(), "read its state again") {
		t.Fatalf("SetPlaceCount under #253: %v, want ErrNoAnswer", err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("answered after %s", waited)
	}
	// The modify itself is in: the group has the new count.
	if g, err := s.client.ResourceGroup(ctx, "sc-replicated"); err != nil || g.PlaceCount != 2 {
		t.Fatalf("the group after the modify: %+v, %v", g, err)
	}
	placed := func() ([]linstor.Resource, string) {
		rs, err := s.client.Resources(ctx, linstor.ResourceFilter{Nodes: []string{"n2", "n3"}})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range rs {
			names = append(names, r.Definition+"@"+r.Node)
		}
		return rs, strings.Join(names, " ")
	}
	var standAlone linstor.Resource
	until(t, "three definitions placed, the others' placed ones UpToDate", func() (bool, string) {
		rs, names := placed()
		whole := 0
		for _, r := range rs {
			for _, c := range r.Connections {
				if c.State == "StandAlone" {
					standAlone = r
				}
			}
			if r.UpToDate() {
				whole++
			}
		}
		return len(rs) == 3 && whole == 2, names
	})
	// Two placed replicas synchronised whole, each taking ten times a placement: the modify
	// would have placed a fourth by now. It stopped at three.
	if rs, names := placed(); len(rs) != 3 {
		t.Fatalf("placed %s, want 3 of 6", names)
	}
	if standAlone.Definition == "" || standAlone.UpToDate() || standAlone.Volumes[0].Replication["n1"].State != "Off" {
		t.Fatalf("the StandAlone replica: %+v", standAlone)
	}
	if p, ok := standAlone.SyncProgress(); ok {
		t.Fatalf("a StandAlone replica reports progress %v", p)
	}
}

// LINSTOR's balance task autoplaces definitions below their group's place count, unless
// BalanceResourcesEnabled is false: what a replication upgrade pauses it for.
func TestBalanceTask(t *testing.T) {
	s := newSite(t, linstorsim.Options{SyncTime: time.Second, BalanceInterval: 100 * time.Millisecond}, "pvc-1")
	must(t,
		s.sim.AddResourceGroup(linstorsim.Group{Name: "sc-two", PlaceCount: 2, StoragePool: pool}),
		s.sim.AddResourceDefinition(linstorsim.Definition{Name: "pvc-two", Group: "sc-two", SizesKiB: []int64{gib}}),
		s.sim.AddResource(linstorsim.Resource{Definition: "pvc-two", Node: "n1", Pool: pool}),
	)
	s.sim.SetControllerProp(linstor.PropBalanceResourcesEnabled, "false")
	ctx := ctxFor(t)
	// Paused: a replica synchronising whole (ten balance intervals) passes, nothing placed.
	must(t, s.client.PlaceReplica(ctx, "pvc-1", "n2", pool))
	until(t, "pvc-1 UpToDate on n2", func() (bool, string) {
		r := s.resourceOn(t, "pvc-1", "n2")
		return r.UpToDate(), fmt.Sprint(r.Volumes)
	})
	if rs, _ := s.client.Resources(ctx, linstor.ResourceFilter{Definitions: []string{"pvc-two"}}); len(rs) != 1 {
		t.Fatalf("the paused balance task placed: %+v", rs)
	}
	undo, err := s.client.SetBalanceResourcesEnabled(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	until(t, "the balance task placing pvc-two's second replica", func() (bool, string) {
		rs, _ := s.client.Resources(ctx, linstor.ResourceFilter{Definitions: []string{"pvc-two"}})
		return len(rs) == 2, fmt.Sprint(rs)
	})
	if _, err := s.client.ModifyControllerProps(ctx, undo); err != nil {
		t.Fatal(err)
	}
	if on, _ := s.client.BalanceResourcesEnabled(ctx); on {
		t.Fatal("the undo did not pause the task again")
	}
}
