package cli

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
)

const watchHelp = `Follow a VMVolumeMigration until it ends: each step with its state and duration, a progress
bar of the data copy with bytes done and total, the rate and the time left (computed from
the successive progress updates the watch delivers; "no progress for 40s" once none has
arrived for 6s), then the checksums of source and target, the Verified condition and the
final phase.

The view is driven by a watch on the object: it changes when the status does, and on a
terminal it redraws once a second so that the running step's duration and the ETA stay
current. When standard output is not a terminal (a pipe, a CI log) nothing is redrawn: one line
is written per phase or step change, then the result.

Exit codes: without --wait, 0 once the migration has ended, however it ended. With --wait:
0 Succeeded; 1 Failed or RolledBack (or it was deleted); 3 --timeout passed, or interrupted,
first. Either way 1 also means the migration cannot be read, and 2 a usage error.`

const watchExamples = `  # The live view
  kubectl nodewright migrate watch web-root-to-rwx -n apps

  # In a script: block until it ends, fail unless it Succeeded, give up after two hours
  kubectl nodewright migrate watch web-root-to-rwx -n apps --wait --timeout 2h`

func newMigrateWatchCommand(f *Factory) *cobra.Command {
	return watchCommand{
		short: "Follow a migration's steps, progress, checksums and result, live", long: watchHelp, example: watchExamples,
		kind: "VMVolumeMigration", noun: "migration", complete: completeMigrations(f),
		watch: func(ctx context.Context, c client.WithWatch, name string, o waitOptions) error {
			namespace, _, err := f.Namespace()
			if err != nil {
				return err
			}
			return watchMigration(ctx, f, c, namespace, name, o)
		},
	}.build(f)
}

// maxSnapshots bounds what the view keeps: the estimate looks back rateWindow only, and the
// steps are in every snapshot.
const maxSnapshots = 512

// watchMigration follows the migration until its phase is final (follow), drawing the live
// view on a terminal or writing the change log elsewhere.
func watchMigration(ctx context.Context, f *Factory, c client.WithWatch, namespace, name string, o waitOptions) error {
	out := f.Streams().Out
	view := newMigrationView(out, f.IsTerminal(out), palette{on: f.Color(out)}, terminalWidth(out))
	target := followTarget[*nwv1.VMVolumeMigration]{kind: "vmvolumemigration", namespace: namespace, name: name,
		newObject: func() *nwv1.VMVolumeMigration { return &nwv1.VMVolumeMigration{} },
		newList:   func() client.ObjectList { return &nwv1.VMVolumeMigrationList{} }}
	// Only a live view shows the progress; a log of changes has a line per step.
	if view.live() {
		if cfg, err := f.RESTConfig(); err == nil {
			if cs, err := kubernetes.NewForConfig(cfg); err == nil {
				target.sample = copyProgress(cs)
			}
		}
	}
	return follow(ctx, f, c, target, view, o)
}

// copyProgress samples a migration's copy progress from its data Job's log, with the user's
// credentials (the operator does not read pods' logs): while a data step runs, the latest
// version with status.progress from the log, when it moved. Without the right to read the
// pod's log, or before the copier wrote a line, there is no news, and the view shows the
// progress the status holds.
func copyProgress(cs kubernetes.Interface) func(context.Context, *nwv1.VMVolumeMigration) (*nwv1.VMVolumeMigration, bool) {
	return func(ctx context.Context, m *nwv1.VMVolumeMigration) (*nwv1.VMVolumeMigration, bool) {
		if !isDataStep(runningStep(m)) || m.Status.JobName == "" {
			return nil, false
		}
		p, err := migration.ReadCopyProgress(ctx, cs, m.Namespace, m.Status.JobName)
		if err != nil || p == nil {
			return nil, false
		}
		progress := migration.Progress(p.BytesDone, p.BytesTotal)
		if progress == nil || m.Status.Progress != nil && *m.Status.Progress == *progress {
			return nil, false
		}
		next := m.DeepCopy()
		next.Status.Progress = progress
		return next, true
	}
}

// migrationView writes the view of a migration: redrawn in place on a terminal (live), or as
// a log of changes.
type migrationView struct {
	terminalView
	snaps []migrationSnapshot
}

func newMigrationView(w io.Writer, live bool, pal palette, width int) *migrationView {
	return &migrationView{terminalView: terminalView{w: w, inPlace: live, pal: pal, width: width}}
}

func (v *migrationView) show(m *nwv1.VMVolumeMigration, read bool, at time.Time) {
	m = m.DeepCopy()
	if n := len(v.snaps); n > 0 && m.Status.Progress == nil {
		// While a data step runs the status holds no progress: the copy's, sampled from its
		// log (copyProgress), stays until the step ends.
		if prev := v.snaps[n-1].Migration; isDataStep(runningStep(m)) && runningStep(m) == runningStep(prev) {
			m.Status.Progress = prev.Status.Progress
		}
	}
	v.observe(migrationSnapshot{At: at, Read: read, Migration: m}, at)
}

func (v *migrationView) observe(s migrationSnapshot, now time.Time) {
	var prev *nwv1.VMVolumeMigration
	if len(v.snaps) > 0 {
		prev = v.snaps[len(v.snaps)-1].Migration
	}
	v.snaps = append(v.snaps, s)
	if len(v.snaps) > maxSnapshots {
		v.snaps = append(v.snaps[:0], v.snaps[len(v.snaps)-maxSnapshots:]...)
	}
	if v.inPlace {
		v.redraw(now)
		return
	}
	v.print(changeLines(prev, s))
	if s.Migration.Status.Phase.Finished() {
		v.print(finalLines(s.Migration))
	}
}

// redraw replaces the last frame with the frame at now.
func (v *migrationView) redraw(now time.Time) {
	if !v.inPlace || len(v.snaps) == 0 {
		return
	}
	v.replace(renderFrame(v.snaps, now))
}
