package ui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp/kb"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/ui"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// flipNodes are the test flip's nodes, in its order.
var flipNodes = []string{"edge-2", "edge-3", "edge-1"}

// stepMessages are what each step of a node (and the Preflight, "") says once it succeeded.
var stepMessages = map[string]string{
	"":                    "the cluster is healthy; 3 nodes run active-backup on bond0",
	bondflip.ProtectVMs:   "VM web moved to the next node",
	bondflip.PauseResync:  "resync towards it paused on its peers",
	bondflip.SetBondMode:  "bond0 runs 802.3ad under checkpoint",
	bondflip.Confirm:      "peers reached in 2s; committed",
	bondflip.ResumeResync: "resync resumed; DRBD UpToDate",
	bondflip.RestoreVMs:   "VM web back",
}

// partOf is the last part a node's step carried out when it succeeded; "" for the Preflight.
func partOf(s bondflip.Step) string {
	if _, _, ok := bondflip.ParseStep(s); ok {
		return bondflip.RestoreVMs
	}
	return ""
}

// flipWords are what a flip's steps say.
var flipWords = stepWords{
	done:    func(s workflow.Step) string { return stepMessages[partOf(s)] },
	running: "waiting for the agent's checkpoint",
	failed:  "edge-3 did not reach its peers within 60s",
}

// flipProgress writes into f's status what its controller would have written (writeProgress),
// and the nodes' view.
func flipProgress(f *nwv1.BondModeFlipPlan, done int, next nwv1.StepState, reason string) {
	plan, _ := bondflip.NewPlan(len(flipNodes))
	st := &f.Status
	writeProgress(&st.WorkflowStatus, plan, bondflip.Kind, "bondmodeflipplan/"+f.Name, done, next, reason, flipWords)
	st.Nodes = nil
	for i, name := range flipNodes {
		node := nwv1.NodeFlip{Name: name, Position: int32(i + 1), CurrentMode: nwv1.BondModeActiveBackup,
			State: bondflip.NodeState(&st.WorkflowStatus, i+1)}
		setMode := string(bondflip.NodeStep(i + 1))
		for _, s := range st.Steps {
			if s.Name == setMode && s.State != nwv1.StepPending {
				node.PreviousMode = nwv1.BondModeActiveBackup
			}
			if s.Name == setMode && s.State == nwv1.StepSucceeded {
				node.CurrentMode = f.Spec.TargetMode
			}
		}
		st.Nodes = append(st.Nodes, node)
	}
}

