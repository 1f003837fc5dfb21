package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// flipSnapshot is a version of a flip and when it arrived.
type flipSnapshot struct {
	At   time.Time
	Flip *nwv1.BondModeFlipPlan
}

// flipStory writes the versions of a flip's status as its controller would: the transitions
// through the shared workflow machine and status code (internal/workflow) on the flip's plan
// (internal/bondflip), the Held condition of the gates, the approval as the webhook stamps it,
// and status.nodes derived from the steps as the controller derives it; each version is kept
// with the time it arrived.
type flipStory struct {
	t     *testing.T
	plan  bondflip.Plan
	flip  *nwv1.BondModeFlipPlan
	state workflow.State
	now   time.Time
	snaps []flipSnapshot
}

// newFlipStory starts the story of flip, whose nodes (spec.nodeOrder) run modes, at t0. The
// first version is the flip as created: no status.
func newFlipStory(t *testing.T, flip *nwv1.BondModeFlipPlan, modes []nwv1.BondMode, t0 time.Time) *flipStory {
	t.Helper()
	plan, err := bondflip.NewPlan(len(flip.Spec.NodeOrder))
	if err != nil {
		t.Fatal(err)
	}
	s := &flipStory{t: t, plan: plan, flip: flip.DeepCopy(), state: workflow.Pending, now: t0}
	s.flip.CreationTimestamp = metav1.NewTime(t0)
	for i, name := range flip.Spec.NodeOrder {
		s.flip.Status.Nodes = append(s.flip.Status.Nodes, nwv1.NodeFlip{Name: name, Position: int32(i + 1), CurrentMode: modes[i], State: nwv1.NodeFlipPending})
	}
	s.snap()
	return s
}

func (s *flipStory) after(d time.Duration) *flipStory {
	s.now = s.now.Add(d)
	return s
}

func (s *flipStory) snap() {
	s.snaps = append(s.snaps, flipSnapshot{At: s.now, Flip: s.flip.DeepCopy()})
}

func (s *flipStory) node(position int) *nwv1.NodeFlip {
	return &s.flip.Status.Nodes[position-1]
}

// event moves the machine on by e (the running step ending with message), records what the
// node's agent reports, and derives the nodes' states. A step it leaves Waiting is held, or
// admitted, by the gates' next check (held, admit).
func (s *flipStory) event(e workflow.Event, message string) *flipStory {
	s.t.Helper()
	next, err := workflow.Next(s.plan, s.state, e)
	if err != nil {
		s.t.Fatal(err)
	}
	st := &s.flip.Status.WorkflowStatus
	workflow.Transition(st, s.plan, bondflip.Kind, 1, s.state, next, e, message, false, metav1.NewTime(s.now))
	if k, part, ok := bondflip.ParseStep(s.state.Step); ok && e == workflow.StepSucceeded {
		switch part {
		case bondflip.SetBondMode:
			s.node(k).CurrentMode = s.flip.Spec.TargetMode
		case bondflip.RollbackBondMode:
			s.node(k).CurrentMode = s.node(k).PreviousMode
		}
	}
	if k, part, ok := bondflip.ParseStep(next.Step); ok && part == bondflip.ProtectVMs {
		s.node(k).PreviousMode = s.node(k).CurrentMode // recorded before the node is changed
	}
	s.state = next
	s.nodes()
	s.snap()
	return s
}

func (s *flipStory) nodes() {
	for i := range s.flip.Status.Nodes {
		s.flip.Status.Nodes[i].State = bondflip.NodeState(&s.flip.Status.WorkflowStatus, i+1)
	}
}

func (s *flipStory) setHeld(status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.flip.Status.Conditions, metav1.Condition{Type: nwv1.ConditionHeld, Status: status,
		Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(s.now), ObservedGeneration: 1})
}

// held has a gate hold the waiting step, as the engine says.
func (s *flipStory) held(reason, message string) *flipStory {
	s.setHeld(metav1.ConditionTrue, reason, message)
	s.snap()
	return s
}

// awaitingApproval holds the waiting step for a person, with the engine's message.
func (s *flipStory) awaitingApproval() *flipStory {
	return s.held(nwv1.ReasonAwaitingApproval, fmt.Sprintf("awaiting approval: kubectl nodewright approve bondmodeflipplan/%s", s.flip.Name))
}

