package cli

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// The watch view of a flip is a pure function of the flip as last seen and the clock:
// renderFlipFrame draws the live view on a terminal, flipChangeLines and flipFinalLines write
// the log a script reads. Unlike a migration's, it has no rate to compute from earlier
// versions: the nodes' progress is their steps.

// nodeRow is one node of a flip as the view shows it.
type nodeRow struct {
	position          int
	name              string
	previous, current nwv1.BondMode
	state             nwv1.NodeFlipState
}

// flipNodes lists the flip's nodes in their order: each as status.nodes has it (the
// controller's view of the node's steps and what its agent reported), else named by
// spec.nodeOrder with its state derived from its steps as the controller derives it.
func flipNodes(f *nwv1.BondModeFlipPlan) []nodeRow {
	st := &f.Status.WorkflowStatus
	n := len(f.Spec.NodeOrder)
	for _, node := range f.Status.Nodes {
		n = max(n, int(node.Position))
	}
	for _, s := range st.Steps {
		if k, _, ok := bondflip.ParseStep(bondflip.Step(s.Name)); ok {
			n = max(n, k)
		}
	}
	rows := make([]nodeRow, n)
	for i := range rows {
		rows[i] = nodeRow{position: i + 1, name: "-", state: bondflip.NodeState(st, i+1)}
		if i < len(f.Spec.NodeOrder) {
			rows[i].name = f.Spec.NodeOrder[i]
		}
	}
	for _, node := range f.Status.Nodes {
		if node.Position < 1 || int(node.Position) > n {
			continue
		}
		r := &rows[node.Position-1]
		r.name, r.previous, r.current, r.state = node.Name, node.PreviousMode, node.CurrentMode, node.State
	}
	return rows
}

// modes is the node's bond mode as its agent last reported it, after the mode it had before
// the flip when that differs: "active-backup → 802.3ad"; "-" when not reported.
func (r nodeRow) modes() string {
	switch {
	case r.current == "" && r.previous == "":
		return "-"
	case r.previous == "" || r.previous == r.current:
		return string(r.current)
	case r.current == "":
		return string(r.previous) + " → -"
	}
	return string(r.previous) + " → " + string(r.current)
}

// flipNodeName names the node at position for a message: "edge-2 (2 of 3)".
func flipNodeName(f *nwv1.BondModeFlipPlan, position int) string {
	rows := flipNodes(f)
	if position < 1 || position > len(rows) {
		return fmt.Sprintf("position %d", position)
	}
	return fmt.Sprintf("%s (%d of %d)", rows[position-1].name, position, len(rows))
}

var nodeIcons = map[nwv1.NodeFlipState]struct {
	icon  string
	style style
}{
	nwv1.NodeFlipPending:     {"·", dim},
	nwv1.NodeFlipInProgress:  {"▶", cyan},
	nwv1.NodeFlipDone:        {"✓", green},
	nwv1.NodeFlipRollingBack: {"↶", yellow},
	nwv1.NodeFlipRolledBack:  {"↩", yellow},
	nwv1.NodeFlipFailed:      {"✗", red},
}

// flipHeader names the flip and what it does.
func flipHeader(f *nwv1.BondModeFlipPlan) string {
	return fmt.Sprintf("%s %s: %s", flipKind, f.Name, describeFlip(f))
}

// shownUnderNode reports whether the live view shows step under its node: while it runs or
// waits, and once it failed or was cancelled.
func shownUnderNode(s nwv1.WorkflowStep) bool {
	switch s.State {
	case nwv1.StepRunning, nwv1.StepWaiting, nwv1.StepFailed, nwv1.StepCancelled:
		return true
	}
	return false
}

