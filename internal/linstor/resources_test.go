package linstor_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

// A replica placed on a peer synchronises: Inconsistent, a SyncTarget whose done_percentage
// rises, then UpToDate; the source shows SyncSource meanwhile.
func TestPlaceReplicaSynchronises(t *testing.T) {
	s := newSite(t, linstorsim.Options{SyncTime: 2 * time.Second}, "pvc-1")
	ctx := ctxFor(t)
	if err := s.client.PlaceReplica(ctx, "pvc-1", "n2", pool); err != nil {
		t.Fatal(err)
	}
	r := s.resourceOn(t, "pvc-1", "n2")
	if r.Diskless || len(r.Volumes) != 1 || r.Volumes[0].StoragePool != pool || r.Volumes[0].DiskState != "Inconsistent" {
		t.Fatalf("the new replica: %+v", r)
	}
	rs := r.Volumes[0].Replication["n1"]
	if rs.State != "SyncTarget" || rs.DonePercent == nil || !rs.Target() {
		t.Fatalf("its replication towards n1: %+v", rs)
	}
	seen := map[bool]bool{}
	var last float64
	until(t, "the replica UpToDate", func() (bool, string) {
		// The source is read first: a sync that ends between the two reads then shows a target
		// UpToDate, never a target still syncing beside a source already Established.
		src := s.resourceOn(t, "pvc-1", "n1").Volumes[0].Replication["n2"]
		r := s.resourceOn(t, "pvc-1", "n2")
		done, ok := r.SyncProgress()
		if !ok || done < last {
			t.Fatalf("progress %v (ok %v) after %v: %+v", done, ok, last, r)
		}
		last = done
		seen[done > 0 && done < 100] = true
		if !r.UpToDate() && src.State != "SyncSource" {
			t.Fatalf("the source during the sync: %+v", src)
		}
		return r.UpToDate(), fmt.Sprintf("%.1f%%", done)
	})
	if !seen[true] {
		t.Error("never saw the synchronisation between 0 and 100 %")
	}
	for _, node := range []string{"n1", "n2"} {
		r := s.resourceOn(t, "pvc-1", node)
		peer := map[string]string{"n1": "n2", "n2": "n1"}[node]
		if rs := r.Volumes[0].Replication[peer]; rs.State != "Established" || rs.DonePercent != nil || !r.UpToDate() || !r.Connections[peer].Connected {
			t.Errorf("%s after the sync: %+v", node, r)
		}
	}
	pools, _ := s.client.StoragePools(ctx, "n2")
	for _, p := range pools {
		if p.Name == pool && p.FreeKiB != 99*gib {
			t.Errorf("n2's pool after the replica: %+v", p)
		}
	}
	// Again, as after a crash: success, nothing more placed.
	if err := s.client.PlaceReplica(ctx, "pvc-1", "n2", pool); err != nil {
		t.Fatalf("placing again: %v", err)
	}
	if n := len(s.sim.State().Resources); n != 2 {
		t.Fatalf("%d resources after placing again", n)
	}
}

