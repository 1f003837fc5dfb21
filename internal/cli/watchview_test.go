package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// recorded are the sequences of snapshots in testdata: a Cold migration that succeeds, a
// Hot one whose clone does not verify and that rolls back, and the Cold one watched from the
// middle of its copy (read 1.9s after the controller wrote its progress, then updated every
// 2s at 50 MiB/s until the copy stalls for 24s).
var recorded = []string{"watch-cold-succeeded", "watch-hot-rolledback", "watch-cold-midcopy"}

func loadSnapshots(t *testing.T, name string) []migrationSnapshot {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var snaps []migrationSnapshot
	if err := json.Unmarshal(data, &snaps); err != nil {
		t.Fatal(err)
	}
	return snaps
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from what was rendered (go test -run %s -update rewrites it):\n%s", path, t.Name(), diffLines(string(want), got))
	}
}

// diffLines names the first line that differs.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, wl, gl)
		}
	}
	return ""
}

func frameText(lines []line) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// The live view, frame by frame: at each snapshot's arrival, and five and fifteen seconds
// after each while the next is later (the once-a-second redraw: durations and the ETA move
// on, a stalled copy says so).
func TestWatchFramesGolden(t *testing.T) {
	for _, name := range recorded {
		t.Run(name, func(t *testing.T) {
			snaps := loadSnapshots(t, name)
			var b strings.Builder
			for i := range snaps {
				clocks := []time.Time{snaps[i].At}
				for _, later := range []time.Duration{5 * time.Second, 15 * time.Second} {
					if i+1 < len(snaps) && snaps[i+1].At.Sub(snaps[i].At) > later {
						clocks = append(clocks, snaps[i].At.Add(later))
					}
				}
				for _, now := range clocks {
					fmt.Fprintf(&b, "=== %s (snapshot %d)\n", now.Format("15:04:05.000"), i+1)
					b.WriteString(frameText(renderFrame(snaps[:i+1], now)))
				}
			}
			golden(t, name+".frames.golden", b.String())
		})
	}
}

// The log a script reads: one line per phase or step change, then the result.
func TestWatchLinesGolden(t *testing.T) {
	for _, name := range recorded {
		t.Run(name, func(t *testing.T) {
			snaps := loadSnapshots(t, name)
			var out bytes.Buffer
			view := newMigrationView(&out, false, palette{}, 0)
			for _, s := range snaps {
				view.observe(s, s.At)
			}
			golden(t, name+".lines.golden", out.String())
		})
	}
}

// On a terminal each frame replaces the last: the cursor goes back up over it.
func TestWatchRedrawsInPlace(t *testing.T) {
	snaps := loadSnapshots(t, "watch-cold-succeeded")
	var out bytes.Buffer
	view := newMigrationView(&out, true, palette{on: true}, 200)
	view.observe(snaps[0], snaps[0].At)
	first := len(renderFrame(snaps[:1], snaps[0].At))
	view.observe(snaps[1], snaps[1].At)
	if want := fmt.Sprintf("\x1b[%dA\x1b[J", first); !strings.Contains(out.String(), want) {
		t.Fatalf("the second frame does not move back over the first (%q):\n%q", want, out.String())
	}
	if !strings.Contains(out.String(), "\x1b[1mvmvolumemigration apps/web-root-to-rwx") {
		t.Errorf("no colour on a terminal:\n%q", out.String())
	}

	// A line wider than the terminal is cut, so that the count of lines to go back stays right.
	narrow := newMigrationView(&bytes.Buffer{}, true, palette{}, 20)
	narrow.observe(snaps[5], snaps[5].At)
	for _, l := range strings.Split(strings.TrimSuffix(narrow.w.(*bytes.Buffer).String(), "\n"), "\n") {
		if width(l) >= 20 {
			t.Errorf("line %q is as wide as the terminal", l)
		}
	}
}

func snapshot(at time.Time, step string, done, total int64) migrationSnapshot {
	m := &nwv1.VMVolumeMigration{}
	m.Status.Phase = nwv1.WorkflowRunning
	m.Status.Steps = []nwv1.WorkflowStep{{Name: step, State: nwv1.StepRunning}}
	m.Status.Progress = &nwv1.MigrationProgress{BytesDone: done, BytesTotal: total}
	return migrationSnapshot{At: at, Migration: m}
}

// read is a snapshot that was read (a GET), not delivered by a watch event.
func read(s migrationSnapshot) migrationSnapshot {
	s.Read = true
	return s
}

