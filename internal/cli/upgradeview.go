package cli

import (
	"fmt"
	"strings"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
)

// The watch view of an upgrade (gatedView): renderUpgradeFrame draws the live view,
// upgradeChangeLines writes the log. Where the upgrade stands is read through
// replupgrade.ProgressOf, which the web UI shows too.

// upgradeRef names an upgrade as approve takes it.
func upgradeRef(name string) string { return "rupg/" + name }

// upgradeHeader names the upgrade and what it does.
func upgradeHeader(u *nwv1.ReplicationUpgrade) string {
	return fmt.Sprintf("%s %s: %s", upgradeKind, u.Name, describeUpgrade(u))
}

// replicaBarWidth is the width of a synchronising replica's bar.
const replicaBarWidth = 10

// renderUpgradeFrame is the live view of an upgrade at now: its phase and elapsed time; the
// six stages with their state, duration and message, the running step's progress under it;
// the rollback steps once it rolls back; the volumes, the synchronisation and the replicas
// still synchronising; the gate that holds the next stage (with the command that approves
// it); once the phase is final, the result (the volumes are above).
func renderUpgradeFrame(u *nwv1.ReplicationUpgrade, now time.Time) []line {
	st := &u.Status.WorkflowStatus
	p := replupgrade.ProgressOf(u)
	out := []line{{text: upgradeHeader(u), style: bold}, phaseLine(st, now), {}}
	if len(st.Steps) == 0 {
		out = append(out, line{text: "  (waiting for the operator to start the upgrade)", style: dim})
	}
	nameWidth := 0
	for _, s := range p.Stages {
		nameWidth = max(nameWidth, len(s.Name))
	}
	for _, s := range p.Rollback {
		nameWidth = max(nameWidth, len(s.Name))
	}
	withProgress := func(s nwv1.WorkflowStep) []line {
		l := []line{stepLine("  ", s, nameWidth, now)}
		if s.State == nwv1.StepRunning && u.Status.Progress != "" {
			l = append(l, line{text: "      " + oneLine(u.Status.Progress), style: cyan})
		}
		return l
	}
	for _, s := range p.Stages {
		out = append(out, withProgress(s)...)
	}
	if len(p.Rollback) > 0 {
		out = append(out, line{text: "  Rollback:", style: yellow})
		for _, s := range p.Rollback {
			out = append(out, withProgress(s)...)
		}
	}
	out = append(out, volumeLines(&u.Status)...)
	out = append(out, heldLines(upgradeRef(u.Name), p.Gating)...)
	if st.Phase.Finished() {
		out = append(out, line{})
		out = append(out, upgradeResultLines(u)...)
	}
	return out
}

// volumeScope says which volumes the upgrade replicates, where from and where to: "400
// volumes of edge-1, new replicas on edge-2"; "" before the Preflight found them.
func volumeScope(st *nwv1.ReplicationUpgradeStatus) string {
	if st.Volumes == nil {
		return ""
	}
	text := fmt.Sprintf("%d volumes", st.Volumes.Total)
	if st.OriginalNode != "" {
		text += " of " + st.OriginalNode
	}
	if len(st.DataNodes) > 0 {
		text += ", new replicas on " + strings.Join(st.DataNodes, ", ")
	}
	return text
}

// volumeCounts counts the volumes through the stages: "replicas placed 400/400 · up to date
// 358/400 · verified 0/400".
func volumeCounts(v *nwv1.ReplicationVolumeCounts) string {
	return fmt.Sprintf("replicas placed %d/%d · up to date %d/%d · verified %d/%d",
		v.Placed, v.Replicas, v.UpToDate, v.Total, v.Verified, v.Total)
}