// renderFlipFrame is the live view of a flip at now: its phase and elapsed time, the
// Preflight, each node in order with its modes and state and, under it, the step of it that
// runs, waits or failed; the gate that holds the next step (with the command that approves
// it); once the phase is final, the result.
func renderFlipFrame(f *nwv1.BondModeFlipPlan, now time.Time) []line {
	st := &f.Status.WorkflowStatus
	out := []line{{text: flipHeader(f), style: bold}, phaseLine(st, now), {}}
	if len(st.Steps) == 0 {
		out = append(out, line{text: "  (waiting for the operator to start the flip)", style: dim})
	}
	byNode := map[int][]nwv1.WorkflowStep{}
	stepWidth := 0
	for _, s := range st.Steps {
		if s.Name == string(bondflip.Preflight) {
			stepWidth = max(stepWidth, len(s.Name))
			continue
		}
		if k, _, ok := bondflip.ParseStep(bondflip.Step(s.Name)); ok && shownUnderNode(s) {
			byNode[k] = append(byNode[k], s)
			stepWidth = max(stepWidth, len(s.Name))
		}
	}
	for _, s := range st.Steps {
		if s.Name == string(bondflip.Preflight) {
			out = append(out, stepLine("  ", s, stepWidth, now))
		}
	}
	rows := flipNodes(f)
	nameWidth, modesWidth := 0, 0
	for _, r := range rows {
		nameWidth, modesWidth = max(nameWidth, width(r.name)), max(modesWidth, width(r.modes()))
	}
	for _, r := range rows {
		look := nodeIcons[r.state]
		text := fmt.Sprintf("  %s %d  %-*s  %s%s  %s", look.icon, r.position, nameWidth, r.name,
			r.modes(), strings.Repeat(" ", modesWidth-width(r.modes())), r.state)
		out = append(out, line{text: text, style: look.style})
		for _, s := range byNode[r.position] {
			out = append(out, stepLine("      ", s, stepWidth, now))
		}
	}
	out = append(out, heldLines(f)...)
	if st.Phase.Finished() {
		out = append(out, line{})
		out = append(out, flipFinalLines(f)...)
	}
	return out
}

// heldCondition is the Held condition while it is True: a gate holds the next step.
func heldCondition(st *nwv1.WorkflowStatus) *metav1.Condition {
	held := meta.FindStatusCondition(st.Conditions, nwv1.ConditionHeld)
	if held == nil || held.Status != metav1.ConditionTrue {
		return nil
	}
	return held
}

// waitingStep is the step a gate holds, "" for none.
func waitingStep(st *nwv1.WorkflowStatus) string {
	if s, ok := currentStep(st); ok && s.State == nwv1.StepWaiting {
		return s.Name
	}
	return ""
}

// approveCommand is the command that approves the step a Manual flip waits on, "" when
// nothing waits for a person: the flip is not Manual, no step waits, the step waiting is not
// one a person approves (the Preflight), or it is approved already.
func approveCommand(f *nwv1.BondModeFlipPlan) string {
	step := waitingStep(&f.Status.WorkflowStatus)
	if f.Spec.Approval != nwv1.ApprovalManual || step == "" || f.Annotations[nwv1.AnnotationApprove] == step ||
		!(bondflip.Plan{}).Gates(bondflip.Step(step)).Has(workflow.GateApproval) {
		return ""
	}
	return fmt.Sprintf("kubectl nodewright approve bondflip/%s --step %s", f.Name, step)
}

// approvedNote says who approved the step waiting, once approved; "" otherwise.
func approvedNote(f *nwv1.BondModeFlipPlan) string {
	step := waitingStep(&f.Status.WorkflowStatus)
	if step == "" || f.Annotations[nwv1.AnnotationApprove] != step {
		return ""
	}
	note := "step " + step + " is approved"
	if by := f.Annotations[nwv1.AnnotationApprovedBy]; by != "" {
		note += " by " + by
	}
	return note
}

// heldLines say which gate holds the next step and why, and what a person can do about it.
func heldLines(f *nwv1.BondModeFlipPlan) []line {
	var out []line
	if held := heldCondition(&f.Status.WorkflowStatus); held != nil {
		text := "  ‖ Held: " + held.Reason
		if held.Message != "" {
			text += ": " + oneLine(held.Message)
		}
		out = append(out, line{text: text, style: yellow})
	}
	if cmd := approveCommand(f); cmd != "" {
		out = append(out, line{text: "    Approve it: " + cmd, style: bold})
	} else if note := approvedNote(f); note != "" {
		out = append(out, line{text: "    " + note + "; it starts once its other gates open", style: dim})
	}
	return out
}

