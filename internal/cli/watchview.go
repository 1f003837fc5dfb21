package cli

import (
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
)

// The watch view of a migration is a pure function of the snapshots the watch delivered (each
// with the time it arrived) and the clock: renderFrame draws the live view on a terminal,
// changeLines and finalLines write the log a script reads. Recorded sequences of snapshots
// test both (testdata/*.golden).

// migrationSnapshot is the migration as one watch event delivered it, and when it arrived.
// A snapshot that was read (Read: the GET before the watch starts, or the read afresh after
// the watch's version expired) shows values written at some unknown time before it arrived,
// up to a progress interval earlier or more: its time says only when they were seen.
type migrationSnapshot struct {
	At        time.Time               `json:"at"`
	Read      bool                    `json:"read,omitempty"`
	Migration *nwv1.VMVolumeMigration `json:"migration"`
}

// line is one line of a view and its colour.
type line struct {
	text  string
	style style
}

// rateWindow is how far back the rate looks: long enough to smooth the controller's
// irregular progress updates, short enough to follow a change of speed.
const rateWindow = 30 * time.Second

// progressInterval is how often the controller writes a running data step's progress
// (internal/controller/vmvolumemigration), and stallAfter how long without a new bytesDone the
// copy is taken to have stalled: three of them.
const (
	progressInterval = 2 * time.Second
	stallAfter       = 3 * progressInterval
)

// progressEstimate is how far the data copy has come, how fast, and when it will be done.
type progressEstimate struct {
	Done, Total int64
	// Rate is in bytes per second; 0 when it cannot be known (yet).
	Rate float64
	// ETA is the time left at the clock's now; valid when HasETA.
	ETA    time.Duration
	HasETA bool
	// Stalled is how long bytesDone has not changed, when that is longer than stallAfter and
	// the data is not all done; then there is no Rate or ETA.
	Stalled time.Duration
}

// estimateProgress reads the newest progress and derives the rate from the successive
// progress updates of the current run: the samples since the total, the running step, or a
// decrease of bytesDone last started a new one. A sample is the first snapshot with a new
// bytesDone, at the time it arrived.
//
// Only samples whose value a watch event delivered measure the rate: the event arrives as the
// controller writes the value. A value first seen in a read (the GET the watch starts from, or
// the read afresh after an expired version) was written at some unknown time before, up to a
// progress interval or more: timed at its arrival it would shorten the first interval, and
// overstate the rate, by as much. So the rate starts from the first event that changed
// bytesDone.
//
// When no new bytesDone has arrived for longer than stallAfter, the copy has stalled: the
// estimate says for how long instead of a rate and an ETA.
func estimateProgress(snaps []migrationSnapshot, now time.Time) (progressEstimate, bool) {
	if len(snaps) == 0 || snaps[len(snaps)-1].Migration.Status.Progress == nil {
		return progressEstimate{}, false
	}
	last := snaps[len(snaps)-1]
	p := last.Migration.Status.Progress
	est := progressEstimate{Done: p.BytesDone, Total: p.BytesTotal}
	step := runningStep(last.Migration)

	type sample struct {
		at    time.Time
		done  int64
		timed bool // a watch event delivered the value first: at is when it was written
	}
	var samples []sample // newest first
	for i := len(snaps) - 1; i >= 0; i-- {
		m := snaps[i].Migration
		q := m.Status.Progress
		if q == nil || q.BytesTotal != p.BytesTotal || runningStep(m) != step {
			break
		}
		if len(samples) > 0 {
			newer := &samples[len(samples)-1]
			if q.BytesDone > newer.done {
				break // a new run started after this one
			}
			if q.BytesDone == newer.done {
				newer.at, newer.timed = snaps[i].At, !snaps[i].Read // first seen earlier
				continue
			}
		}
		samples = append(samples, sample{at: snaps[i].At, done: q.BytesDone, timed: !snaps[i].Read})
	}
	newest := samples[0]
	if since := now.Sub(newest.at); since > stallAfter && est.Done < est.Total {
		est.Stalled = since
		return est, true
	}
	var timed []sample
	for _, s := range samples {
		if s.timed {
			timed = append(timed, s)
		}
	}
	if len(timed) >= 2 {
		end, ref := timed[0], timed[1]
		for _, s := range timed[2:] {
			if end.at.Sub(s.at) > rateWindow {
				break
			}
			ref = s
		}
		if dt := end.at.Sub(ref.at).Seconds(); dt > 0 {
			est.Rate = float64(end.done-ref.done) / dt
		}
		if est.Rate > 0 && est.Done < est.Total {
			left := time.Duration(float64(est.Total-est.Done) / est.Rate * float64(time.Second))
			est.ETA, est.HasETA = max(left-now.Sub(newest.at), 0), true
		}
	}
	return est, true
}

// runningStep is the name of the step now running, or "".
func runningStep(m *nwv1.VMVolumeMigration) string {
	for _, s := range m.Status.Steps {
		if s.State == nwv1.StepRunning {
			return s.Name
		}
	}
	return ""
}

