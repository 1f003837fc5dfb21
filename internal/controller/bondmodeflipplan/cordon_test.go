package bondmodeflipplan_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/controller/bondmodeflipplan"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// cordonOf says how Node name stands: "cordoned by <annotation>", "cordoned" (no annotation),
// "schedulable", or "schedulable, annotated <annotation>".
func cordonOf(t *testing.T, name string) string {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	by, marked := n.Annotations[bondflip.AnnotationCordonedBy]
	switch {
	case n.Spec.Unschedulable && marked:
		return "cordoned by " + by
	case n.Spec.Unschedulable:
		return "cordoned"
	case marked:
		return "schedulable, annotated " + by
	}
	return "schedulable"
}

// setUnschedulable cordons or uncordons Node name as an administrator does (kubectl cordon:
// spec.unschedulable alone).
func setUnschedulable(t *testing.T, name string, unschedulable bool) {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	base := n.DeepCopy()
	n.Spec.Unschedulable = unschedulable
	if err := env.Client.Patch(context.Background(), n, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// TestEachNodeIsCordonedForItsChange: with the operator under the chart's policies, a flip
// cordons each node for its change and uncordons it after, and leaves alone a node an
// administrator cordoned before it; a rollback cordons a node flipped before while it sets its
// mode back, and uncordons every node it cordoned. The Nodes are read as each change is asked
// for (the SetBondMode, the commit, the rollback's change back) and after each flip.
func TestEachNodeIsCordonedForItsChange(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // NodeOperation name -> how its node stood when it was created
	s := newSiteWith(t, func(obj client.Object) {
		op, ok := obj.(*nwv1.NodeOperation)
		if !ok || (op.Spec.Type != nwv1.OperationSetBondMode && op.Spec.Type != nwv1.OperationCommitCheckpoint) {
			return
		}
		state := cordonOf(t, op.Spec.NodeName)
		mu.Lock()
		defer mu.Unlock()
		seen[op.Name] = state
	}, "cordon-a=primary", "cordon-b=secondary")
	at := func(op string) string {
		mu.Lock()
		defer mu.Unlock()
		return seen[op]
	}
	// The administrator cordoned cordon-b before the flip.
	setUnschedulable(t, "cordon-b", true)

	t.Run("forward", func(t *testing.T) {
		f := s.ended(s.flip("cordon-fwd", nwv1.VMProtectionNone, "cordon-a", "cordon-b"), nwv1.WorkflowSucceeded)
		ours := "cordoned by " + bondflip.CordonedBy(f.Name)
		for _, c := range []struct{ op, want string }{
			{"cordon-fwd-n1-setmode", ours}, {"cordon-fwd-n1-commit", ours},
			{"cordon-fwd-n2-setmode", "cordoned"}, {"cordon-fwd-n2-commit", "cordoned"},
		} {
			if got := at(c.op); got != c.want {
				t.Errorf("when %s was asked for, its node was %q; want %q", c.op, got, c.want)
			}
		}
		if got := cordonOf(t, "cordon-a"); got != "schedulable" {
			t.Errorf("after the flip cordon-a is %s; want schedulable, unannotated", got)
		}
		if got := cordonOf(t, "cordon-b"); got != "cordoned" {
			t.Errorf("after the flip cordon-b is %s; want cordoned as the administrator left it, unannotated", got)
		}
		for k, want := range []struct {
			cordon           nwv1.NodeCordon
			cordonMsg, unMsg string
		}{
			{nwv1.NodeUncordoned, "cordoned cordon-a", "uncordoned cordon-a"},
			{nwv1.NodeWasCordoned, "cordon-b was already cordoned: left alone", "cordon-b was cordoned before the flip: left as it was"},
		} {
			n := f.Status.Nodes[k]
			if n.Cordon != want.cordon || partMessage(f, k+1, bondflip.Cordon) != want.cordonMsg || partMessage(f, k+1, bondflip.Uncordon) != want.unMsg {
				t.Errorf("node %d: cordon %q, Cordon %q, Uncordon %q; want %q, %q, %q", k+1, n.Cordon,
					partMessage(f, k+1, bondflip.Cordon), partMessage(f, k+1, bondflip.Uncordon), want.cordon, want.cordonMsg, want.unMsg)
			}
		}
		wantEvents(t, f, bondmodeflipplan.ReasonCordoned+": cordoned cordon-a for its change",
			bondmodeflipplan.ReasonUncordoned+": uncordoned cordon-a after its change",
			bondmodeflipplan.ReasonLeftCordoned+": cordon-b was already cordoned: left alone")
	})
	if t.Failed() {
		return
	}

	t.Run("rollback", func(t *testing.T) {
		// The administrator uncordoned cordon-b: this flip cordons both. cordon-b's port never
		// carries the mode: it restores itself, and cordon-a is flipped back.
		setUnschedulable(t, "cordon-b", false)
		for _, node := range s.nodes {
			s.reported(node, nwv1.BondMode8023AD)
		}
		s.net.NeverCarry("cordon-b", nwv1.BondModeActiveBackup)
		defer s.net.NeverCarry("cordon-b", "")
		f := s.ended(s.flipTo("cordon-back", nwv1.BondModeActiveBackup, nwv1.VMProtectionNone, "cordon-a", "cordon-b"), nwv1.WorkflowRolledBack)
		ours := "cordoned by " + bondflip.CordonedBy(f.Name)
		for _, c := range []struct{ op, want string }{
			{"cordon-back-n1-setmode", ours}, {"cordon-back-n2-setmode", ours},
			// Flipped back with the rollback's own cordon.
			{"cordon-back-n1-rb-setmode", ours}, {"cordon-back-n1-rb-commit", ours},
		} {
			if got := at(c.op); got != c.want {
				t.Errorf("when %s was asked for, its node was %q; want %q", c.op, got, c.want)
			}
		}
		for k, node := range s.nodes {
			if got := cordonOf(t, node); got != "schedulable" {
				t.Errorf("after the rollback %s is %s; want schedulable, unannotated", node, got)
			}
			if n := f.Status.Nodes[k]; n.Cordon != nwv1.NodeUncordoned {
				t.Errorf("node %d's cordon: %q; want Uncordoned", k+1, n.Cordon)
			}
		}
		want := map[int]string{
			1: "Cordon=Succeeded ProtectVMs=Skipped PauseResync=Succeeded SetBondMode=Succeeded Confirm=Succeeded ResumeResync=Succeeded Uncordon=Succeeded RestoreVMs=Skipped " +
				"RollbackCordon=Succeeded RollbackProtectVMs=Skipped RollbackBondMode=Succeeded RollbackUncordon=Succeeded RollbackVMs=Skipped",
			2: "Cordon=Succeeded ProtectVMs=Skipped PauseResync=Succeeded SetBondMode=Failed RollbackBondMode=Succeeded RollbackUncordon=Succeeded RollbackVMs=Skipped",
		}
		for k, w := range want {
			if got := parts(f.Status.Nodes[k-1]); got != w {
				t.Errorf("node %d's parts: %s; want %s", k, got, w)
			}
		}
	})
}

// wantEvents waits until the flip's Events include each of want ("<reason>: <message>").
func wantEvents(t *testing.T, f *nwv1.BondModeFlipPlan, want ...string) {
	t.Helper()
	testenv.Eventually(t, patience, func() string {
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events); err != nil {
			return err.Error()
		}
		var got []string
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "BondModeFlipPlan" && e.InvolvedObject.Name == f.Name {
				got = append(got, e.Reason+": "+e.Message)
			}
		}
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				return fmt.Sprintf("no Event %q; the flip's: %s", w, strings.Join(got, "; "))
			}
		}
		return ""
	})
}
