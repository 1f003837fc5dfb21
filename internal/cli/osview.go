package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
)

// The watch view of an OS version policy (gatedView): renderOSFrame draws the live view,
// osChangeLines writes the log. Where the policy stands is read through osupgrade.ProgressOf,
// which the web UI shows too.

const osWatchHelp = `Follow an OSVersionPolicy until it ends: its phase, the Preflight, and one line per node in
the policy's order with its position, name, phase (Pending, Draining, Staged, Rebooting,
Verifying, Soaking, Done, FellBack, Failed), the image and boot entry its agent last reported
booted (Active, Passive: the fallback, Recovery) and the part of its step under way (Cordon,
Drain, Stage, Reboot, Verify, Soak, Uncordon); under a node, the step of it that runs, waits
or failed, with its duration and message, and the evidence once it fell back or failed (what
its agent reported after the boot). The nodes the policy holds follow, each with why. When a
gate holds the next step (approval, the maintenance window, another workflow, the cluster's
health, the management mode), the Held condition says which and why; a Manual policy's node
that waits for a person comes with the command that approves it. When the policy ends: the
phase and, when it failed, the node, the step and the reason; for a node that fell back, how
to try the image on it again.

The view is driven by a watch on the object: it changes when the status does, and on a
terminal it redraws once a second so that the running step's duration stays current. When
standard output is not a terminal (a pipe, a CI log) nothing is redrawn: one line is written
per phase, step, node, held node or gate change, then the result.

Exit codes: without --wait, 0 once the policy has ended, however it ended. With --wait:
0 Succeeded; 1 Failed (a node fell back, did not come back, or its health did not hold) or it
was deleted; 3 --timeout passed, or interrupted, first. Either way 1 also means the policy
cannot be read, and 2 a usage error.`

const osWatchExamples = `  # The live view
  kubectl nodewright os watch to-v3-6

  # In a script: block until it ends, fail unless it Succeeded, give up after six hours
  kubectl nodewright os watch to-v3-6 --wait --timeout 6h`

// osPolicies are the OSVersionPolicies, as os watch shows them.
var osPolicies = gatedKind[*nwv1.OSVersionPolicy]{kind: osKind, apiKind: "OSVersionPolicy", noun: "policy",
	newObject: func() *nwv1.OSVersionPolicy { return &nwv1.OSVersionPolicy{} },
	newList:   func() client.ObjectList { return &nwv1.OSVersionPolicyList{} },
	frame:     renderOSFrame, changes: osChangeLines}

func newOSWatchCommand(f *Factory) *cobra.Command {
	return osPolicies.watchCommand(f, "Follow an OS version policy node by node: phases, booted images, evidence, held nodes, the gate that holds it, live", osWatchHelp, osWatchExamples)
}

// osRef names a policy as approve takes it.
func osRef(name string) string { return "osvp/" + name }

// osHeader names the policy and what it does.
func osHeader(p *nwv1.OSVersionPolicy) string {
	return fmt.Sprintf("%s %s: %s", osKind, p.Name, describeOSPolicy(p))
}

var osNodeIcons = map[nwv1.NodeOSPhase]struct {
	icon  string
	style style
}{
	nwv1.NodeOSPending:   {"·", dim},
	nwv1.NodeOSDraining:  {"▶", cyan},
	nwv1.NodeOSStaged:    {"▶", cyan},
	nwv1.NodeOSRebooting: {"▶", cyan},
	nwv1.NodeOSVerifying: {"▶", cyan},
	nwv1.NodeOSSoaking:   {"▶", cyan},
	nwv1.NodeOSDone:      {"✓", green},
	nwv1.NodeOSFellBack:  {"↩", red},
	nwv1.NodeOSFailed:    {"✗", red},
}

// booted is the image a node's agent last reported booted, with its boot entry: "quay.io/
// kairos/ubuntu:v2 (Active)"; "-" when not reported.
func booted(n nwv1.NodeOSUpgrade) string {
	switch {
	case n.BootedImage == "" && n.BootEntry == "":
		return "-"
	case n.BootEntry == "":
		return n.BootedImage
	case n.BootedImage == "":
		return "- (" + string(n.BootEntry) + ")"
	}
	return n.BootedImage + " (" + string(n.BootEntry) + ")"
}

// hasEvidence reports whether the view shows a node's evidence: once it fell back or failed.
func hasEvidence(n nwv1.NodeOSUpgrade) bool {
	return n.Evidence != "" && (n.Phase == nwv1.NodeOSFellBack || n.Phase == nwv1.NodeOSFailed)
}