// volumeLines are the volumes and their counts, the synchronisation over every new replica,
// and the replicas still synchronising, each with a bar; none of what the status does not
// say yet.
func volumeLines(st *nwv1.ReplicationUpgradeStatus) []line {
	var out []line
	if st.Volumes != nil || st.SyncPercent != nil || len(st.Syncing) > 0 {
		out = append(out, line{})
	}
	if st.Volumes != nil {
		out = append(out, line{text: "  Volumes: " + volumeScope(st)},
			line{text: "           " + volumeCounts(st.Volumes)})
	}
	if pct := st.SyncPercent; pct != nil {
		out = append(out, line{text: fmt.Sprintf("  Sync:    %s %3d%%", progressBar(int64(*pct), 100), *pct), style: cyan})
	}
	resWidth, nodeWidth := 0, 0
	for _, r := range st.Syncing {
		resWidth, nodeWidth = max(resWidth, width(r.Resource)), max(nodeWidth, width(r.Node))
	}
	for _, r := range st.Syncing {
		out = append(out, line{text: fmt.Sprintf("           %-*s  %-*s  %s %3d%%", resWidth, r.Resource, nodeWidth, r.Node,
			bar(int64(r.Percent), 100, replicaBarWidth), r.Percent)})
	}
	return out
}

// upgradeFinalLines say how a finished upgrade ended, as the log ends: the volumes, then the
// result (upgradeResultLines).
func upgradeFinalLines(u *nwv1.ReplicationUpgrade) []line {
	var out []line
	if v := u.Status.Volumes; v != nil {
		out = append(out, line{text: "Volumes: " + volumeScope(&u.Status) + ": " + volumeCounts(v)})
	}
	return append(out, upgradeResultLines(u)...)
}

// upgradeResultLines say how a finished upgrade ended: its phase, how long it took and, when
// it did not succeed, in which stage, with the Succeeded condition's reason (the step that
// failed) and message, and the rollback steps with how each ended.
func upgradeResultLines(u *nwv1.ReplicationUpgrade) []line {
	st := &u.Status.WorkflowStatus
	p := replupgrade.ProgressOf(u)
	result := resultText(st)
	if p.FailedStage > 0 {
		result += fmt.Sprintf(" in stage %s (%d of %d)", p.Failed.Name, p.FailedStage, len(p.Stages))
	}
	result += succeededText(st)
	out := []line{{text: result, style: phaseLineStyle(st.Phase)}}
	if len(p.Rollback) > 0 {
		ran := mapSlice(p.Rollback, func(s nwv1.WorkflowStep) string { return s.Name + " " + string(s.State) })
		out = append(out, line{text: "Rollback: " + strings.Join(ran, ", "), style: phaseLineStyle(st.Phase)})
	}
	return out
}

// upgradeChangeLines are the log lines for what changed from prev (nil for the first version
// seen) to cur, seen at: the header first; the steps and the phase; the volumes once the
// Preflight found them; the running step's progress and the synchronisation's percent when
// they changed; the gate that holds the next stage when it changed, with the command that
// approves it; an approval; and the result once it ended.
func upgradeChangeLines(prev, cur *nwv1.ReplicationUpgrade, seen time.Time) []line {
	at := timestamp(seen)
	var out []line
	var prevStatus *nwv1.WorkflowStatus
	was, wasStatus := replupgrade.Progress{}, &nwv1.ReplicationUpgradeStatus{}
	if prev == nil {
		out = append(out, line{text: upgradeHeader(cur), style: bold})
	} else {
		prevStatus, wasStatus = &prev.Status.WorkflowStatus, &prev.Status
		was = replupgrade.ProgressOf(prev)
	}
	st := &cur.Status
	out = append(out, statusChangeLines(prevStatus, &st.WorkflowStatus, seen)...)
	if scope := volumeScope(st); scope != "" && scope != volumeScope(wasStatus) {
		out = append(out, line{text: at + " volumes " + scope})
	}
	if st.Progress != "" && st.Progress != wasStatus.Progress {
		out = append(out, line{text: at + " progress " + oneLine(st.Progress), style: cyan})
	}
	if pct := st.SyncPercent; pct != nil && (wasStatus.SyncPercent == nil || *wasStatus.SyncPercent != *pct) {
		text := fmt.Sprintf("%s sync %d%%", at, *pct)
		if n := len(st.Syncing); n > 0 {
			r := st.Syncing[0]
			text += fmt.Sprintf(" (%d replicas syncing, the least done %s on %s at %d%%)", n, r.Resource, r.Node, r.Percent)
		}
		out = append(out, line{text: text, style: cyan})
	}
	p := replupgrade.ProgressOf(cur)
	out = append(out, gatingChangeLines(upgradeRef(cur.Name), was.Gating, p.Gating, at)...)
	if st.Phase.Finished() {
		out = append(out, upgradeFinalLines(cur)...)
	}
	return out
}