// isDataStep reports whether a step moves or reads the volume's data, so that the progress
// is about it.
func isDataStep(name string) bool {
	return name == string(migration.Copy) || name == string(migration.VerifyClone)
}

// phaseOf is the migration's phase, Pending until the operator wrote one.
func phaseOf(m *nwv1.VMVolumeMigration) nwv1.WorkflowPhase {
	return statusPhase(&m.Status.WorkflowStatus)
}

const barWidth = 30

// progressBar draws done of total as a bar of barWidth cells.
func progressBar(done, total int64) string { return bar(done, total, barWidth) }

// bar draws done of total as a bar of cells.
func bar(done, total int64, cells int) string {
	filled := 0
	if total > 0 {
		filled = int(math.Min(float64(cells), float64(done)*float64(cells)/float64(total)))
	}
	return "[" + strings.Repeat("█", filled) + strings.Repeat("░", cells-filled) + "]"
}

// progressLine is the bar, the bytes, the rate and the ETA, or how long nothing moved.
func progressLine(est progressEstimate) string {
	pct := 0
	if est.Total > 0 {
		pct = int(est.Done * 100 / est.Total)
	}
	s := fmt.Sprintf("%s %3d%%  %s / %s", progressBar(est.Done, est.Total), pct, bytesIEC(est.Done), bytesIEC(est.Total))
	if est.Stalled > 0 {
		return s + "  no progress for " + shortDuration(est.Stalled)
	}
	if est.Rate > 0 {
		s += fmt.Sprintf("  %s/s", bytesIEC(int64(est.Rate)))
	}
	switch {
	case est.HasETA:
		s += "  ETA " + shortDuration(est.ETA)
	case est.Done < est.Total:
		s += "  ETA -"
	}
	return s
}

var stepIcons = map[nwv1.StepState]struct {
	icon  string
	style style
}{
	nwv1.StepPending:   {"·", dim},
	nwv1.StepWaiting:   {"‖", yellow},
	nwv1.StepRunning:   {"▶", cyan},
	nwv1.StepSucceeded: {"✓", green},
	nwv1.StepFailed:    {"✗", red},
	nwv1.StepSkipped:   {"-", dim},
	nwv1.StepCancelled: {"■", yellow},
}

func phaseLineStyle(p nwv1.WorkflowPhase) style {
	switch p {
	case nwv1.WorkflowSucceeded:
		return green
	case nwv1.WorkflowFailed, nwv1.WorkflowRolledBack, nwv1.WorkflowRollingBack:
		return red
	}
	return bold
}

// stepDuration is how long a step took, or has been running at now; "" when it has not
// started.
func stepDuration(s nwv1.WorkflowStep, now time.Time) string {
	switch {
	case s.StartedAt == nil || s.State == nwv1.StepSkipped:
		return ""
	case s.FinishedAt != nil:
		return shortDuration(s.FinishedAt.Sub(s.StartedAt.Time))
	case s.State == nwv1.StepRunning:
		return shortDuration(now.Sub(s.StartedAt.Time))
	}
	return ""
}

// header names the migration and what it does.
func header(m *nwv1.VMVolumeMigration) string {
	return fmt.Sprintf("vmvolumemigration %s/%s: %s", m.Namespace, m.Name, describeMigration(m))
}

// renderFrame is the live view at now, after snaps: the migration, its phase and elapsed time,
// each step with its state and duration, the progress of the data step, and once the phase is
// final, the checksums and the result.
func renderFrame(snaps []migrationSnapshot, now time.Time) []line {
	if len(snaps) == 0 {
		return nil
	}
	m := snaps[len(snaps)-1].Migration
	st := m.Status
	phase := phaseOf(m)
	out := []line{{text: header(m), style: bold}, phaseLine(&st.WorkflowStatus, now), {}}
	if len(st.Steps) == 0 {
		out = append(out, line{text: "  (waiting for the operator to start the migration)", style: dim})
	}
	nameWidth := 0
	for _, s := range st.Steps {
		nameWidth = max(nameWidth, len(s.Name))
	}
	est, hasProgress := estimateProgress(snaps, now)
	for _, s := range st.Steps {
		out = append(out, stepLine("  ", s, nameWidth, now))
		if s.State == nwv1.StepRunning && hasProgress && isDataStep(s.Name) {
			out = append(out, line{text: "      " + progressLine(est), style: cyan})
		}
	}
	if phase.Finished() {
		out = append(out, line{})
		out = append(out, finalLines(m)...)
	}
	return out
}

// changeLines are the log lines for what changed from prev (nil for the first snapshot) to
// cur: the header first, then the changes of its status.
func changeLines(prev *nwv1.VMVolumeMigration, cur migrationSnapshot) []line {
	if prev == nil {
		return append([]line{{text: header(cur.Migration), style: bold}}, statusChangeLines(nil, &cur.Migration.Status.WorkflowStatus, cur.At)...)
	}
	return statusChangeLines(&prev.Status.WorkflowStatus, &cur.Migration.Status.WorkflowStatus, cur.At)
}

