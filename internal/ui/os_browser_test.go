package ui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp/kb"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/ui"
)

const (
	osTestImage = "quay.io/kairos/ubuntu:24.04-v2@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	osBootedV1  = "quay.io/kairos/ubuntu:24.04-v1"
	osBootedV2  = "quay.io/kairos/ubuntu:24.04-v2"
)

// osStatus is the status of a policy of three nodes (edge-4 held) with its first node Done and
// node 2 at phase, as its controller would write it; the step Node2 in state.
func osStatus(phase nwv1.NodeOSPhase, state nwv1.StepState, reason string) nwv1.OSVersionPolicyStatus {
	now := metav1.Now()
	held := metav1.Condition{Type: nwv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: nwv1.ReasonGatesOpen, Message: "no gate holds the next step", LastTransitionTime: now}
	if reason != "" {
		held.Status, held.Reason, held.Message = metav1.ConditionTrue, reason, "step Node2 waits for approval"
	}
	st := nwv1.OSVersionPolicyStatus{WorkflowStatus: nwv1.WorkflowStatus{Phase: nwv1.WorkflowRunning, StartTime: &now,
		Steps: []nwv1.WorkflowStep{
			{Name: "Preflight", State: nwv1.StepSucceeded, StartedAt: &now, FinishedAt: &now, Message: "upgrading to " + osBootedV2 + ", in this order: edge-1, edge-2, edge-3; held: edge-4"},
			{Name: "Node1", State: nwv1.StepSucceeded, StartedAt: &now, FinishedAt: &now},
			{Name: "Node2", State: state, Message: "node 2's step"}, {Name: "Node3", State: nwv1.StepPending}},
		Conditions: []metav1.Condition{held}},
		Progress: "1/3", CurrentNode: "edge-2", Held: []nwv1.OSNodeHold{{Node: "edge-4", Reason: "RMA pending"}},
		Nodes: []nwv1.NodeOSUpgrade{
			{Name: "edge-1", Position: 1, Phase: nwv1.NodeOSDone, Target: osTestImage, BootedImage: osBootedV2, BootEntry: nwv1.KairosBootActive, Part: "Uncordon"},
			{Name: "edge-2", Position: 2, Phase: phase, Target: osTestImage, BootedImage: osBootedV1, BootEntry: nwv1.KairosBootActive, Part: "Reboot"},
			{Name: "edge-3", Position: 3, Phase: nwv1.NodeOSPending, Target: osTestImage, BootedImage: osBootedV1, BootEntry: nwv1.KairosBootActive}}}
	if state != nwv1.StepRunning {
		st.Nodes[1].Part = ""
	}
	return st
}

