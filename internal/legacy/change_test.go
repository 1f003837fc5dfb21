package legacy

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCompare(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 30, 0, time.UTC)
	const staleAfter = 30 * time.Second
	base := map[string]string{"state": "MULTI_NODE_READY", "nodes": "a,b,c",
		"node.a.heartbeat": "2026-11-21T10:00:10Z", "node.b.heartbeat": "2026-11-21T10:00:10Z",
		"node.c.heartbeat": "2026-11-21T09:59:00Z", "node.c.drbd": "{}"}
	with := func(change map[string]string, drop ...string) map[string]string {
		out := maps.Clone(base)
		maps.Copy(out, change)
		for _, k := range drop {
			delete(out, k)
		}
		return out
	}
	cases := []struct {
		name    string
		after   map[string]string
		nodes   string
		cluster bool
	}{
		{"nothing changed", with(nil), "", false},
		{"a fresh heartbeat ticks forward", with(map[string]string{"node.b.heartbeat": "2026-11-21T10:00:20Z"}), "", false},
		{"two fresh heartbeats tick", with(map[string]string{"node.a.heartbeat": "2026-11-21T10:00:29Z", "node.b.heartbeat": "2026-11-21T10:00:30+00:00"}), "", false},
		{"a fresh heartbeat written again", with(map[string]string{"node.b.heartbeat": "2026-11-21T10:00:10+00:00"}), "", false},
		{"a stale heartbeat resumes", with(map[string]string{"node.c.heartbeat": "2026-11-21T10:00:30Z"}), "c", true},
		{"a heartbeat goes backwards", with(map[string]string{"node.a.heartbeat": "2026-11-21T10:00:05Z"}), "a", true},
		{"a heartbeat becomes unreadable", with(map[string]string{"node.a.heartbeat": "soon"}), "a", true},
		{"a heartbeat disappears", with(nil, "node.a.heartbeat"), "a", true},
		{"a first heartbeat", with(map[string]string{"node.d.heartbeat": "2026-11-21T10:00:30Z"}), "d", true},
		{"state changes only", with(map[string]string{"state": "PEER_LOST"}), "", true},
		{"a key disappears", with(nil, "node.c.drbd"), "c", true},
		{"a key disappears as another appears", with(map[string]string{"node.a.role": "primary"}, "node.c.drbd"), "a,c", true},
		{"a node joins", with(map[string]string{"nodes": "a,b,c,d", "node.d.heartbeat": "2026-11-21T10:00:30Z"}), "a,b,c,d", true},
		{"dotted node name", with(map[string]string{"node.edge.example.com.role": "primary"}), "edge.example.com", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(base, tc.after, now, staleAfter)
			if got := strings.Join(slices.Sorted(maps.Keys(c.Nodes)), ","); got != tc.nodes || c.Cluster != tc.cluster {
				t.Errorf("nodes %q cluster %v, want %q %v", got, c.Cluster, tc.nodes, tc.cluster)
			}
		})
	}
	// CompareEvery has no quiet heartbeat: a tick is a change of its node; what is no change
	// for Compare otherwise is none for it either.
	every := map[string]string{"a fresh heartbeat ticks forward": "b", "two fresh heartbeats tick": "a,b", "a fresh heartbeat written again": "b"}
	for _, tc := range cases {
		t.Run("every/"+tc.name, func(t *testing.T) {
			nodes, cluster := tc.nodes, tc.cluster
			if n, ok := every[tc.name]; ok {
				nodes, cluster = n, true
			}
			c := CompareEvery(base, tc.after)
			if got := strings.Join(slices.Sorted(maps.Keys(c.Nodes)), ","); got != nodes || c.Cluster != cluster {
				t.Errorf("nodes %q cluster %v, want %q %v", got, c.Cluster, nodes, cluster)
			}
		})
	}
}

// TestQuietHeartbeatAtTheThreshold: a heartbeat exactly as old as the threshold is still
// fresh (Roll's rule), one a nanosecond older is not.
func TestQuietHeartbeatAtTheThreshold(t *testing.T) {
	before, after := "2026-11-21T10:00:00Z", "2026-11-21T10:00:31Z"
	at := time.Date(2026, 11, 21, 10, 0, 30, 0, time.UTC)
	if !QuietHeartbeat(before, after, at, 30*time.Second) {
		t.Error("a heartbeat exactly at the threshold moving forward is not quiet")
	}
	if QuietHeartbeat(before, after, at.Add(time.Nanosecond), 30*time.Second) {
		t.Error("a heartbeat past the threshold moving forward is quiet")
	}
	r := Roll(Observation{State: MultiNodeReady, Nodes: []Node{{Name: "a", Heartbeat: at.Add(-30 * time.Second)}}}, nil, at, 30*time.Second)
	if r.Nodes[0].Stale {
		t.Error("Roll disagrees: the heartbeat at the threshold is stale")
	}
}

// BenchmarkCompareTick is the cost of a heartbeat tick on 50 nodes, which the watch handlers
// pay for every heartbeat.
func BenchmarkCompareTick(b *testing.B) {
	at := time.Date(2026, 11, 21, 10, 0, 30, 0, time.UTC)
	before := map[string]string{"state": "MULTI_NODE_READY", "previousState": "TAINTS_RELEASING",
		"stateSince": "2026-11-21T09:00:00Z", "generation": "14"}
	var names []string
	for i := range 50 {
		n := "edge-" + strings.Repeat("0", 2-len(strconv.Itoa(i))) + strconv.Itoa(i)
		names = append(names, n)
		before[NodeKey(n, FieldHeartbeat)] = "2026-11-21T10:00:20Z"
		before[NodeKey(n, FieldRole)] = "secondary"
		before[NodeKey(n, FieldDRBD)] = `{"resources":4,"connected":4,"upToDate":4,"outOfSyncKiB":0}`
		before[NodeKey(n, FieldBondMode)] = "802.3ad"
	}
	before[KeyNodes] = strings.Join(names, ",")
	after := maps.Clone(before)
	after[NodeKey(names[7], FieldHeartbeat)] = "2026-11-21T10:00:21Z"
	b.ReportAllocs()
	for b.Loop() {
		if c := Compare(before, after, at, 30*time.Second); c.Cluster {
			b.Fatal("a tick changed the cluster")
		}
	}
}