func TestEstimateProgress(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	const gib, mib = 1 << 30, 1 << 20
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cases := []struct {
		name     string
		snaps    []migrationSnapshot
		now      time.Time
		rate     float64 // bytes/s
		eta      time.Duration
		noETA    bool
		noReport bool
		stalled  time.Duration
	}{
		{name: "no progress yet", snaps: []migrationSnapshot{{At: t0, Migration: &nwv1.VMVolumeMigration{}}}, now: t0, noReport: true},
		{name: "one sample: no rate", snaps: []migrationSnapshot{snapshot(t0, "Copy", gib, 10*gib)}, now: t0, noETA: true},
		{name: "two samples", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", gib, 10*gib), snapshot(sec(10), "Copy", 2*gib, 10*gib),
		}, now: sec(10), rate: gib / 10.0, eta: 80 * time.Second},
		{name: "the ETA counts down between updates", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", gib, 10*gib), snapshot(sec(10), "Copy", 2*gib, 10*gib),
		}, now: sec(14), rate: gib / 10.0, eta: 76 * time.Second},
		{name: "and stops at zero", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", 8*gib, 10*gib), snapshot(sec(10), "Copy", 9*gib+900*mib, 10*gib),
		}, now: sec(15), rate: (gib + 900*mib) / 10.0, eta: 0},
		// The controller writes the progress every 2s: after three intervals without a new
		// bytesDone the copy has stalled, and neither the old rate nor an ETA is shown.
		{name: "a stalled copy: no rate, no ETA, how long nothing moved", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", gib, 10*gib), snapshot(sec(10), "Copy", 2*gib, 10*gib),
		}, now: sec(500), noETA: true, stalled: 490 * time.Second},
		{name: "not yet stalled at three intervals", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", gib, 10*gib), snapshot(sec(10), "Copy", 2*gib, 10*gib),
		}, now: sec(16), rate: gib / 10.0, eta: 74 * time.Second},
		{name: "an update that repeats bytesDone is no progress", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", gib, 10*gib), snapshot(sec(10), "Copy", 2*gib, 10*gib), snapshot(sec(15), "Copy", 2*gib, 10*gib),
		}, now: sec(16.5), noETA: true, stalled: 6500 * time.Millisecond},
		{name: "done is not stalled", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", 8*gib, 10*gib), snapshot(sec(10), "Copy", 10*gib, 10*gib),
		}, now: sec(100), rate: 2 * gib / 10.0, noETA: true},
		// Started mid-copy (50 MiB/s, an update every 2s): the first read arrives 1.9s after the
		// controller wrote its value, so its time is not when that value was reached and it is
		// no reference; the rate waits for two updates the watch delivered.
		{name: "watch started mid-copy: the read is no reference", snaps: []migrationSnapshot{
			read(snapshot(sec(1.9), "Copy", 1000*mib, 10*gib)), snapshot(sec(2), "Copy", 1100*mib, 10*gib),
		}, now: sec(2), noETA: true},
		{name: "watch started mid-copy: the rate from the first two events", snaps: []migrationSnapshot{
			read(snapshot(sec(1.9), "Copy", 1000*mib, 10*gib)), snapshot(sec(2), "Copy", 1100*mib, 10*gib),
			snapshot(sec(4), "Copy", 1200*mib, 10*gib),
		}, now: sec(4), rate: 50 * mib, eta: 180800 * time.Millisecond},
		{name: "a value first seen in a read stays of unknown time when events repeat it", snaps: []migrationSnapshot{
			read(snapshot(sec(1.9), "Copy", 1000*mib, 10*gib)), snapshot(sec(1.95), "Copy", 1000*mib, 10*gib),
			snapshot(sec(2), "Copy", 1100*mib, 10*gib),
		}, now: sec(2), noETA: true},
		{name: "a read afresh (the watch's version expired) is skipped, not the samples before it", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", 0, 10*gib), read(snapshot(sec(39.9), "Copy", 3.5*gib, 10*gib)), snapshot(sec(40), "Copy", 4*gib, 10*gib),
		}, now: sec(40), rate: gib / 10.0, eta: 60 * time.Second},
		{name: "an unchanged update is not a sample: the time a value was first seen counts", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", gib, 10*gib), snapshot(sec(5), "Copy", gib, 10*gib), snapshot(sec(10), "Copy", 3*gib, 10*gib),
		}, now: sec(10), rate: 2 * gib / 10.0, eta: 35 * time.Second},
		{name: "the rate looks back 30s", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", 0, 10*gib), snapshot(sec(10), "Copy", 4*gib, 10*gib),
			snapshot(sec(40), "Copy", 5*gib, 10*gib), snapshot(sec(50), "Copy", 6*gib, 10*gib),
		}, now: sec(50), rate: gib / 10.0, eta: 40 * time.Second},
		{name: "but takes the sample before when none is that recent", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", 0, 10*gib), snapshot(sec(100), "Copy", 5*gib, 10*gib),
		}, now: sec(100), rate: 5 * gib / 100.0, eta: 100 * time.Second},
		{name: "a new step starts a new run", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", 0, 10*gib), snapshot(sec(10), "Copy", 10*gib, 10*gib),
			snapshot(sec(20), "VerifyClone", gib, 10*gib),
		}, now: sec(20), noETA: true},
		{name: "bytesDone going back starts a new run", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", 0, 10*gib), snapshot(sec(10), "Copy", 5*gib, 10*gib),
			snapshot(sec(20), "Copy", gib, 10*gib), snapshot(sec(30), "Copy", 2*gib, 10*gib),
		}, now: sec(30), rate: gib / 10.0, eta: 80 * time.Second},
		{name: "done: a rate, no ETA", snaps: []migrationSnapshot{
			snapshot(t0, "Copy", 8*gib, 10*gib), snapshot(sec(10), "Copy", 10*gib, 10*gib),
		}, now: sec(10), rate: 2 * gib / 10.0, noETA: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			est, ok := estimateProgress(c.snaps, c.now)
			if ok == c.noReport {
				t.Fatalf("reported %v, want %v", ok, !c.noReport)
			}
			if !ok {
				return
			}
			if math.Abs(est.Rate-c.rate) > 1 {
				t.Errorf("rate %.0f B/s, want %.0f", est.Rate, c.rate)
			}
			if est.HasETA == c.noETA {
				t.Fatalf("has ETA %v, want %v", est.HasETA, !c.noETA)
			}
			if est.HasETA && (est.ETA-c.eta).Abs() > time.Millisecond {
				t.Errorf("ETA %s, want %s", est.ETA, c.eta)
			}
			if est.Stalled != c.stalled {
				t.Errorf("stalled %s, want %s", est.Stalled, c.stalled)
			}
		})
	}
}