// LINSTOR's refusals come back as errors saying what LINSTOR answered.
func TestPlaceReplicaRefused(t *testing.T) {
	s := newSite(t, linstorsim.Options{}, "pvc-1")
	must(t,
		s.sim.AddStoragePool(linstorsim.Pool{Node: "n3", Name: "small", TotalKiB: gib / 2, FreeKiB: gib / 2}),
		s.sim.AddStoragePool(linstorsim.Pool{Node: "n2", Name: "other", TotalKiB: 10 * gib, FreeKiB: 10 * gib}),
	)
	ctx := ctxFor(t)
	before := s.sim.State()
	cases := []struct {
		name, def, node, pool string
		is                    error
		says                  string
	}{
		{"a node that does not exist", "pvc-1", "n9", pool, linstor.ErrNotFound, "answered 404 Not Found: Node 'n9' not found."},
		{"a definition that does not exist", "pvc-9", "n2", pool, linstor.ErrNotFound, "Resource definition 'pvc-9' not found."},
		{"a pool the node lacks", "pvc-1", "n2", "fast", linstor.ErrNotFound, "Storage pool 'fast' on node 'n2' not found"},
		{"a pool too small", "pvc-1", "n3", "small", nil, "answered 500 Internal Server Error: Not enough free space available for volume 0 of resource 'pvc-1'"},
		{"the node that holds it", "pvc-1", "n1", "other", linstor.ErrExists, "already exists on node 'n1'"},
		{"a name that is no name", "pvc-1", "n2/x", pool, linstor.ErrRefused, "holds a character"},
		{"no pool", "pvc-1", "n2", "", linstor.ErrRefused, "storage pool name is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.client.PlaceReplica(ctx, c.def, c.node, c.pool)
			if err == nil || !strings.Contains(err.Error(), c.says) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("PlaceReplica(%s, %s, %s): %v; want %v saying %q", c.def, c.node, c.pool, err, c.is, c.says)
			}
		})
	}
	if after := s.sim.State(); !reflect.DeepEqual(after, before) {
		t.Fatal("a refused placement changed LINSTOR's state")
	}
	// A replica in another pool than asked: not the one asked for.
	must(t, s.client.PlaceReplica(ctx, "pvc-1", "n2", "other"))
	if err := s.client.PlaceReplica(ctx, "pvc-1", "n2", pool); !errors.Is(err, linstor.ErrExists) || !strings.Contains(err.Error(), `in pool "other"`) {
		t.Fatalf("placing in thin where other holds it: %v", err)
	}
}

func TestTiebreaker(t *testing.T) {
	s := newSite(t, linstorsim.Options{}, "pvc-1")
	ctx := ctxFor(t)
	must(t, s.client.PlaceTiebreaker(ctx, "pvc-1", "n3"))
	r := s.resourceOn(t, "pvc-1", "n3")
	if !r.Diskless || r.Volumes[0].DiskState != "Diskless" || r.UpToDate() {
		t.Fatalf("the tiebreaker: %+v", r)
	}
	if _, ok := r.SyncProgress(); ok {
		t.Fatal("a tiebreaker reports synchronisation progress")
	}
	must(t, s.client.PlaceTiebreaker(ctx, "pvc-1", "n3")) // again: success
	if err := s.client.PlaceTiebreaker(ctx, "pvc-1", "n1"); !errors.Is(err, linstor.ErrExists) || !strings.Contains(err.Error(), "diskful") {
		t.Fatalf("a tiebreaker where the data is: %v", err)
	}
	// While the tiebreaker uses it, LINSTOR keeps the last diskful replica; the tiebreaker goes
	// first.
	if err := s.client.DeleteTiebreaker(ctx, "pvc-1", "n1"); !errors.Is(err, linstor.ErrRefused) {
		t.Fatalf("DeleteTiebreaker on the diskful replica: %v", err)
	}
	must(t, s.client.DeleteTiebreaker(ctx, "pvc-1", "n3"))
	must(t, s.client.DeleteTiebreaker(ctx, "pvc-1", "n3")) // gone already: success
	if rs, _ := s.client.Resources(ctx, linstor.ResourceFilter{Definitions: []string{"pvc-1"}}); len(rs) != 1 {
		t.Fatalf("after deleting the tiebreaker: %+v", rs)
	}
}