// TestOSPolicyOnTheWorkflowsPage: a Manual OSVersionPolicy appears on the workflows page with
// its nodes in order, each with its phase and the image its agent reported booted, the node
// held with its reason, what waits and why and the approve command; the user who may approve
// does so with the keyboard while the page re-renders without pause, and the approval is the
// one `kubectl nodewright approve` writes; the page follows the status as it is written, to
// node 2 falling back: the policy Failed on that node, the evidence under it, and how to try
// the image there again.
//
// It runs on a control plane of its own, without the operator, as the flip's test does: the
// test writes the status as the controller would, and RBAC decides what the user may do.
func TestOSPolicyOnTheWorkflowsPage(t *testing.T) {
	start := time.Now()
	own := testenv.New()
	own.StartForTest(t)
	ctx := context.Background()
	approver := "ada@example.com"
	grant(t, own, "nodewright-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
	}, approver)
	grant(t, own, "nodewright-os-approver", []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"osversionpolicies"}, Verbs: []string{"patch"}},
	}, approver)

	policy := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "to-v2"},
		Spec: nwv1.OSVersionPolicySpec{Image: osTestImage, NodeOrder: []string{"edge-1", "edge-2", "edge-3"},
			Hold: []nwv1.OSNodeHold{{Node: "edge-4", Reason: "RMA pending"}}, Approval: nwv1.ApprovalManual}}
	if err := own.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	write := func(st nwv1.OSVersionPolicyStatus, more func(*nwv1.OSVersionPolicyStatus)) {
		t.Helper()
		writeStatus(t, own, policy, func() {
			policy.Status = st
			if more != nil {
				more(&policy.Status)
			}
		})
	}
	// Node 1 done; node 2 waits for a person.
	write(osStatus(nwv1.NodeOSPending, nwv1.StepWaiting, nwv1.ReasonAwaitingApproval), nil)

	card := `[data-key="os/to-v2"]`
	approve := `[data-key="os/to-v2#approve"]`
	phases := fmt.Sprintf(`[...document.querySelectorAll(%s)].map((n) => n.dataset.node + ':' + n.dataset.state).join(',')`, js(card+" .os-nodes > li"))

	url, _ := runUIAs(t, as(own, approver), ui.Options{})
	p := openPage(t, url, laptopWidth, laptopHeight)
	p.goTo("workflows")
	p.waitJS("the policy, its nodes in order with their phases", phases+` === 'edge-1:Done,edge-2:Pending,edge-3:Pending'`)
	shown := p.text(card)
	for _, want := range []string{"Running", osTestImage, "done 1 of 3", "approval Manual", osBootedV2 + " (Active)", osBootedV1 + " (Active)",
		"Held (left alone):", "edge-4", "RMA pending", "Node2 waits: AwaitingApproval", "kubectl nodewright approve osvp/to-v2 --step Node2"} {
		if !contains(shown, want) {
			t.Errorf("the policy's card does not show %q:\n%s", want, shown)
		}
	}
	p.shot("ospolicy", laptopWidth, laptopHeight)

	// Approved with the keyboard while the page re-renders without pause.
	stopChurn := p.churn()
	p.press(approve, kb.Enter)
	p.waitJS("the approval said on the card, with the focus on it", query(card+` .approve-feedback`)+
		`?.innerText.includes('osversionpolicy/to-v2: approved step Node2') && document.activeElement?.dataset.key === 'os/to-v2#feedback'`)
	stopChurn()
	if got := annotationsOf(t, own, policy)[nwv1.AnnotationApprove]; got != "Node2" {
		t.Fatalf("approve=%q; want Node2", got)
	}

	// Node 2 reboots: its phase and part follow.
	write(osStatus(nwv1.NodeOSRebooting, nwv1.StepRunning, ""), nil)
	p.waitJS("node 2 Rebooting, part Reboot", phases+` === 'edge-1:Done,edge-2:Rebooting,edge-3:Pending' && `+
		query(card+` .os-nodes > li[data-node="edge-2"] .part`)+`?.innerText.includes('part Reboot')`)

	// Node 2 falls back: the policy stops Failed on it, the evidence under it, node 3 untouched.
	evidence := `boot b-1 → b-2; /etc/kairos-release KAIROS_IMAGE_REPO="` + osBootedV1 + `"; entry Passive; upgrade_failure true`
	write(osStatus(nwv1.NodeOSFellBack, nwv1.StepFailed, ""), func(st *nwv1.OSVersionPolicyStatus) {
		now := metav1.Now()
		st.Phase, st.CompletionTime, st.CurrentNode = nwv1.WorkflowFailed, &now, ""
		st.Nodes[1].BootEntry, st.Nodes[1].Evidence = nwv1.KairosBootPassive, evidence
		st.Steps[2].Message = "edge-2 fell back from the image: the policy stops here"
		st.Conditions = append(st.Conditions, metav1.Condition{Type: nwv1.ConditionSucceeded, Status: metav1.ConditionFalse, Reason: "Node2Failed",
			Message: "edge-2 fell back from the image", LastTransitionTime: now})
	})
	p.waitJSFor("the policy Failed on edge-2, its evidence shown", query(card)+`?.dataset.phase === 'Failed' && `+phases+
		` === 'edge-1:Done,edge-2:FellBack,edge-3:Pending' && `+query(card+` .os-nodes > li[data-node="edge-2"] .evidence`)+`?.innerText.includes('upgrade_failure true')`, patience)
	shown = p.text(card)
	for _, want := range []string{"Failed on node edge-2 (2 of 3): Node2Failed: edge-2 fell back from the image", osBootedV1 + " (Passive)",
		"kubectl nodewright os plan --image " + osTestImage + " --ack edge-2"} {
		if !contains(shown, want) {
			t.Errorf("the failed policy's card does not show %q:\n%s", want, shown)
		}
	}
	if contains(shown, "Approve Node") {
		t.Errorf("the failed policy offers an approval:\n%s", shown)
	}
	p.shot("ospolicy-fellback", laptopWidth, laptopHeight)
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}