// statusChangeLines are the log lines for what changed in a workflow's status from prev (nil
// before the first version seen) to cur, seen at: the phase, and each step that changed state,
// with its duration and message.
func statusChangeLines(prev, cur *nwv1.WorkflowStatus, seen time.Time) []line {
	at := timestamp(seen)
	var out []line
	before := map[string]nwv1.StepState{}
	var prevPhase nwv1.WorkflowPhase // none before the first snapshot
	if prev != nil {
		for _, s := range prev.Steps {
			before[s.Name] = s.State
		}
		prevPhase = statusPhase(prev)
	}
	// Steps that ended come before the phase they led to, steps that started after it.
	var ended, started []line
	for _, s := range cur.Steps {
		if s.State == before[s.Name] || (s.State == nwv1.StepPending && before[s.Name] == "") {
			continue
		}
		text := fmt.Sprintf("%s step %s %s", at, s.Name, s.State)
		if s.FinishedAt != nil && s.StartedAt != nil && s.State != nwv1.StepSkipped {
			text += " after " + shortDuration(s.FinishedAt.Sub(s.StartedAt.Time))
		}
		if s.Message != "" && s.State != nwv1.StepRunning {
			text += ": " + oneLine(s.Message)
		}
		l := line{text: text, style: stepIcons[s.State].style}
		if s.State == nwv1.StepRunning || s.State == nwv1.StepPending || s.State == nwv1.StepWaiting {
			started = append(started, l)
		} else {
			ended = append(ended, l)
		}
	}
	out = append(out, ended...)
	if phase := statusPhase(cur); phase != prevPhase {
		out = append(out, line{text: fmt.Sprintf("%s phase %s", at, phase), style: phaseLineStyle(phase)})
	}
	out = append(out, started...)
	return out
}

// finalLines say how a finished migration ended: the data moved, the checksums and the
// Verified condition, and the phase with the Succeeded condition's message.
func finalLines(m *nwv1.VMVolumeMigration) []line {
	st := m.Status
	var out []line
	for _, s := range st.Steps {
		if !isDataStep(s.Name) || s.State != nwv1.StepSucceeded || st.Progress == nil || s.StartedAt == nil || s.FinishedAt == nil {
			continue
		}
		d := s.FinishedAt.Sub(s.StartedAt.Time)
		text := fmt.Sprintf("Data: %s in %s", bytesIEC(st.Progress.BytesTotal), shortDuration(d))
		if d > 0 {
			text += fmt.Sprintf(" (%s/s)", bytesIEC(int64(float64(st.Progress.BytesTotal)/d.Seconds())))
		}
		out = append(out, line{text: text})
	}
	if cs := st.Checksum; cs != nil {
		src, dst := cs.Source, cs.Target
		if src == "" {
			src = "-"
		}
		if dst == "" {
			dst = "-"
		}
		out = append(out, line{text: fmt.Sprintf("Checksum (%s): source %s", cs.Algorithm, src)},
			line{text: fmt.Sprintf("                 target %s", dst)})
	}
	if v := meta.FindStatusCondition(st.Conditions, nwv1.ConditionVerified); v != nil {
		out = append(out, line{text: fmt.Sprintf("Verified: %s %s: %s", v.Status, v.Reason, oneLine(v.Message)), style: conditionStyle(v.Status)})
	} else {
		out = append(out, line{text: "Verified: not reported", style: dim})
	}
	result := resultText(&st.WorkflowStatus)
	if s := meta.FindStatusCondition(st.Conditions, nwv1.ConditionSucceeded); s != nil && s.Message != "" {
		result += ": " + oneLine(s.Message)
	}
	return append(out, line{text: result, style: phaseLineStyle(st.Phase)})
}

// phaseLine is the workflow's phase and how long it has run, or ran.
func phaseLine(st *nwv1.WorkflowStatus, now time.Time) line {
	phase := statusPhase(st)
	text := "Phase: " + string(phase)
	if st.StartTime != nil {
		end := now
		if st.CompletionTime != nil {
			end = st.CompletionTime.Time
		}
		text += "   elapsed " + shortDuration(end.Sub(st.StartTime.Time))
	}
	return line{text: text, style: phaseLineStyle(phase)}
}

// stepLine is one step of a view: its icon, name, state, duration and message, after indent.
func stepLine(indent string, s nwv1.WorkflowStep, nameWidth int, now time.Time) line {
	look := stepIcons[s.State]
	text := fmt.Sprintf("%s%s %-*s  %-10s %6s", indent, look.icon, nameWidth, s.Name, s.State, stepDuration(s, now))
	if s.Message != "" {
		text += "  " + oneLine(s.Message)
	}
	return line{text: strings.TrimRight(text, " "), style: look.style}
}

// resultText starts the line saying how a finished workflow ended: its phase and how long it
// took.
func resultText(st *nwv1.WorkflowStatus) string {
	result := "Result: " + string(st.Phase)
	if st.StartTime != nil && st.CompletionTime != nil {
		result += " after " + shortDuration(st.CompletionTime.Sub(st.StartTime.Time))
	}
	return result
}
