package cli

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// flipSnapshot is a version of a flip and when it arrived.
type flipSnapshot = storySnapshot[*nwv1.BondModeFlipPlan]

// newFlipStory starts the story (gatedStory) of flip, whose nodes (spec.nodeOrder) run modes,
// at t0: the first version is the flip as created, no status. With each transition
// status.nodes is derived from the steps as the controller derives it, with what the node's
// agent reports.
func newFlipStory(t *testing.T, flip *nwv1.BondModeFlipPlan, modes []nwv1.BondMode, t0 time.Time) *gatedStory[*nwv1.BondModeFlipPlan] {
	t.Helper()
	plan, err := bondflip.NewPlan(len(flip.Spec.NodeOrder))
	if err != nil {
		t.Fatal(err)
	}
	flip = flip.DeepCopy()
	for i, name := range flip.Spec.NodeOrder {
		flip.Status.Nodes = append(flip.Status.Nodes, nwv1.NodeFlip{Name: name, Position: int32(i + 1), CurrentMode: modes[i], State: nwv1.NodeFlipPending})
	}
	node := func(position int) *nwv1.NodeFlip { return &flip.Status.Nodes[position-1] }
	derive := func(from, to workflow.State, e workflow.Event) {
		if k, rollback, ok := bondflip.ParseStep(from.Step); ok && e == workflow.StepSucceeded {
			if rollback {
				node(k).CurrentMode = node(k).PreviousMode
			} else {
				node(k).CurrentMode = flip.Spec.TargetMode
			}
		}
		if k, rollback, ok := bondflip.ParseStep(to.Step); ok && !rollback && e != "" {
			node(k).PreviousMode = node(k).CurrentMode // recorded before the node is changed
		}
		for i := range flip.Status.Nodes {
			flip.Status.Nodes[i].State = bondflip.NodeState(&flip.Status.WorkflowStatus, i+1)
		}
	}
	return newGatedStory(t, plan, bondflip.Kind, flip, t0, derive)
}

// manualSucceededStory is a Manual flip of two nodes from active-backup to 802.3ad: each node
// waits for approval, which ada gives; it succeeds.
func manualSucceededStory(t *testing.T, name string) []flipSnapshot {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	s := newFlipStory(t, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, BondInterface: "bond0", NodeOrder: []string{"edge-1", "edge-2"},
			VMProtection: nwv1.VMProtectionLiveMigrate, ConnectivityTimeout: metav1.Duration{Duration: time.Minute}, Approval: nwv1.ApprovalManual}},
		[]nwv1.BondMode{nwv1.BondModeActiveBackup, nwv1.BondModeActiveBackup}, t0)
	s.after(time.Second).event(workflow.Start, "").after(time.Second).admit()
	s.after(3 * time.Second).succeed("the cluster is healthy; edge-1 and edge-2 run active-backup on bond0")
	for k := 1; k <= 2; k++ {
		s.after(time.Second).awaitingApproval()
		s.after(40 * time.Second).approve("ada@example.com")
		s.after(time.Second).admit()
		// The node's step carries out its six parts; each says what it did.
		s.after(12 * time.Second).says("ProtectVMs: VM web moved to " + map[int]string{1: "edge-2", 2: "edge-1"}[k])
		s.after(2 * time.Second).says("PauseResync: paused the resync towards it on its peer")
		s.after(5 * time.Second).says("SetBondMode: waiting for the agent's checkpoint")
		s.after(4 * time.Second).says("Confirm: bond0 runs 802.3ad under checkpoint")
		s.after(6 * time.Second).says("ResumeResync: peers reached in 3s; committed")
		s.after(20 * time.Second).says("RestoreVMs: resync resumed; DRBD UpToDate")
		s.after(10 * time.Second).succeed("ProtectVMs Succeeded, PauseResync Succeeded, SetBondMode Succeeded, Confirm Succeeded, ResumeResync Succeeded, RestoreVMs Succeeded: VM web back")
	}
	return s.snaps
}

