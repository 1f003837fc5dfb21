package bondmodeflipplan_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/netsite"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// The flip's tests share the cluster's one NodewrightCluster and EdgeProfile (clusterplay):
// they do not run in parallel.

// failedPart is the first part of a node's step that failed: its position, name, message and
// end.
func failedPart(f *nwv1.BondModeFlipPlan) (k int, part, msg string, at time.Time) {
	for _, n := range f.Status.Nodes {
		for _, p := range n.Parts {
			if p.State == nwv1.StepFailed && p.FinishedAt != nil {
				return int(n.Position), p.Name, p.Message, p.FinishedAt.Time
			}
		}
	}
	return 0, "", "", time.Time{}
}

// TestADeadPeerFailsTheStepWithinItsLease: the third node's agent dies while the first node's
// bond is being changed. The first node's Confirm, which needs the peer's report read after
// the change, never gets it (its report from before the change does not count): the change is
// never committed, and the Confirm fails once the dead agent's Lease stops holding, not at a
// 10-minute limit, naming the peer and what it last reported; the rollback brings the first
// node back without waiting for the dead peer, and says what it left on it.
func TestADeadPeerFailsTheStepWithinItsLease(t *testing.T) {
	var s *site
	const flip = "flip-dead-peer"
	var once sync.Once
	killed := make(chan struct{})
	s = newSiteWith(t, func(obj client.Object) {
		if op, ok := obj.(*nwv1.NodeOperation); ok && op.Name == flip+"-n1-setmode" {
			once.Do(func() {
				siteagent.Kill(s.agents["flipdead-c"])
				close(killed)
			})
		}
	}, "flipdead-a=primary", "flipdead-b=secondary", "flipdead-c=secondary")
	f := s.flip(flip, nwv1.VMProtectionNone, "flipdead-a", "flipdead-b", "flipdead-c")
	select {
	case <-killed:
	case <-time.After(patience):
		t.Fatalf("the operator never asked flipdead-a for its change; steps %s", steps(f))
	}
	l, held := siteagent.Lease(t, env.Client, s.ns, "flipdead-c")
	f = s.ended(f, nwv1.WorkflowRolledBack)

	k, part, msg, at := failedPart(f)
	if k != 1 || part != "Confirm" {
		t.Fatalf("node %d's %s failed (%q); want node 1's Confirm; steps %s", k, part, msg, steps(f))
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: flip + "-n1-commit"}, &nwv1.NodeOperation{}); !apierrors.IsNotFound(err) {
		t.Errorf("node 1's change was committed (%v): the dead peer's report from before the change counted", err)
	}
	if !strings.Contains(msg, "flipdead-c's agent last renewed its heartbeat Lease "+s.ns+"/flipdead-c at") ||
		!strings.Contains(msg, "it last reported bond "+netsite.Bond+" in active-backup") {
		t.Errorf("the failed part says %q; want it to name the dead peer, its last renewal and its last report", msg)
	}
	// The step failed once the last renewal stopped holding, within the bound: the
	// Lease's duration and 10 s (the agents here renew every 2 s; a busy machine may
	// delay the reconcile).
	bound := held + 10*time.Second
	if took := at.Sub(l.Spec.RenewTime.Time); took > bound {
		t.Errorf("the step failed %s after the dead agent's last renewal; want at most %s", took, bound)
	}
	t.Logf("the step failed %s after the dead agent's last renewal (its Lease: %s)", at.Sub(l.Spec.RenewTime.Time), held)

	// Rolled back: every bond in active-backup, the first node's rollback saying what it left
	// on the dead peer.
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondModeActiveBackup {
			t.Errorf("%s's bond runs %s, want active-backup", n, got)
		}
	}
	rb := partMessage(f, 1, "RollbackBondMode")
	t.Logf("node 1's rollback: %s", rb)
	if !strings.Contains(rb, "not waited for, their agents silent: flipdead-c's agent last renewed") {
		t.Errorf("node 1's rollback says %q; want it to say it did not wait for flipdead-c", rb)
	}
}

// TestAStaleLeaseHoldsNoFlip: a node's agent is dead, its Lease no longer holds: the flip's
// Preflight refuses to start, naming the node and its last renewal, in the Succeeded
// condition and a Warning Event, and no node changes.
func TestAStaleLeaseHoldsNoFlip(t *testing.T) {
	s := newSite(t, "flipstale-a=primary", "flipstale-b=secondary")
	siteagent.Kill(s.agents["flipstale-b"])
	testenv.Eventually(t, patience, func() string {
		l, held := siteagent.Lease(t, env.Client, s.ns, "flipstale-b")
		if left := time.Until(l.Spec.RenewTime.Add(held)); left >= 0 {
			return fmt.Sprintf("flipstale-b's Lease holds %s more", left)
		}
		return ""
	})
	f := s.ended(s.flip("flip-stale", nwv1.VMProtectionNone), nwv1.WorkflowRolledBack)
	want := "flipstale-b's agent last renewed its heartbeat Lease " + s.ns + "/flipstale-b at"
	if msg := stepMessage(f, "Preflight"); !strings.Contains(msg, want) {
		t.Errorf("the Preflight says %q; want %q", msg, want)
	}
	var cond string
	for _, c := range f.Status.Conditions {
		if c.Type == nwv1.ConditionSucceeded {
			cond = c.Message
		}
	}
	if !strings.Contains(cond, want) {
		t.Errorf("the Succeeded condition says %q; want %q", cond, want)
	}
	testenv.Eventually(t, patience, func() string {
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events); err != nil {
			return err.Error()
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == f.Name && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, want) {
				return ""
			}
		}
		return "no Warning Event about " + f.Name + " says " + want
	})
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondModeActiveBackup || s.changes(n) != 0 {
			t.Errorf("%s's bond runs %s after %d changes; want active-backup, untouched", n, got, s.changes(n))
		}
	}
}