// TestFlipOnTheWorkflowsPage: a Manual flip appears on the workflows page with its nodes in
// order; a user who may not update it is refused the approval, in the API server's words; the
// user who may approves with the keyboard while the page re-renders without pause, and the
// approval is the one `kubectl nodewright approve` writes, as that user; the nodes' states
// follow the status as it is written, to the end.
//
// It runs on a control plane of its own, without the operator: the package's operator runs
// the flip controller, which would act on the flip; here the test writes the status as that
// controller would, and RBAC, not system:masters, decides what each user may do.
func TestFlipOnTheWorkflowsPage(t *testing.T) {
	start := time.Now()
	own := testenv.New()
	own.StartForTest(t)
	ctx := context.Background()
	approver, viewer := "ada@example.com", "bob@example.com"
	grant(t, own, "nodewright-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
	}, approver, viewer)
	grant(t, own, "nodewright-flip-approver", []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"bondmodeflipplans"}, Verbs: []string{"patch"}},
	}, approver)

	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, BondInterface: "bond0", NodeOrder: flipNodes, Approval: nwv1.ApprovalManual}}
	if err := own.Client.Create(ctx, flip); err != nil {
		t.Fatal(err)
	}
	write := func(done int, next nwv1.StepState, reason string) {
		t.Helper()
		writeStatus(t, own, flip, func() { flipProgress(flip, done, next, reason) })
	}
	// The Preflight passed; the first node's first step waits for a person.
	write(1, nwv1.StepWaiting, nwv1.ReasonAwaitingApproval)

	card := `[data-key="flip/to-lacp"]`
	node := func(position int) string { return fmt.Sprintf(`%s [data-position="%d"]`, card, position) }
	approve := `[data-key="flip/to-lacp#approve"]`

	// Bob may read the flip, not update it: his approval is refused, in the API server's words.
	bobURL, _ := runUIAs(t, as(own, viewer), ui.Options{})
	bob := openPage(t, bobURL, laptopWidth, laptopHeight)
	bob.goTo("workflows")
	bob.waitJS("the flip waiting for approval", query(approve)+`?.dataset.step === 'Node1'`)
	bob.press(approve, kb.Enter)
	bob.waitJS("the refusal on the card", query(card+` .approve-feedback`)+`?.innerText.includes('Not approved')`)
	refusal := bob.text(card + ` .approve-feedback`)
	if !contains(refusal, "you may not approve bondmodeflipplan/to-lacp", `User "`+viewer+`" cannot patch resource "bondmodeflipplans"`) {
		t.Errorf("the refusal shown is %q", refusal)
	}
	if role, _ := evaluate[string](bob, query(card+` .approve-feedback`)+`.getAttribute('role')`); role != "alert" {
		t.Errorf("the refusal is not announced (role %q)", role)
	}
	if got := annotationsOf(t, own, flip)[nwv1.AnnotationApprove]; got != "" {
		t.Fatalf("a refused approval was written: approve=%q", got)
	}

	// Ada sees the flip, its nodes in order, what waits and why, and approves with the keyboard
	// while the page re-renders without pause.
	adaURL, _ := runUIAs(t, as(own, approver), ui.Options{})
	p := openPage(t, adaURL, laptopWidth, laptopHeight)
	p.goTo("workflows")
	p.waitJS("the flip, its three nodes Pending, in order", fmt.Sprintf(
		`[...document.querySelectorAll(%s)].map((n) => n.dataset.node + ':' + n.dataset.state).join(',') === 'edge-2:Pending,edge-3:Pending,edge-1:Pending'`,
		js(card+` .flip-node`)))
	shown := p.text(card)
	for _, want := range []string{"Running", "Bond mode → 802.3ad on bond0", "approval Manual", "Preflight", "Node1 waits: AwaitingApproval",
		"kubectl nodewright approve bondflip/to-lacp --step Node1", "active-backup"} {
		if !contains(shown, want) {
			t.Errorf("the flip's card does not show %q:\n%s", want, shown)
		}
	}
	p.shot("flip", laptopWidth, laptopHeight)
	stopChurn := p.churn()
	p.press(approve, kb.Enter)
	p.waitJS("the approval said on the card, with the focus on it", query(card+` .approve-feedback`)+`?.innerText.includes('approved step Node1') && document.activeElement?.dataset.key === 'flip/to-lacp#feedback'`)
	stopChurn()
	got := annotationsOf(t, own, flip)
	if got[nwv1.AnnotationApprove] != "Node1" {
		t.Fatalf("annotations %v; want %s=Node1", got, nwv1.AnnotationApprove)
	}
	p.waitJS("the approval shown once the flip says so", query(card+` .approved`)+`?.innerText.includes('Step Node1 approved')`)

	// The controller starts the node's step, which carries out its parts; the page follows
	// each write.
	write(1, nwv1.StepRunning, "")
	p.waitJS("node 1 in progress, its step running", query(node(1))+`?.dataset.state === 'InProgress' && `+query(node(1)+` [data-step="Node1"]`)+`?.dataset.state === 'Running'`)
	write(2, nwv1.StepWaiting, nwv1.ReasonAwaitingApproval)
	p.waitJS("node 1 done on the new mode, node 2 waiting for approval", query(node(1))+`?.dataset.state === 'Done' && `+
		query(node(1))+`?.innerText.includes('active-backup → 802.3ad') && `+query(approve)+`?.dataset.step === 'Node2'`)
	write(4, "", "")
	p.waitJSFor("the flip Succeeded, every node Done", query(card)+`?.dataset.phase === 'Succeeded' && [...document.querySelectorAll(`+js(card+` .flip-node`)+`)].every((n) => n.dataset.state === 'Done')`, patience)
	if shown := p.text(card); !contains(shown, bondflip.Kind.Succeeded) {
		t.Errorf("the finished flip does not say %q:\n%s", bondflip.Kind.Succeeded, shown)
	}

	// Another flip, rolled back when its second node did not reach its peers: the card says
	// where and why, each node brought back.
	back := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-rr"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondModeBalanceRR, NodeOrder: flipNodes}}
	if err := own.Client.Create(ctx, back); err != nil {
		t.Fatal(err)
	}
	flipProgress(back, 2, nwv1.StepFailed, "")
	if err := own.Client.Status().Update(ctx, back); err != nil {
		t.Fatal(err)
	}
	backCard := `[data-key="flip/to-rr"]`
	p.waitJS("the rolled back flip, where and why", query(backCard)+`?.dataset.phase === 'RolledBack' && `+
		query(backCard+` .result`)+`?.innerText.includes('RolledBack on node edge-3 (2 of 3): Node2Failed: step Node2 failed: edge-3 did not reach its peers within 60s')`)
	if states, _ := evaluate[string](p, fmt.Sprintf(`[...document.querySelectorAll(%s)].map((n) => n.dataset.state).join(',')`, js(backCard+` .flip-node`))); states != "RolledBack,RolledBack,Pending" {
		t.Errorf("the rolled back flip's nodes are %s, want RolledBack,RolledBack,Pending", states)
	}
	if failed, _ := evaluate[string](p, query(backCard+` [data-position="2"] [data-step="Node2"]`)+`?.dataset.state || ''`); failed != "Failed" {
		t.Errorf("node 2 does not show its failed step (%q)", failed)
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

// grant binds a ClusterRole of rules, named name, to users on the control plane e.
func grant(t *testing.T, e *testenv.Env, name string, rules []rbacv1.PolicyRule, users ...string) {
	t.Helper()
	ctx := context.Background()
	if err := e.Client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
	for _, u := range users {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	if err := e.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

// as is user's own credentials on the control plane e: RBAC decides what they may do.
func as(e *testenv.Env, user string) *rest.Config {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	return cfg
}

func annotationsOf(t *testing.T, e *testenv.Env, obj client.Object) map[string]string {
	t.Helper()
	got := obj.DeepCopyObject().(client.Object)
	if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	return got.GetAnnotations()
}

// writeStatus reads obj afresh, changes it and writes its status, as its controller would,
// again when another write came in between.
func writeStatus(t *testing.T, e *testenv.Env, obj client.Object, change func()) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return e.Client.Status().Update(ctx, obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stepWords are what a workflow's steps say: done, the message of a step that succeeded;
// running, the running one's; failed, the one that failed.
type stepWords struct {
	done            func(workflow.Step) string
	running, failed string
}

// writeProgress writes into st what a cluster-wide workflow's controller would have written
// with the first done forward steps of plan succeeded and the next one in state next (none
// when done is all of them): Waiting, with the Held condition's reason; Running; or Failed,
// the workflow rolled back (the rollback steps succeeded). With the phase, the steps' times and
// the Succeeded condition as kind words it; ref names the workflow as approve takes it
// (bondmodeflipplan/NAME).
func writeProgress(st *nwv1.WorkflowStatus, plan workflow.Plan, kind workflow.Kind, ref string, done int, next nwv1.StepState, reason string, words stepWords) {
	forward := plan.Forward()
	t0 := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	st.Phase, st.StartTime, st.Steps = nwv1.WorkflowRunning, &metav1.Time{Time: t0}, nil
	for i, step := range forward {
		s := nwv1.WorkflowStep{Name: string(step), State: nwv1.StepPending}
		at := metav1.NewTime(t0.Add(time.Duration(i) * 10 * time.Second))
		switch {
		case i < done:
			end := metav1.NewTime(at.Add(7 * time.Second))
			s.State, s.StartedAt, s.FinishedAt, s.Message = nwv1.StepSucceeded, &at, &end, words.done(step)
		case i == done && next == nwv1.StepRunning:
			s.State, s.StartedAt, s.Message = next, &at, words.running
		case i == done && next == nwv1.StepWaiting:
			s.State = next
		case i == done && next == nwv1.StepFailed:
			end := metav1.NewTime(at.Add(time.Minute))
			s.State, s.StartedAt, s.FinishedAt, s.Message = next, &at, &end, words.failed
		case i > done && next == nwv1.StepFailed:
			s.State = nwv1.StepSkipped
		}
		st.Steps = append(st.Steps, s)
	}
	if next == nwv1.StepFailed {
		end := metav1.NewTime(t0.Add(5 * time.Minute))
		for _, step := range plan.Rollback(forward[done]) {
			st.Steps = append(st.Steps, nwv1.WorkflowStep{Name: string(step), State: nwv1.StepSucceeded, StartedAt: &end, FinishedAt: &end})
		}
		st.Phase, st.CompletionTime = nwv1.WorkflowRolledBack, &end
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: nwv1.ConditionSucceeded, Status: metav1.ConditionFalse,
			Reason: string(forward[done]) + "Failed", Message: "step " + string(forward[done]) + " failed: " + words.failed + "; " + kind.RolledBack})
	}
	if done == len(forward) {
		st.Phase, st.CompletionTime = nwv1.WorkflowSucceeded, &metav1.Time{Time: t0.Add(5 * time.Minute)}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: nwv1.ConditionSucceeded, Status: metav1.ConditionTrue,
			Reason: nwv1.ReasonSucceeded, Message: kind.Succeeded})
	}
	held := metav1.Condition{Type: nwv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: nwv1.ReasonGatesOpen, Message: "no gate holds the next step"}
	if next == nwv1.StepWaiting {
		held.Status, held.Reason, held.Message = metav1.ConditionTrue, reason, "awaiting approval: kubectl nodewright approve "+ref
	}
	meta.SetStatusCondition(&st.Conditions, held)
}