// rolledBackStory is an Automatic flip of three nodes to 802.3ad inside a maintenance window:
// the first node waits for the window, then flips; the second does not reach its peers after
// the change, and both are brought back to active-backup.
func rolledBackStory(t *testing.T, name string) []flipSnapshot {
	t0 := time.Date(2026, 11, 21, 21, 59, 0, 0, time.UTC)
	s := newFlipStory(t, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, BondInterface: "bond0", NodeOrder: []string{"edge-2", "edge-3", "edge-1"},
			VMProtection: nwv1.VMProtectionStop, ConnectivityTimeout: metav1.Duration{Duration: time.Minute}, Approval: nwv1.ApprovalAutomatic,
			MaintenanceWindow: &nwv1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "UTC"}}},
		[]nwv1.BondMode{nwv1.BondModeActiveBackup, nwv1.BondModeActiveBackup, nwv1.BondModeActiveBackup}, t0)
	s.after(time.Second).event(workflow.Start, "").after(time.Second).admit()
	s.after(3*time.Second).event(workflow.StepSucceeded, "the cluster is healthy; 3 nodes run active-backup on bond0")
	s.after(time.Second).held(nwv1.ReasonOutsideWindow, "outside the maintenance window (every day 22:00-04:00 UTC); the next one opens at 2026-11-21T22:00:00Z")
	s.after(55 * time.Second).admit()
	for _, msg := range []string{"ProtectVMs: stopped VM db", "PauseResync: paused the resync towards it on its peers",
		"SetBondMode: bond0 runs 802.3ad under checkpoint", "Confirm: peers reached in 2s; committed", "ResumeResync: resync resumed; DRBD UpToDate"} {
		s.after(5 * time.Second).says(msg)
	}
	s.after(5 * time.Second).succeed("ProtectVMs Succeeded, PauseResync Succeeded, SetBondMode Succeeded, Confirm Succeeded, ResumeResync Succeeded, RestoreVMs Succeeded: started VM db")
	for _, msg := range []string{"ProtectVMs: stopped VM web", "PauseResync: paused the resync towards it on its peers", "SetBondMode: bond0 runs 802.3ad under checkpoint"} {
		s.after(5 * time.Second).says(msg)
	}
	s.after(30 * time.Second).says("Confirm: edge-3 reaches no peer yet (30s of 60s)")
	s.after(30*time.Second).event(workflow.StepFailed, "Confirm: edge-3 did not reach its peers within 60s; its agent restored active-backup")
	// The rollback: edge-3's own step (its mode, then its VMs), then edge-2's.
	s.after(5 * time.Second).says("RollbackBondMode: edge-3's agent had restored active-backup; resync resumed, DRBD UpToDate")
	s.after(5*time.Second).event(workflow.StepSucceeded, "RollbackBondMode Succeeded, RollbackVMs Succeeded: started VM web")
	for _, msg := range []string{"RollbackProtectVMs: stopped VM db", "RollbackBondMode: bond0 back to active-backup under checkpoint; committed; DRBD UpToDate"} {
		s.after(5 * time.Second).says(msg)
	}
	s.after(5*time.Second).event(workflow.StepSucceeded, "RollbackProtectVMs Succeeded, RollbackBondMode Succeeded, RollbackVMs Succeeded: started VM db")
	return s.snaps
}

// heldAt is the first version of the story in which a gate holds step.
func heldAt(t *testing.T, snaps []flipSnapshot, step string) *nwv1.BondModeFlipPlan {
	t.Helper()
	return firstVersion(t, snaps, step+" held", func(f *nwv1.BondModeFlipPlan) bool {
		p := bondflip.ProgressOf(f)
		return p.Current != nil && p.Current.Name == step && p.Current.State == nwv1.StepWaiting && p.Held != nil
	})
}
