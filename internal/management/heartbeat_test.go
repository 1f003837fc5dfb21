package management

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

func TestAHeartbeatHoldsForItsLeasesOwnDuration(t *testing.T) {
	withDuration := func(renewed *time.Time, seconds int32) *coordinationv1.Lease {
		l := lease("edge-2", renewed)
		l.Spec.LeaseDurationSeconds = ptr.To(seconds)
		return &l
	}
	bare := lease("edge-2", at(-39*time.Second))
	never := lease("edge-2", nil)
	cases := []struct {
		name   string
		lease  *coordinationv1.Lease
		silent string
		left   time.Duration
	}{
		{"no Lease", nil, "edge-2's agent has no heartbeat Lease nw-agent/edge-2", 0},
		{"never renewed", &never, "edge-2's agent never renewed its heartbeat Lease nw-agent/edge-2", 0},
		{"renewed within its 40 s", withDuration(at(-30*time.Second), 40), "", 10 * time.Second},
		{"renewed in the future (a clock ahead)", withDuration(at(5*time.Second), 40), "", 45 * time.Second},
		{"exactly its duration ago", withDuration(at(-40*time.Second), 40),
			"edge-2's agent last renewed its heartbeat Lease nw-agent/edge-2 at 2026-11-21T09:59:20Z, more than its duration of 40s ago", 0},
		{"a short Lease (4 s) renewed 5 s ago", withDuration(at(-5*time.Second), 4),
			"edge-2's agent last renewed its heartbeat Lease nw-agent/edge-2 at 2026-11-21T09:59:55Z, more than its duration of 4s ago", 0},
		{"no duration: the agent's 40 s", &bare, "", time.Second},
		{"a zero duration: the agent's 40 s", withDuration(at(-39*time.Second), 0), "", time.Second},
	}
	for _, c := range cases {
		h := LeaseHeartbeat("nw-agent", "edge-2", c.lease)
		if got := h.Silent(now); got != c.silent {
			t.Errorf("%s: Silent %q, want %q", c.name, got, c.silent)
		}
		if got := h.Left(now); got != c.left {
			t.Errorf("%s: Left %s, want %s", c.name, got, c.left)
		}
	}
}
