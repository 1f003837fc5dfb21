package replupgrade

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// machine drives an upgrade through the workflow machine, as the engine does, without
// admitting the steps its gates hold.
type machine struct {
	t *testing.T
	u *nwv1.ReplicationUpgrade
	s workflow.State
}

func newMachine(t *testing.T, approval nwv1.Approval) *machine {
	return &machine{t: t, s: workflow.Pending, u: &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "to-two"},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"edge-2"}, ReplicaCount: 2, Approval: approval}}}
}

func (m *machine) move(e workflow.Event) *machine {
	m.t.Helper()
	next, err := workflow.Next(Plan{}, m.s, e)
	if err != nil {
		m.t.Fatal(err)
	}
	workflow.Transition(&m.u.Status.WorkflowStatus, Plan{}, Kind, 1, m.s, next, e, "", false, metav1.Now())
	m.s = next
	return m
}

func (m *machine) admit() *machine {
	workflow.Admit(&m.u.Status.WorkflowStatus, m.s.Step, "", metav1.Now())
	return m
}

func (m *machine) held(reason string) *machine {
	m.u.Status.Conditions = []metav1.Condition{{Type: nwv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: reason, Message: "why"}}
	return m
}

func states(steps []nwv1.WorkflowStep) string {
	out := ""
	for _, s := range steps {
		out += s.Name + ":" + string(s.State) + " "
	}
	return out
}

func TestProgressOf(t *testing.T) {
	// As created: the six stages, Pending; nothing runs.
	p := ProgressOf(newMachine(t, nwv1.ApprovalManual).u)
	if got := states(p.Stages); got != "Preflight:Pending Place:Pending Sync:Pending Verify:Pending Quorum:Pending ReleaseTaints:Pending " ||
		p.Current != nil || p.Rollback != nil || p.Stage != 0 {
		t.Errorf("as created: %+v", p)
	}

	// The Preflight waits: no person approves it, even in a Manual upgrade.
	m := newMachine(t, nwv1.ApprovalManual).move(workflow.Start).held(nwv1.ReasonClusterNotReady)
	if p := ProgressOf(m.u); p.Current == nil || p.Current.Name != "Preflight" || p.Stage != 1 || p.Approvable != "" || p.Held == nil {
		t.Errorf("at the Preflight: %+v", p)
	}

	// Place changes the nodes: it waits for a person, who approves it.
	m.admit().move(workflow.StepSucceeded).held(nwv1.ReasonAwaitingApproval)
	if p := ProgressOf(m.u); p.Approvable != "Place" || p.Stage != 2 || p.Stages[0].State != nwv1.StepSucceeded || p.Held.Reason != nwv1.ReasonAwaitingApproval {
		t.Errorf("at Place: %+v", p)
	}
	m.u.Annotations = map[string]string{nwv1.AnnotationApprove: "Place", nwv1.AnnotationApprovedBy: "ada"}
	if p := ProgressOf(m.u); p.Approvable != "" || p.Approved != "Place" || p.ApprovedBy != "ada" {
		t.Errorf("approved: %+v", p)
	}

	// Sync only waits for LINSTOR: nothing to approve.
	m.admit().move(workflow.StepSucceeded).held(nwv1.ReasonClusterNotReady)
	if p := ProgressOf(m.u); p.Current.Name != "Sync" || p.Stage != 3 || p.Approvable != "" || p.Approved != "" {
		t.Errorf("at Sync: %+v", p)
	}

	// Sync fails: the rollback steps are listed after the stages, and the failed stage named.
	m.admit().move(workflow.StepFailed)
	p = ProgressOf(m.u)
	if got := states(p.Rollback); got != "RemoveReplicas:Running RestorePlaceCount:Pending RestoreBalance:Pending " {
		t.Errorf("rolling back, the rollback steps are %s", got)
	}
	if p.Current.Name != "RemoveReplicas" || p.Stage != 0 || p.Failed == nil || p.Failed.Name != "Sync" || p.FailedStage != 3 {
		t.Errorf("rolling back: %+v", p)
	}
	if got := states(p.Stages[3:]); got != "Verify:Skipped Quorum:Skipped ReleaseTaints:Skipped " {
		t.Errorf("the stages after Sync are %s", got)
	}
	m.move(workflow.StepSucceeded).move(workflow.StepSucceeded).move(workflow.StepSucceeded)
	p = ProgressOf(m.u)
	if got := states(p.Rollback); m.u.Status.Phase != nwv1.WorkflowRolledBack || p.Current != nil || p.Held != nil || p.FailedStage != 3 ||
		got != "RemoveReplicas:Succeeded RestorePlaceCount:Succeeded RestoreBalance:Succeeded " {
		t.Errorf("rolled back (%s): %+v", m.u.Status.Phase, p)
	}
}

// TestAnUpgradeChangesEveryNodeFromItsPlace: what keeps out of node work's way (a snapshot
// policy's runs) is told every node of the upgrade from its Place on, rollback included; none at
// the Preflight; and that it cannot say ("?") before it started, or without its original node.
func TestAnUpgradeChangesEveryNodeFromItsPlace(t *testing.T) {
	m := newMachine(t, nwv1.ApprovalAutomatic)
	var said []string
	say := func() {
		nodes, known := Descriptor.Changing(m.u)
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
	m.u.Status.OriginalNode = "edge-1"
	say()
	m.admit().move(workflow.StepFailed)
	say()
	if got, want := strings.Join(said, " "), ":? Preflight: Place:? Place:edge-1,edge-2 RemoveReplicas:edge-1,edge-2"; got != want {
		t.Errorf("the nodes changed, step by step: %s, want %s", got, want)
	}
}