// flipFailure says where a flip that did not succeed failed: the node and step, and the
// Succeeded condition's reason; "" when it succeeded or no step failed.
func flipFailure(f *nwv1.BondModeFlipPlan) string {
	st := &f.Status.WorkflowStatus
	if st.Phase != nwv1.WorkflowRolledBack && st.Phase != nwv1.WorkflowFailed {
		return ""
	}
	where := ""
	for _, s := range st.Steps {
		if s.State != nwv1.StepFailed && s.State != nwv1.StepCancelled {
			continue
		}
		if k, _, ok := bondflip.ParseStep(bondflip.Step(s.Name)); ok {
			where = " on node " + flipNodeName(f, k)
		}
		break
	}
	return where
}

// flipFinalLines say how a finished flip ended: its phase, how long it took and, when it did
// not succeed, on which node, with the Succeeded condition's reason (the step that failed)
// and message.
func flipFinalLines(f *nwv1.BondModeFlipPlan) []line {
	st := &f.Status.WorkflowStatus
	result := resultText(st) + flipFailure(f)
	if c := meta.FindStatusCondition(st.Conditions, nwv1.ConditionSucceeded); c != nil {
		if st.Phase != nwv1.WorkflowSucceeded && c.Reason != "" {
			result += ": " + c.Reason
		}
		if c.Message != "" {
			result += ": " + oneLine(c.Message)
		}
	}
	return []line{{text: result, style: phaseLineStyle(st.Phase)}}
}

// flipChangeLines are the log lines for what changed from prev (nil for the first version
// seen) to cur, seen at: the header first; the steps and the phase; each node whose state or
// modes changed (every node the first time); the gate that holds the next step when it
// changed, with the command that approves it; an approval; and the result once it ended.
func flipChangeLines(prev, cur *nwv1.BondModeFlipPlan, seen time.Time) []line {
	at := timestamp(seen)
	var out []line
	var prevStatus *nwv1.WorkflowStatus
	before := map[int]nodeRow{}
	if prev == nil {
		out = append(out, line{text: flipHeader(cur), style: bold})
	} else {
		prevStatus = &prev.Status.WorkflowStatus
		for _, r := range flipNodes(prev) {
			before[r.position] = r
		}
	}
	st := &cur.Status.WorkflowStatus
	out = append(out, statusChangeLines(prevStatus, st, seen)...)
	for _, r := range flipNodes(cur) {
		if b, ok := before[r.position]; ok && b == r {
			continue
		}
		out = append(out, line{text: fmt.Sprintf("%s node %d %s %s (%s)", at, r.position, r.name, r.state, r.modes()), style: nodeIcons[r.state].style})
	}
	held := heldCondition(st)
	var prevHeld *metav1.Condition
	if prevStatus != nil {
		prevHeld = heldCondition(prevStatus)
	}
	if held != nil && (prevHeld == nil || held.Reason != prevHeld.Reason || held.Message != prevHeld.Message) {
		text := fmt.Sprintf("%s held %s", at, held.Reason)
		if held.Message != "" {
			text += ": " + oneLine(held.Message)
		}
		out = append(out, line{text: text, style: yellow})
	}
	if cmd := approveCommand(cur); cmd != "" && (prev == nil || approveCommand(prev) != cmd) {
		out = append(out, line{text: fmt.Sprintf("%s approve it: %s", at, cmd), style: bold})
	}
	if note := approvedNote(cur); note != "" && (prev == nil || approvedNote(prev) != note) {
		out = append(out, line{text: at + " " + note})
	}
	if st.Phase.Finished() {
		out = append(out, flipFinalLines(cur)...)
	}
	return out
}