// renderOSFrame is the live view of a policy at now: its phase and elapsed time, the
// Preflight, each node in order with its phase, booted image and part and, under it, the step
// of it that runs, waits or failed and its evidence; the Recovery; the held nodes; the gate
// that holds the next step (with the command that approves it); once the phase is final, the
// result.
func renderOSFrame(p *nwv1.OSVersionPolicy, now time.Time) []line {
	st := &p.Status.WorkflowStatus
	out := []line{{text: osHeader(p), style: bold}, phaseLine(st, now), {}}
	if len(st.Steps) == 0 {
		out = append(out, line{text: "  (waiting for the operator to start the policy)", style: dim})
	}
	byNode := map[int][]nwv1.WorkflowStep{}
	stepWidth := 0
	var others []nwv1.WorkflowStep
	for _, s := range st.Steps {
		if k, ok := osupgrade.ParseStep(osupgrade.Step(s.Name)); ok {
			if shownUnderNode(s) {
				byNode[k] = append(byNode[k], s)
				stepWidth = max(stepWidth, len(s.Name))
			}
			continue
		}
		others = append(others, s)
		stepWidth = max(stepWidth, len(s.Name))
	}
	for _, s := range others {
		if s.Name == string(osupgrade.Preflight) {
			out = append(out, stepLine("  ", s, stepWidth, now))
		}
	}
	pr := osupgrade.ProgressOf(p)
	nameWidth, phaseWidth, bootedWidth := 0, 0, 0
	for _, n := range pr.Nodes {
		nameWidth, phaseWidth, bootedWidth = max(nameWidth, width(n.Name)), max(phaseWidth, len(n.Phase)), max(bootedWidth, width(booted(n)))
	}
	for _, n := range pr.Nodes {
		look := osNodeIcons[n.Phase]
		text := fmt.Sprintf("  %s %d  %-*s  %-*s  %s", look.icon, n.Position, nameWidth, n.Name, phaseWidth, n.Phase, booted(n))
		if n.Part != "" && n.Phase != nwv1.NodeOSDone && n.Phase != nwv1.NodeOSPending {
			text += strings.Repeat(" ", bootedWidth-width(booted(n))) + "  part " + n.Part
		}
		out = append(out, line{text: strings.TrimRight(text, " "), style: look.style})
		for _, s := range byNode[int(n.Position)] {
			out = append(out, stepLine("      ", s, stepWidth, now))
		}
		if hasEvidence(n) {
			out = append(out, line{text: "      evidence: " + oneLine(n.Evidence), style: red})
		}
	}
	for _, s := range others {
		if s.Name != string(osupgrade.Preflight) {
			out = append(out, stepLine("  ", s, stepWidth, now))
		}
	}
	if len(pr.HeldNodes) > 0 {
		out = append(out, line{text: "  Held nodes (left alone):", style: yellow})
		for _, h := range pr.HeldNodes {
			out = append(out, line{text: "    " + h.Node + ": " + oneLine(h.Reason), style: yellow})
		}
	}
	out = append(out, heldLines(osRef(p.Name), pr.Gating)...)
	if st.Phase.Finished() {
		out = append(out, line{})
		out = append(out, osFinalLines(p)...)
	}
	return out
}

// osFinalLines say how a finished policy ended: its phase, how long it took and, when it did
// not succeed, on which node, with the Succeeded condition's reason and message; for each node
// that fell back, how to try the image on it again.
func osFinalLines(p *nwv1.OSVersionPolicy) []line {
	st := &p.Status.WorkflowStatus
	pr := osupgrade.ProgressOf(p)
	result := resultText(st)
	if pr.FailedPosition > 0 {
		result += " on node " + pr.NodeName(pr.FailedPosition)
	}
	result += succeededText(st)
	out := []line{{text: result, style: phaseLineStyle(st.Phase)}}
	for _, node := range pr.FellBack {
		out = append(out, line{text: fmt.Sprintf("%s fell back from the image. To try it there again, once you know why: delete this policy and create a new one that acknowledges it: kubectl nodewright os plan --image %s --ack %s ...",
			node, p.Spec.Image, node), style: yellow})
	}
	return out
}

// osNodeText is a node as the log writes it: "node 2 edge-2 Rebooting (booted
// quay.io/kairos/ubuntu:v1 (Active), part Reboot)".
func osNodeText(n nwv1.NodeOSUpgrade) string {
	text := fmt.Sprintf("node %d %s %s (booted %s", n.Position, n.Name, n.Phase, booted(n))
	if n.Part != "" {
		text += ", part " + n.Part
	}
	return text + ")"
}

// osChangeLines are the log lines for what changed from prev (nil for the first version seen)
// to cur, seen at: the header first; the steps and the phase; each node whose phase, booted
// image or part changed (every node the first time), with its evidence once it fell back or
// failed; the held nodes when they changed; the gate that holds the next step when it changed,
// with the command that approves it; an approval; and the result once it ended.
func osChangeLines(prev, cur *nwv1.OSVersionPolicy, seen time.Time) []line {
	at := timestamp(seen)
	var out []line
	var prevStatus *nwv1.WorkflowStatus
	var was osupgrade.Progress
	if prev == nil {
		out = append(out, line{text: osHeader(cur), style: bold})
	} else {
		prevStatus = &prev.Status.WorkflowStatus
		was = osupgrade.ProgressOf(prev)
	}
	st := &cur.Status.WorkflowStatus
	out = append(out, statusChangeLines(prevStatus, st, seen)...)
	pr := osupgrade.ProgressOf(cur)
	for _, n := range pr.Nodes {
		before, ok := was.NodeAt(int(n.Position))
		if !ok || osNodeText(before) != osNodeText(n) || before.Name != n.Name {
			out = append(out, line{text: at + " " + osNodeText(n), style: osNodeIcons[n.Phase].style})
		}
		if hasEvidence(n) && (!ok || !hasEvidence(before) || before.Evidence != n.Evidence) {
			out = append(out, line{text: at + " node " + n.Name + " evidence: " + oneLine(n.Evidence), style: red})
		}
	}
	heldText := func(h []nwv1.OSNodeHold) string {
		return strings.Join(mapSlice(h, func(h nwv1.OSNodeHold) string { return h.Node + " (" + oneLine(h.Reason) + ")" }), ", ")
	}
	if held := heldText(pr.HeldNodes); held != heldText(was.HeldNodes) {
		if held == "" {
			out = append(out, line{text: at + " held nodes: none"})
		} else {
			out = append(out, line{text: at + " held nodes: " + held, style: yellow})
		}
	}
	out = append(out, gatingChangeLines(osRef(cur.Name), was.Gating, pr.Gating, at)...)
	if st.Phase.Finished() {
		out = append(out, osFinalLines(cur)...)
	}
	return out
}
