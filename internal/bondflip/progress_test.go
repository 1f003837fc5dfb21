package bondflip

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// machine drives a flip of its spec's nodes through the workflow machine, as the engine does,
// without admitting the steps its gates hold.
type machine struct {
	t    *testing.T
	plan Plan
	flip *nwv1.BondModeFlipPlan
	s    workflow.State
}

func newMachine(t *testing.T, approval nwv1.Approval, nodes ...string) *machine {
	p, err := NewPlan(len(nodes))
	if err != nil {
		t.Fatal(err)
	}
	return &machine{t: t, plan: p, s: workflow.Pending, flip: &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, NodeOrder: nodes, Approval: approval}}}
}

func (m *machine) move(e workflow.Event) *machine {
	m.t.Helper()
	next, err := workflow.Next(m.plan, m.s, e)
	if err != nil {
		m.t.Fatal(err)
	}
	workflow.Transition(&m.flip.Status.WorkflowStatus, m.plan, workflow.Kind{Name: "BondModeFlipPlan"}, 1, m.s, next, e, "", false, metav1.Now())
	m.s = next
	return m
}

func (m *machine) admit() *machine {
	workflow.Admit(&m.flip.Status.WorkflowStatus, m.s.Step, "", metav1.Now())
	return m
}

func (m *machine) held(reason string) *machine {
	m.flip.Status.Conditions = []metav1.Condition{{Type: nwv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: reason, Message: "why"}}
	return m
}

func TestProgressOf(t *testing.T) {
	// As created: the nodes of spec.nodeOrder, Pending; nothing runs.
	p := ProgressOf(newMachine(t, nwv1.ApprovalManual, "edge-1", "edge-2").flip)
	if len(p.Nodes) != 2 || p.Nodes[1] != (NodeProgress{Position: 2, Name: "edge-2", State: nwv1.NodeFlipPending}) || p.Current != nil || p.Approvable != "" {
		t.Errorf("as created: %+v", p)
	}

	// The Preflight waits: no person approves it, even in a Manual flip.
	m := newMachine(t, nwv1.ApprovalManual, "edge-1", "edge-2").move(workflow.Start).held(nwv1.ReasonClusterNotReady)
	if p := ProgressOf(m.flip); p.Current == nil || p.Current.Name != "Preflight" || p.CurrentPosition != 0 || p.Approvable != "" || p.Held == nil {
		t.Errorf("at the Preflight: %+v", p)
	}

	// A node's first step waits for a person, who approves it.
	m.admit().move(workflow.StepSucceeded).held(nwv1.ReasonAwaitingApproval)
	if p := ProgressOf(m.flip); p.Approvable != "Node1" || p.CurrentPosition != 1 || p.Approved != "" || p.Held.Reason != nwv1.ReasonAwaitingApproval {
		t.Errorf("at Node1: %+v", p)
	}
	m.flip.Annotations = map[string]string{nwv1.AnnotationApprove: "Node1", nwv1.AnnotationApprovedBy: "ada"}
	if p := ProgressOf(m.flip); p.Approvable != "" || p.Approved != "Node1" || p.ApprovedBy != "ada" {
		t.Errorf("approved: %+v", p)
	}
	// Automatic: nothing to approve.
	m.flip.Spec.Approval, m.flip.Annotations = nwv1.ApprovalAutomatic, nil
	if p := ProgressOf(m.flip); p.Approvable != "" || p.Approved != "" {
		t.Errorf("automatic: %+v", p)
	}

	// status.nodes, where the controller wrote it, is what is shown.
	m.flip.Status.Nodes = []nwv1.NodeFlip{{Name: "edge-1", Position: 1, PreviousMode: "active-backup", CurrentMode: "active-backup", State: nwv1.NodeFlipInProgress}}
	if p := ProgressOf(m.flip); p.Nodes[0] != (NodeProgress{Position: 1, Name: "edge-1", Previous: "active-backup", Current: "active-backup", State: nwv1.NodeFlipInProgress}) ||
		p.Nodes[1].Name != "edge-2" {
		t.Errorf("status.nodes: %+v", p.Nodes)
	}

	// The second node fails (at its Confirm): rolling back, and once rolled back, the failure
	// names its step and node.
	m.admit()
	m.move(workflow.StepSucceeded)
	m.admit().move(workflow.StepFailed)
	if p := ProgressOf(m.flip); p.Failed == nil || p.Failed.Name != "Node2" || p.FailedPosition != 2 ||
		p.Current == nil || p.Current.Name != "RollbackNode2" || p.CurrentPosition != 2 {
		t.Errorf("rolling back: %+v", p)
	}
	for m.s.Phase != nwv1.WorkflowRolledBack {
		m.move(workflow.StepSucceeded)
	}
	m.held(nwv1.ReasonClusterNotReady) // left from before: nothing is held once it ended
	if p := ProgressOf(m.flip); p.Failed == nil || p.Failed.Name != "Node2" || p.FailedPosition != 2 || p.Current != nil || p.Held != nil {
		t.Errorf("rolled back: %+v", p)
	}
}

// TestAFlipChangesTheNodeOfItsCurrentStep: what keeps out of node work's way (a snapshot
// policy's runs) is told the node of the step that runs or waits, forward or rollback; none at
// the Preflight; and that it cannot say ("?") when no step does.
func TestAFlipChangesTheNodeOfItsCurrentStep(t *testing.T) {
	m := newMachine(t, nwv1.ApprovalAutomatic, "edge-1", "edge-2")
	var said []string
	say := func() {
		nodes, known := Descriptor.Changing(m.flip)
		if !known {
			nodes = []string{"?"}
		}
		said = append(said, string(m.s.Step)+":"+strings.Join(nodes, ","))
	}
	say()
	m.move(workflow.Start)
	say()
	m.admit().move(workflow.StepSucceeded)
	say()
	m.admit().move(workflow.StepSucceeded)
	say()
	m.admit().move(workflow.StepFailed)
	say()
	m.move(workflow.StepSucceeded)
	say()
	if got, want := strings.Join(said, " "), ":? Preflight: Node1:edge-1 Node2:edge-2 RollbackNode2:edge-2 RollbackNode1:edge-1"; got != want {
		t.Errorf("the nodes changed, step by step: %s, want %s", got, want)
	}
}
