package agentstatus

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"

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
	st := computeStatus(nwv1.NodewrightAgentStatusStatus{}, health(t0, false), 30*time.Second, nil)
	if st.Heartbeat.LastSeen == nil || !st.Heartbeat.LastSeen.Time.Equal(t0) || st.Heartbeat.Stale {
		t.Fatalf("first status %+v", st.Heartbeat)
	}
	if ticked := computeStatus(st, health(t0.Add(10*time.Second), false), 30*time.Second, nil); !equality.Semantic.DeepEqual(ticked, st) {
		t.Errorf("a ticking heartbeat changed the status: %+v", ticked.Heartbeat)
	}
	stale := computeStatus(st, health(t0.Add(20*time.Second), true), 30*time.Second, nil)
	if !stale.Heartbeat.Stale || !stale.Heartbeat.LastSeen.Time.Equal(t0.Add(20*time.Second)) {
		t.Errorf("going stale: %+v", stale.Heartbeat)
	}
	back := computeStatus(stale, health(t0.Add(5*time.Minute), false), 30*time.Second, nil)
	if back.Heartbeat.Stale || !back.Heartbeat.LastSeen.Time.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("coming back: %+v", back.Heartbeat)
	}
}

// TestUnparsableNodeKeysAreNamed: a heartbeat or DRBD report that is there but cannot be read
// is not reported as missing; the condition names the key, the value and what is wrong.
func TestUnparsableNodeKeysAreNamed(t *testing.T) {
	obs, problems := legacy.Parse(map[string]string{
		legacy.KeyState: string(legacy.SingleNodeReady), legacy.KeyStateSince: "2026-11-21T10:00:00Z",
		legacy.KeyGeneration: "4", legacy.KeyNodes: "a",
		legacy.NodeKey("a", legacy.FieldHeartbeat): "yesterday",
		legacy.NodeKey("a", legacy.FieldDRBD):      `{"resources":"two"}`,
	})
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	roll := legacy.Roll(obs, problems, now, 30*time.Second)
	st := computeStatus(nwv1.NodewrightAgentStatusStatus{}, roll.Nodes[0], 30*time.Second, problems)
	for _, want := range []struct{ condition, key, value string }{
		{nwv1.ConditionHeartbeatFresh, "node.a.heartbeat", "yesterday"},
		{nwv1.ConditionStorageHealthy, "node.a.drbd", `{\"resources\":\"two\"}`},
	} {
		c := meta.FindStatusCondition(st.Conditions, want.condition)
		if c == nil || c.Reason != nwv1.ReasonInvalidLegacyData ||
			!strings.Contains(c.Message, `key "`+want.key+`", value "`+want.value+`"`) {
			t.Errorf("%s = %+v, want reason %s naming key %s and its value", want.condition, c, nwv1.ReasonInvalidLegacyData, want.key)
		}
	}
}
