package agentstatus

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// TestLastSeenMovesOnlyWhenFreshnessChanges: ticking heartbeats leave the status equal; going
// stale records the last heartbeat; coming back records the new one.
func TestLastSeenMovesOnlyWhenFreshnessChanges(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	health := func(hb time.Time, stale bool) legacy.NodeHealth {
		return legacy.NodeHealth{Node: legacy.Node{Name: "a", Heartbeat: hb, Role: nwv1.NodeRolePrimary}, Stale: stale}
	}
	st := computeStatus(nwv1.NodewrightAgentStatusStatus{}, health(t0, false), 30*time.Second)
	if st.Heartbeat.LastSeen == nil || !st.Heartbeat.LastSeen.Time.Equal(t0) || st.Heartbeat.Stale {
		t.Fatalf("first status %+v", st.Heartbeat)
	}
	if ticked := computeStatus(st, health(t0.Add(10*time.Second), false), 30*time.Second); !equality.Semantic.DeepEqual(ticked, st) {
		t.Errorf("a ticking heartbeat changed the status: %+v", ticked.Heartbeat)
	}
	stale := computeStatus(st, health(t0.Add(20*time.Second), true), 30*time.Second)
	if !stale.Heartbeat.Stale || !stale.Heartbeat.LastSeen.Time.Equal(t0.Add(20*time.Second)) {
		t.Errorf("going stale: %+v", stale.Heartbeat)
	}
	back := computeStatus(stale, health(t0.Add(5*time.Minute), false), 30*time.Second)
	if back.Heartbeat.Stale || !back.Heartbeat.LastSeen.Time.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("coming back: %+v", back.Heartbeat)
	}
}