func TestProgressLine(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		est  progressEstimate
		want string
	}{
		{progressEstimate{Done: 0, Total: 10 * gib}, "[░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░]   0%  0 B / 10.0 GiB  ETA -"},
		{progressEstimate{Done: 46 * gib / 10, Total: 10 * gib, Rate: 128 << 20, ETA: 43 * time.Second, HasETA: true},
			"[█████████████░░░░░░░░░░░░░░░░░]  45%  4.6 GiB / 10.0 GiB  128.0 MiB/s  ETA 43s"},
		{progressEstimate{Done: 10 * gib, Total: 10 * gib, Rate: 128 << 20}, "[██████████████████████████████] 100%  10.0 GiB / 10.0 GiB  128.0 MiB/s"},
		{progressEstimate{Done: gib, Total: 10 * gib, Stalled: 12 * time.Second}, "[███░░░░░░░░░░░░░░░░░░░░░░░░░░░]  10%  1.0 GiB / 10.0 GiB  no progress for 12s"},
	} {
		if got := progressLine(c.est); got != c.want {
			t.Errorf("progressLine(%+v)\n got %q\nwant %q", c.est, got, c.want)
		}
	}
}

func TestStepDuration(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(75 * time.Second))
	now := t0.Add(3 * time.Hour)
	for _, c := range []struct {
		step nwv1.WorkflowStep
		want string
	}{
		{nwv1.WorkflowStep{State: nwv1.StepPending}, ""},
		{nwv1.WorkflowStep{State: nwv1.StepSucceeded, StartedAt: &t0, FinishedAt: &t1}, "1m15s"},
		{nwv1.WorkflowStep{State: nwv1.StepRunning, StartedAt: &t0}, "3h00m"},
	} {
		if got := stepDuration(c.step, now); got != c.want {
			t.Errorf("stepDuration(%+v) = %q, want %q", c.step, got, c.want)
		}
	}
}

// TestEveryStepStateHasAnIcon: the watch draws every state the API allows.
func TestEveryStepStateHasAnIcon(t *testing.T) {
	for _, v := range testenv.EnumValues(t, "StepState") {
		if _, ok := stepIcons[nwv1.StepState(v)]; !ok {
			t.Errorf("step state %s has no icon in the watch", v)
		}
	}
}

// TestTheLogsProgressStaysUntilTheStepEnds: while a data step runs the status holds no
// progress (the operator reads no pod's log); what the view sampled from the copy's log stays
// through the status updates of the same step, and goes with the step.
func TestTheLogsProgressStaysUntilTheStepEnds(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	started := metav1.NewTime(at)
	m := &nwv1.VMVolumeMigration{Status: nwv1.VMVolumeMigrationStatus{WorkflowStatus: nwv1.WorkflowStatus{
		Phase: nwv1.WorkflowRunning, Steps: []nwv1.WorkflowStep{{Name: "Copy", State: nwv1.StepRunning, StartedAt: &started}}}}}
	v := newMigrationView(io.Discard, false, palette{}, 80)
	v.show(m, true, at)

	sampled := m.DeepCopy()
	sampled.Status.Progress = &nwv1.MigrationProgress{BytesDone: 4, BytesTotal: 8, Percent: 50}
	v.show(sampled, false, at.Add(2*time.Second))
	// A status update of the same step (its message, say) holds no progress.
	v.show(m, false, at.Add(3*time.Second))
	if got := v.snaps[len(v.snaps)-1].Migration.Status.Progress; got == nil || got.BytesDone != 4 {
		t.Errorf("after a status update of the running Copy, progress %+v; want the sampled 4 of 8", got)
	}

	next := m.DeepCopy()
	next.Status.Steps[0].State = nwv1.StepSucceeded
	next.Status.Steps = append(next.Status.Steps, nwv1.WorkflowStep{Name: "Repoint", State: nwv1.StepRunning, StartedAt: &started})
	v.show(next, false, at.Add(4*time.Second))
	if got := v.snaps[len(v.snaps)-1].Migration.Status.Progress; got != nil {
		t.Errorf("once Copy ended, progress %+v; want the status's (none)", got)
	}
}
