package agentstatus

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestChangedNodes(t *testing.T) {
	base := map[string]string{"state": "MULTI_NODE_READY", "nodes": "a,b,c",
		"node.a.heartbeat": "t1", "node.b.heartbeat": "t1", "node.c.heartbeat": "t1", "node.c.drbd": "{}"}
	with := func(change map[string]string, drop ...string) map[string]string {
		out := maps.Clone(base)
		maps.Copy(out, change)
		for _, k := range drop {
			delete(out, k)
		}
		return out
	}
	cases := []struct {
		name  string
		after map[string]string
		want  string
	}{
		{"one heartbeat ticks", with(map[string]string{"node.b.heartbeat": "t2"}), "b"},
		{"state changes only", with(map[string]string{"state": "PEER_LOST"}), ""},
		{"a key disappears", with(nil, "node.c.drbd"), "c"},
		{"a node joins", with(map[string]string{"nodes": "a,b,c,d", "node.d.heartbeat": "t1"}), "a,b,c,d"},
		{"dotted node name", with(map[string]string{"node.edge.example.com.role": "primary"}), "edge.example.com"},
	}
	for _, tc := range cases {
		got := slices.Sorted(maps.Keys(changedNodes(base, tc.after)))
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%s: changed %v, want %s", tc.name, got, tc.want)
		}
	}
}
