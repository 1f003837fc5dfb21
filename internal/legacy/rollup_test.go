package legacy

import (
	"strings"
	"testing"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

func TestRoll(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	const staleAfter = 30 * time.Second
	fresh := func(name string, age time.Duration) Node { return Node{Name: name, Heartbeat: now.Add(-age)} }
	cases := []struct {
		name      string
		state     State
		nodes     []Node
		problems  []Problem
		phase     nwv1.ClusterPhase
		ready     int32
		deadline  time.Time
		staleName string
	}{
		{"multi-node healthy", MultiNodeReady, []Node{fresh("a", 5*time.Second), fresh("b", 20*time.Second)}, nil,
			nwv1.ClusterMultiNode, 2, now.Add(10*time.Second + time.Nanosecond), ""},
		{"exactly at the threshold is still fresh", SingleNodeReady, []Node{fresh("a", staleAfter)}, nil,
			nwv1.ClusterSingleNode, 1, now.Add(time.Nanosecond), ""},
		{"stale node degrades multi-node", MultiNodeReady, []Node{fresh("a", 5*time.Second), fresh("b", 31*time.Second)}, nil,
			nwv1.ClusterDegraded, 1, now.Add(25*time.Second + time.Nanosecond), "b"},
		{"node without heartbeat degrades single-node", SingleNodeReady, []Node{{Name: "a"}}, nil,
			nwv1.ClusterDegraded, 0, time.Time{}, "a"},
		{"stale node does not change an upgrade's phase", DRBDSyncing, []Node{fresh("a", time.Minute)}, nil,
			nwv1.ClusterUpgrading, 0, time.Time{}, "a"},
		{"stale node does not change bootstrap", Init, []Node{fresh("a", time.Hour)}, nil,
			nwv1.ClusterBootstrap, 0, time.Time{}, "a"},
		{"problems make it Unknown", MultiNodeReady, []Node{fresh("a", time.Second)}, []Problem{{Key: "generation"}},
			nwv1.ClusterUnknown, 1, now.Add(29*time.Second + time.Nanosecond), ""},
		{"heartbeat from the future is fresh", MultiNodeReady, []Node{fresh("a", -10*time.Second)}, nil,
			nwv1.ClusterMultiNode, 1, now.Add(40*time.Second + time.Nanosecond), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Roll(Observation{State: tc.state, Nodes: tc.nodes}, tc.problems, now, staleAfter)
			if r.Phase != tc.phase || r.Ready != tc.ready || !r.NextDeadline.Equal(tc.deadline) {
				t.Errorf("phase %s ready %d deadline %v; want %s %d %v", r.Phase, r.Ready, r.NextDeadline, tc.phase, tc.ready, tc.deadline)
			}
			for _, h := range r.Nodes {
				if h.Stale != (h.Name == tc.staleName) {
					t.Errorf("node %s stale = %v", h.Name, h.Stale)
				}
				if h.Stale != h.StaleAt.IsZero() {
					t.Errorf("node %s: stale %v but StaleAt %v", h.Name, h.Stale, h.StaleAt)
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name     string
		obs      Observation
		last     int64
		kinds    []AnomalyKind
		contains string
	}{
		{"allowed step", Observation{State: PeerDetected, PreviousState: MultiNodeReady, Generation: 15}, 14, nil, ""},
		{"same generation seen again", Observation{State: PeerDetected, PreviousState: Init, Generation: 15}, 15, nil, ""},
		{"forbidden transition", Observation{State: MultiNodeReady, PreviousState: Init, Generation: 3}, 2,
			[]AnomalyKind{ForbiddenTransition}, "from INIT to MULTI_NODE_READY"},
		{"generation jump", Observation{State: PeerDetected, PreviousState: MultiNodeReady, Generation: 20}, 14,
			[]AnomalyKind{GenerationJump}, "5 transition(s) were not observed"},
		{"both", Observation{State: Resyncing, PreviousState: Init, Generation: 9}, 2,
			[]AnomalyKind{ForbiddenTransition, GenerationJump}, ""},
		{"unknown previous state", Observation{State: MultiNodeReady, UnknownPreviousState: "WARP_DRIVE_ENGAGED", Generation: 3}, 2,
			[]AnomalyKind{UnknownPreviousState}, `to MULTI_NODE_READY from previousState "WARP_DRIVE_ENGAGED"`},
		{"unknown previous state seen again", Observation{State: MultiNodeReady, UnknownPreviousState: "WARP_DRIVE_ENGAGED", Generation: 3}, 3, nil, ""},
		{"generation regressed", Observation{State: Init, Generation: 1}, 30,
			[]AnomalyKind{GenerationRegressed}, "went back from 30 to 1"},
		{"first observation", Observation{State: MultiNodeReady, PreviousState: TaintsReleasing, Generation: 14}, 0, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.obs, tc.last)
			if len(got) != len(tc.kinds) {
				t.Fatalf("anomalies %v, want kinds %v", got, tc.kinds)
			}
			for i, a := range got {
				if a.Kind != tc.kinds[i] {
					t.Errorf("anomaly %d is %s, want %s", i, a.Kind, tc.kinds[i])
				}
				if tc.contains != "" && i == 0 && !strings.Contains(a.Message, tc.contains) {
					t.Errorf("message %q does not say %q", a.Message, tc.contains)
				}
			}
		})
	}
}
