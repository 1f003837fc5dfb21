package cli

import (
	"fmt"
	"strings"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
)

// The watch view of a flip is a pure function of the flip as last seen and the clock:
// renderFlipFrame draws the live view on a terminal, flipChangeLines and flipFinalLines write
// the log a script reads. Unlike a migration's, it has no rate to compute from earlier
// versions: the nodes' progress is their steps.

// modes is the node's bond mode as its agent last reported it, after the mode it had before
// the flip when that differs: "active-backup → 802.3ad"; "-" when not reported.
func modes(n bondflip.NodeProgress) string {
	switch {
	case n.Current == "" && n.Previous == "":
		return "-"
	case n.Previous == "" || n.Previous == n.Current:
		return string(n.Current)
	case n.Current == "":
		return string(n.Previous) + " → -"
	}
	return string(n.Previous) + " → " + string(n.Current)
}

// nodeName names the node at position for a message: "edge-2 (2 of 3)".
func nodeName(p bondflip.Progress, position int) string {
	if position < 1 || position > len(p.Nodes) {
		return fmt.Sprintf("position %d", position)
	}
	return fmt.Sprintf("%s (%d of %d)", p.Nodes[position-1].Name, position, len(p.Nodes))
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

// flipRef names a flip as approve takes it.
func flipRef(name string) string { return "bondflip/" + name }

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
	p := bondflip.ProgressOf(f)
	nameWidth, modesWidth := 0, 0
	for _, n := range p.Nodes {
		nameWidth, modesWidth = max(nameWidth, width(n.Name)), max(modesWidth, width(modes(n)))
	}
	for _, n := range p.Nodes {
		look := nodeIcons[n.State]
		text := fmt.Sprintf("  %s %d  %-*s  %s%s  %s", look.icon, n.Position, nameWidth, n.Name,
			modes(n), strings.Repeat(" ", modesWidth-width(modes(n))), n.State)
		out = append(out, line{text: text, style: look.style})
		for _, s := range byNode[n.Position] {
			out = append(out, stepLine("      ", s, stepWidth, now))
		}
	}
	out = append(out, heldLines(flipRef(f.Name), p.Gating)...)
	if st.Phase.Finished() {
		out = append(out, line{})
		out = append(out, flipFinalLines(f)...)
	}
	return out
}

// flipFinalLines say how a finished flip ended: its phase, how long it took and, when it did
// not succeed, on which node, with the Succeeded condition's reason (the step that failed)
// and message.
func flipFinalLines(f *nwv1.BondModeFlipPlan) []line {
	st := &f.Status.WorkflowStatus
	result := resultText(st)
	if p := bondflip.ProgressOf(f); p.FailedPosition > 0 {
		result += " on node " + nodeName(p, p.FailedPosition)
	}
	result += succeededText(st)
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
	var was bondflip.Progress
	if prev == nil {
		out = append(out, line{text: flipHeader(cur), style: bold})
	} else {
		prevStatus = &prev.Status.WorkflowStatus
		was = bondflip.ProgressOf(prev)
	}
	st := &cur.Status.WorkflowStatus
	out = append(out, statusChangeLines(prevStatus, st, seen)...)
	p := bondflip.ProgressOf(cur)
	nodeText := func(n bondflip.NodeProgress) string {
		return fmt.Sprintf("node %d %s %s (%s)", n.Position, n.Name, n.State, modes(n))
	}
	for _, n := range p.Nodes {
		if n.Position <= len(was.Nodes) && nodeText(was.Nodes[n.Position-1]) == nodeText(n) {
			continue
		}
		out = append(out, line{text: at + " " + nodeText(n), style: nodeIcons[n.State].style})
	}
	out = append(out, gatingChangeLines(flipRef(cur.Name), was.Gating, p.Gating, at)...)
	if st.Phase.Finished() {
		out = append(out, flipFinalLines(cur)...)
	}
	return out
}
