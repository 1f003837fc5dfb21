package bondflip

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

func record(n *nwv1.NodeFlip) string {
	var out []string
	for _, p := range n.Parts {
		out = append(out, p.Name+"="+string(p.State))
	}
	return strings.Join(out, " ")
}

// TestThePartRecord walks a node's record as its steps write it: each part begun, ended, the
// next begun; a part begun again keeps its start; the rollback reads the part the forward
// step ended in and stops the one left under way.
func TestThePartRecord(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC))
	later := metav1.NewTime(t0.Add(time.Minute))
	n := &nwv1.NodeFlip{Name: "edge-1", Position: 1}
	if got := Current(n, NodeParts); got != Cordon {
		t.Fatalf("nothing begun: current %q", got)
	}
	if got := FailedPart(n); got != Cordon {
		t.Errorf("nothing begun: failed in %q; want Cordon (nothing to undo but a cordon written before a crash)", got)
	}
	Begin(n, Cordon, "", t0)
	End(n, Cordon, nwv1.StepSucceeded, "cordoned edge-1", t0)
	if got := Current(n, NodeParts); got != ProtectVMs {
		t.Fatalf("after Cordon: current %q", got)
	}
	Begin(n, ProtectVMs, "moving", t0)
	Begin(n, ProtectVMs, "again", later)
	if p := Part(n, ProtectVMs); p.StartedAt.Time != t0.Time || p.Message != "moving" || n.Part != ProtectVMs {
		t.Errorf("begun twice: %+v", p)
	}
	Say(n, ProtectVMs, "still moving")
	End(n, ProtectVMs, nwv1.StepSkipped, "no VM runs on edge-1", later)
	if got := Current(n, NodeParts); got != PauseResync || Next(NodeParts, ProtectVMs) != PauseResync {
		t.Errorf("after ProtectVMs: current %q", got)
	}
	Begin(n, PauseResync, "", later)
	End(n, PauseResync, nwv1.StepSucceeded, "paused", later)
	Begin(n, SetBondMode, "", later)
	if got := FailedPart(n); got != SetBondMode {
		t.Errorf("under way in SetBondMode: failed in %q", got)
	}
	Say(n, ProtectVMs, "an ended part keeps its message")
	if p := Part(n, ProtectVMs); p.Message != "no VM runs on edge-1" {
		t.Errorf("ProtectVMs says %q", p.Message)
	}
	StopForward(n, nwv1.StepCancelled, "the flip was deleted", later)
	if got := record(n); got != "Cordon=Succeeded ProtectVMs=Skipped PauseResync=Succeeded SetBondMode=Cancelled" {
		t.Errorf("stopped: %s", got)
	}
	if got := FailedPart(n); got != SetBondMode {
		t.Errorf("cancelled in SetBondMode: failed in %q", got)
	}
	undo := UndoParts(FailedPart(n))
	if got := Current(n, undo); got != RollbackBondMode {
		t.Errorf("the rollback starts at %q", got)
	}
	for _, part := range undo {
		Begin(n, part, "", later)
		End(n, part, nwv1.StepSucceeded, "", later)
	}
	if got := Current(n, undo); got != "" || n.Part != RollbackVMs || Next(undo, RollbackVMs) != "" {
		t.Errorf("rolled back: current %q, part %q", got, n.Part)
	}
	if got := record(n); got != "Cordon=Succeeded ProtectVMs=Skipped PauseResync=Succeeded SetBondMode=Cancelled RollbackBondMode=Succeeded RollbackUncordon=Succeeded RollbackVMs=Succeeded" {
		t.Errorf("rolled back: %s", got)
	}

	done := &nwv1.NodeFlip{}
	for _, part := range NodeParts {
		End(done, part, nwv1.StepSucceeded, "", t0)
	}
	if got := FailedPart(done); got != "" || len(UndoParts("")) != 5 {
		t.Errorf("a node flipped: failed in %q", got)
	}
	// A record written before Cordon and Uncordon existed (a flip begun by an older operator):
	// the parts it ran say how it ended, and the missing ones did not run.
	old := &nwv1.NodeFlip{}
	for _, part := range []string{ProtectVMs, PauseResync, SetBondMode, Confirm, ResumeResync, RestoreVMs} {
		End(old, part, nwv1.StepSucceeded, "", t0)
	}
	if got := FailedPart(old); got != "" {
		t.Errorf("a node flipped before Cordon existed: failed in %q; want none, so that its rollback undoes its mode and its VMs", got)
	}
	End(old, RestoreVMs, nwv1.StepFailed, "", t0)
	if got := FailedPart(old); got != RestoreVMs {
		t.Errorf("a node failed in RestoreVMs before Cordon existed: failed in %q", got)
	}
	long := &nwv1.NodeFlip{}
	Begin(long, Confirm, strings.Repeat("x", 5000), t0)
	if len(Part(long, Confirm).Message) > 1024 {
		t.Errorf("a part's message keeps %d bytes; the API takes 1024", len(Part(long, Confirm).Message))
	}
}

func TestProbeAddresses(t *testing.T) {
	var fifteen [][]string
	var firsts []string
	for i := 1; i <= 15; i++ {
		first := fmt.Sprintf("10.0.0.%d", i)
		fifteen = append(fifteen, []string{first, fmt.Sprintf("fd00::%d", i)})
		firsts = append(firsts, first)
	}
	for _, c := range []struct {
		name  string
		peers [][]string
		want  []string
	}{
		{"none", nil, nil},
		{"two peers, every address", [][]string{{"10.0.0.2", "fd00::2"}, {"10.0.0.3"}}, []string{"10.0.0.2", "10.0.0.3", "fd00::2"}},
		{"a peer that reports none", [][]string{{}, {"10.0.0.3"}}, []string{"10.0.0.3"}},
		{"an address twice", [][]string{{"10.0.0.2"}, {"10.0.0.2", "10.0.0.3"}}, []string{"10.0.0.2", "10.0.0.3"}},
		{"fifteen peers: each one's first, one more", fifteen, append(slices.Clone(firsts), "fd00::1")},
	} {
		if got := ProbeAddresses(c.peers); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
}
