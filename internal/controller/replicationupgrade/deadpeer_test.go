package replicationupgrade_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// step is u's step named name.
func step(u *nwv1.ReplicationUpgrade, name string) nwv1.WorkflowStep {
	for _, st := range u.Status.Steps {
		if st.Name == name {
			return st
		}
	}
	return nwv1.WorkflowStep{}
}

// TestADeadOriginalAgentFailsTheVerifyWithinItsLease: the original node's agent, which runs
// DRBD's online verify of every volume, dies while the new replicas synchronise. The Verify
// fails once its Lease stops holding, not at the verify's deadline (6 h), naming the node
// and what it last reported, and the upgrade rolls back as for any failed Verify: LINSTOR holds
// what it held at the start.
func TestADeadOriginalAgentFailsTheVerifyWithinItsLease(t *testing.T) {
	s := newSite(t, siteOptions{volumes: 4}, "updead-a", "updead-b")
	s.startOperator()
	u := s.upgrade("dead-original", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"updead-b"}, ReplicaCount: 2})
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if st := step(u, "Sync"); st.State != nwv1.StepRunning && st.State != nwv1.StepSucceeded {
			return "Sync " + string(st.State) + "; " + steps(u)
		}
		return ""
	})
	siteagent.Kill(s.agents["updead-a"])
	l, held := siteagent.Lease(t, env.Client, s.ns, "updead-a")
	u = s.ended(u, nwv1.WorkflowRolledBack)
	v := step(u, "Verify")
	if v.State != nwv1.StepFailed || v.FinishedAt == nil {
		t.Fatalf("the Verify %s; want Failed; steps %s", v.State, steps(u))
	}
	want := "updead-a's agent last renewed its heartbeat Lease " + s.ns + "/updead-a at"
	if !strings.Contains(v.Message, want) || !strings.Contains(v.Message, "it last reported") {
		t.Errorf("the Verify says %q; want it to name the node, its last renewal (%q) and its last report", v.Message, want)
	}
	// The Verify looks again as the Lease stops holding; on a busy machine that look can come
	// late by seconds (CI once saw 12.8 s). The bound only tells a Verify given up on its Lease
	// from one that waited for its verifies' deadline (6 h). It must not give up while the
	// Lease holds: finishedAt is to the second, hence the second off.
	bound := held + time.Minute
	switch took := v.FinishedAt.Sub(l.Spec.RenewTime.Time); {
	case took > bound:
		t.Errorf("the Verify failed %s after the agent's last renewal; want at most %s", took, bound)
	case took < held-time.Second:
		t.Errorf("the Verify failed %s after the agent's last renewal, while its Lease (%s) held", took, held)
	}
	t.Logf("the Verify failed %s after the agent's last renewal (its Lease: %s): %s", v.FinishedAt.Sub(l.Spec.RenewTime.Time), held, v.Message)
	s.sameAsStart()
}

// TestAStaleLeaseHoldsNoUpgrade: a joining node's agent is dead, its Lease no longer holds:
// the Preflight refuses to start, naming the field, the node and its last renewal, and LINSTOR
// is untouched.
func TestAStaleLeaseHoldsNoUpgrade(t *testing.T) {
	s := newSite(t, siteOptions{volumes: 2}, "upstale-a", "upstale-b")
	siteagent.Kill(s.agents["upstale-b"])
	testenv.Eventually(t, patience, func() string {
		l, held := siteagent.Lease(t, env.Client, s.ns, "upstale-b")
		if left := time.Until(l.Spec.RenewTime.Add(held)); left >= 0 {
			return fmt.Sprintf("upstale-b's Lease holds %s more", left)
		}
		return ""
	})
	s.startOperator()
	u := s.ended(s.upgrade("stale-peer", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"upstale-b"}, ReplicaCount: 2}), nwv1.WorkflowRolledBack)
	want := "spec.peerNodes[0]: upstale-b's agent last renewed its heartbeat Lease " + s.ns + "/upstale-b at"
	if msg := step(u, "Preflight").Message; !strings.Contains(msg, want) {
		t.Errorf("the Preflight says %q; want %q", msg, want)
	}
	for _, c := range u.Status.Conditions {
		if c.Type == nwv1.ConditionSucceeded && !strings.Contains(c.Message, want) {
			t.Errorf("the Succeeded condition says %q; want %q", c.Message, want)
		}
	}
	s.sameAsStart()
}