// The added replica is deleted; the original never is, and nothing that may be the last whole
// copy is.
func TestDeleteAddedReplica(t *testing.T) {
	s := newSite(t, linstorsim.Options{SyncTime: 500 * time.Millisecond}, "pvc-1", "pvc-2")
	ctx := ctxFor(t)
	before := s.sim.State()
	must(t, s.client.PlaceReplica(ctx, "pvc-1", "n2", pool))

	refused := []linstor.AddedReplica{
		{Definition: "pvc-1", Node: "n1", Original: "n1"},  // the original's own
		{Definition: "pvc-1", Node: "N1", Original: "n1"},  // the same, spelt otherwise
		{Definition: "pvc-1", Node: "n1", Original: "n2"},  // swapped: n2 is no original
		{Definition: "pvc-1", Node: "n2", Original: "n3"},  // n3 holds nothing
		{Definition: "pvc-1", Node: "n2", Original: ""},    // no original named
		{Definition: "", Node: "n2", Original: "n1"},       // no definition
		{Definition: "pvc-1", Node: "n2/", Original: "n1"}, // no name
	}
	for _, r := range refused {
		if err := s.client.DeleteAddedReplica(ctx, r); !errors.Is(err, linstor.ErrRefused) {
			t.Errorf("%+v: %v, want ErrRefused", r, err)
		}
	}
	if n := len(s.sim.State().Resources); n != 3 {
		t.Fatalf("%d resources after the refusals, want 3", n)
	}

	until(t, "pvc-1 UpToDate on n2", func() (bool, string) {
		r := s.resourceOn(t, "pvc-1", "n2")
		return r.UpToDate(), fmt.Sprint(r.Volumes)
	})
	// Synchronised, the two replicas alike but for their age: swapped nodes are still refused.
	err := s.client.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-1", Node: "n1", Original: "n2"})
	if !errors.Is(err, linstor.ErrRefused) || !strings.Contains(err.Error(), "not younger") {
		t.Fatalf("deleting the original, the nodes swapped, after the sync: %v", err)
	}
	// The original offline: the added replica is the only one known whole.
	must(t, s.sim.SetOnline("n1", false))
	err = s.client.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-1", Node: "n2", Original: "n1"})
	if !errors.Is(err, linstor.ErrRefused) || !strings.Contains(err.Error(), "only replica") || !strings.Contains(err.Error(), "unknown state") {
		t.Fatalf("deleting the only replica known whole: %v", err)
	}
	must(t, s.sim.SetOnline("n1", true))

	// In use on its node (a VM runs there): refused here; LINSTOR would refuse too.
	must(t, s.sim.SetInUse("pvc-1", "n2", true))
	if err := s.client.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-1", Node: "n2", Original: "n1"}); !errors.Is(err, linstor.ErrRefused) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("deleting a replica in use: %v", err)
	}
	must(t, s.sim.SetInUse("pvc-1", "n2", false))

	must(t, s.client.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-1", Node: "n2", Original: "n1"}))
	must(t, s.client.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-1", Node: "n2", Original: "n1"})) // gone: success
	if after := s.sim.State(); !reflect.DeepEqual(after, before) {
		t.Fatalf("after deleting the added replica LINSTOR is not as before:\n%+v\nwant\n%+v", after, before)
	}
}

// A replica mid-synchronisation is not whole: deleting it (a rollback) is allowed.
func TestDeleteAReplicaStillSynchronising(t *testing.T) {
	s := newSite(t, linstorsim.Options{SyncTime: time.Hour}, "pvc-1")
	ctx := ctxFor(t)
	before := s.sim.State()
	must(t, s.client.PlaceReplica(ctx, "pvc-1", "n2", pool))
	if r := s.resourceOn(t, "pvc-1", "n2"); r.UpToDate() {
		t.Fatal("synchronised already")
	}
	must(t, s.client.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-1", Node: "n2", Original: "n1"}))
	if after := s.sim.State(); !reflect.DeepEqual(after, before) {
		t.Fatal("LINSTOR is not as before")
	}
}

// One request lists every resource with its volumes' states.
func TestResourcesInOneRequest(t *testing.T) {
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("pvc-%02d", i))
	}
	s := newSite(t, linstorsim.Options{}, names...)
	ctx := ctxFor(t)
	start := s.sim.Requests()["viewResources"]
	rs, err := s.client.Resources(ctx, linstor.ResourceFilter{})
	if err != nil || len(rs) != 20 {
		t.Fatalf("%d resources, %v", len(rs), err)
	}
	if n := s.sim.Requests()["viewResources"] - start; n != 1 {
		t.Fatalf("%d requests for the list, want 1", n)
	}
	for _, r := range rs {
		if !r.UpToDate() || !r.StateKnown() || r.InUse == nil || *r.InUse {
			t.Errorf("%+v", r)
		}
	}
	filtered, err := s.client.Resources(ctx, linstor.ResourceFilter{Definitions: []string{"pvc-03", "pvc-07"}, Nodes: []string{"n1"}})
	if err != nil || len(filtered) != 2 {
		t.Fatalf("filtered: %+v, %v", filtered, err)
	}
}
