package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
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

// waitOptions are --wait and --timeout.
type waitOptions struct {
	wait    bool
	timeout time.Duration
}

func (o *waitOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Follow the migration until it ends; exit 0 if it Succeeded, 1 if it ended Failed or RolledBack, 3 if --timeout passed first.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "With --wait, give up after this long (e.g. 30m, 2h) with exit code 3; 0 waits for ever.")
}

func (o *waitOptions) check() error {
	if o.timeout < 0 {
		return usageErrorf("--timeout %s: must not be negative", o.timeout)
	}
	if o.timeout > 0 && !o.wait {
		return usageErrorf("--timeout needs --wait")
	}
	return nil
}

func newMigrateWatchCommand(f *Factory) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:               "watch NAME",
		Short:             "Follow a migration's steps, progress, checksums and result, live",
		Long:              watchHelp,
		Example:           watchExamples,
		Args:              exactArgs(1, "the NAME of a VMVolumeMigration"),
		ValidArgsFunction: completeMigrations(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			namespace, _, err := f.Namespace()
			if err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			return watchMigration(cmd.Context(), f, c, namespace, args[0], o)
		},
	}
	o.addFlags(cmd)
	return cmd
}

// maxSnapshots bounds what the view keeps: the estimate looks back rateWindow only, and the
// steps are in every snapshot.
const maxSnapshots = 512

// rewatchDelay spaces out new watches when the API server keeps ending them at once (a
// variable for the tests).
var rewatchDelay = time.Second

// watchMigration follows the migration until its phase is final, drawing the live view on a
// terminal or writing the change log elsewhere, and returns the outcome as an error with the
// exit code (--wait) or nil.
//
// It reads the migration once, then watches it from that resourceVersion: every status
// the API server stores after it arrives as an event. A watch the API server ends (they
// time out) is started again from the last version seen; one whose version expired reads the
// object afresh first.
func watchMigration(ctx context.Context, f *Factory, c client.WithWatch, namespace, name string, o waitOptions) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	out := f.Streams().Out
	view := newMigrationView(out, f.IsTerminal(out), palette{on: f.Color(out)}, terminalWidth(out))
	notFinished := func() error {
		why := "interrupted"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = "timed out after " + o.timeout.String()
		}
		return &ExitError{Code: ExitNotFinished, Err: fmt.Errorf("%s waiting for vmvolumemigration/%s: phase %s%s", why, name, view.phase(), view.stepNote())}
	}
	// observe shows a version of the migration, and says whether it is final. read says it
	// was read rather than delivered by a watch event: when its values were written is not
	// known, so the rate does not start from it.
	var version string
	observe := func(m *nwv1.VMVolumeMigration, read bool) bool {
		version = m.ResourceVersion
		view.observe(migrationSnapshot{At: f.Now(), Read: read, Migration: m.DeepCopy()}, f.Now())
		return m.Status.Phase.Finished()
	}
	read := func() (*nwv1.VMVolumeMigration, error) {
		m := &nwv1.VMVolumeMigration{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m); err != nil {
			if ctx.Err() != nil {
				return nil, notFinished()
			}
			return nil, apiError(err, "vmvolumemigration", name)
		}
		return m, nil
	}

	m, err := read()
	if err != nil {
		return err
	}
	if observe(m, true) {
		return outcome(m, o.wait)
	}
	var tick <-chan time.Time
	if view.live {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	var w watch.Interface
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	var started time.Time
	for {
		if w == nil {
			started = time.Now()
			w, err = c.Watch(ctx, &nwv1.VMVolumeMigrationList{}, client.InNamespace(namespace),
				client.MatchingFields{"metadata.name": name},
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: version, AllowWatchBookmarks: true}})
			if err != nil {
				if ctx.Err() != nil {
					return notFinished()
				}
				return apiError(err, "vmvolumemigration", name)
			}
		}
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				w.Stop()
				w = nil
				if time.Since(started) < rewatchDelay {
					select {
					case <-ctx.Done():
						return notFinished()
					case <-time.After(rewatchDelay):
					}
				}
				continue
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if m, ok := ev.Object.(*nwv1.VMVolumeMigration); ok && observe(m, false) {
					return outcome(m, o.wait)
				}
			case watch.Bookmark:
				if m, ok := ev.Object.(*nwv1.VMVolumeMigration); ok {
					version = m.ResourceVersion
				}
			case watch.Deleted:
				return fmt.Errorf("vmvolumemigration/%s was deleted before it finished (phase %s)", name, view.phase())
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
					return apiError(err, "vmvolumemigration", name)
				}
				// Too old to resume from: read it afresh and watch from there.
				w.Stop()
				w = nil
				m, err := read()
				if err != nil {
					return err
				}
				if m.ResourceVersion != version && observe(m, true) {
					return outcome(m, o.wait)
				}
			}
		case <-tick:
			view.redraw(f.Now())
		case <-ctx.Done():
			return notFinished()
		}
	}
}

// outcome is how the watch ends for a final phase: with --wait, exit code 1 unless it
// Succeeded (the result is already printed).
func outcome(m *nwv1.VMVolumeMigration, wait bool) error {
	if !wait || m.Status.Phase == nwv1.WorkflowSucceeded {
		return nil
	}
	return &ExitError{Code: ExitFailed, Silent: true, Err: fmt.Errorf("vmvolumemigration/%s ended %s", m.Name, m.Status.Phase)}
}

// migrationView writes the view of a migration: redrawn in place on a terminal (live), or as
// a log of changes.
type migrationView struct {
	w     io.Writer
	live  bool
	pal   palette
	width int
	snaps []migrationSnapshot
	drawn int // lines of the last frame, to move back over
}

func newMigrationView(w io.Writer, live bool, pal palette, width int) *migrationView {
	return &migrationView{w: w, live: live, pal: pal, width: width}
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
	if v.live {
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
	if !v.live || len(v.snaps) == 0 {
		return
	}
	if v.drawn > 0 {
		fmt.Fprintf(v.w, "\x1b[%dA\x1b[J", v.drawn)
	}
	frame := renderFrame(v.snaps, now)
	v.print(frame)
	v.drawn = len(frame)
}

func (v *migrationView) print(lines []line) {
	var b strings.Builder
	for _, l := range lines {
		text := l.text
		if v.live && v.width > 1 && width(text) >= v.width {
			// A wrapped line would throw off the redraw's count.
			text = string([]rune(text)[:v.width-2]) + "…"
		}
		b.WriteString(v.pal.paint(l.style, text))
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(v.w, b.String())
}

func (v *migrationView) phase() nwv1.WorkflowPhase {
	if len(v.snaps) == 0 {
		return nwv1.WorkflowPending
	}
	return phaseOf(v.snaps[len(v.snaps)-1].Migration)
}

func (v *migrationView) stepNote() string {
	if len(v.snaps) == 0 {
		return ""
	}
	if s := runningStep(v.snaps[len(v.snaps)-1].Migration); s != "" {
		return ", step " + s
	}
	return ""
}