// approve sets the approve annotation to the waiting step, stamped with by, as approve and
// the admission webhook do.
func (s *flipStory) approve(by string) *flipStory {
	s.flip.Annotations = map[string]string{nwv1.AnnotationApprove: string(s.state.Step), nwv1.AnnotationApprovedBy: by}
	s.snap()
	return s
}

// admit starts the waiting step, its gates open.
func (s *flipStory) admit() *flipStory {
	st := &s.flip.Status.WorkflowStatus
	by := ""
	if s.flip.Annotations[nwv1.AnnotationApprove] == string(s.state.Step) {
		by = s.flip.Annotations[nwv1.AnnotationApprovedBy]
	}
	workflow.Admit(st, s.state.Step, by, metav1.NewTime(s.now))
	s.setHeld(metav1.ConditionFalse, nwv1.ReasonGatesOpen, "no gate holds the next step")
	s.nodes()
	s.snap()
	return s
}

// says sets the running step's message.
func (s *flipStory) says(message string) *flipStory {
	workflow.StepMessage(&s.flip.Status.WorkflowStatus, s.state.Step, message)
	s.snap()
	return s
}

// succeed ends the running step and, when the next waits at gates that are open, admits it.
func (s *flipStory) succeed(message string) *flipStory {
	s.event(workflow.StepSucceeded, message)
	if workflow.Waiting(&s.flip.Status.WorkflowStatus, s.state.Step) && s.flip.Spec.Approval != nwv1.ApprovalManual {
		s.after(time.Second).admit()
	}
	return s
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
		s.after(12 * time.Second).succeed("VM web moved to " + map[int]string{1: "edge-2", 2: "edge-1"}[k])
		s.after(2 * time.Second).succeed("paused the resync towards it on its peer")
		s.after(5 * time.Second).says("waiting for the agent's checkpoint")
		s.after(4 * time.Second).succeed("bond0 runs 802.3ad under checkpoint")
		s.after(6 * time.Second).succeed("peers reached in 3s; committed")
		s.after(20 * time.Second).succeed("resync resumed; DRBD UpToDate")
		s.after(10 * time.Second).succeed("VM web back")
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
	for _, msg := range []string{"stopped VM db", "paused the resync towards it on its peers", "bond0 runs 802.3ad under checkpoint",
		"peers reached in 2s; committed", "resync resumed; DRBD UpToDate", "started VM db"} {
		s.after(5 * time.Second).succeed(msg)
	}
	for _, msg := range []string{"stopped VM web", "paused the resync towards it on its peers", "bond0 runs 802.3ad under checkpoint"} {
		s.after(5 * time.Second).succeed(msg)
	}
	s.after(30 * time.Second).says("edge-3 reaches no peer yet (30s of 60s)")
	s.after(30*time.Second).event(workflow.StepFailed, "edge-3 did not reach its peers within 60s; its agent restored active-backup")
	for _, msg := range []string{"edge-3's agent had restored active-backup; resync resumed, DRBD UpToDate", "started VM web",
		"stopped VM db", "bond0 back to active-backup under checkpoint; committed; DRBD UpToDate", "started VM db"} {
		s.after(5*time.Second).event(workflow.StepSucceeded, msg)
	}
	return s.snaps
}

// firstVersion is the first of snaps's flips for which is holds; the test fails without one.
func firstVersion(t *testing.T, snaps []flipSnapshot, what string, is func(*nwv1.BondModeFlipPlan) bool) *nwv1.BondModeFlipPlan {
	t.Helper()
	for _, s := range snaps {
		if is(s.Flip) {
			return s.Flip.DeepCopy()
		}
	}
	t.Fatalf("the story never has %s", what)
	return nil
}

// heldAt is the first version of the story in which a gate holds step.
func heldAt(t *testing.T, snaps []flipSnapshot, step string) *nwv1.BondModeFlipPlan {
	t.Helper()
	return firstVersion(t, snaps, step+" held", func(f *nwv1.BondModeFlipPlan) bool {
		p := bondflip.ProgressOf(f)
		return p.Current != nil && p.Current.Name == step && p.Current.State == nwv1.StepWaiting && p.Held != nil
	})
}

// wantAll fails the test for each of wants that got (what) does not say.
func wantAll(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s does not say %q:\n%s", what, want, got)
		}
	}
}
