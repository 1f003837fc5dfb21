package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spf13/cobra"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// waitOptions are --wait and --timeout.
type waitOptions struct {
	wait    bool
	timeout time.Duration
}

// addFlags registers --wait and --timeout; noun is what they wait for ("migration").
func (o *waitOptions) addFlags(cmd *cobra.Command, noun string) {
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Follow the "+noun+" until it ends; exit 0 if it Succeeded, 1 if it ended Failed or RolledBack, 3 if --timeout passed first.")
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

// createAndFollow creates obj (kind as messages name it: bondmodeflipplan), says what it
// created (printCreated: the line with describe's words, or the object as -o output asks),
// and with --wait follows it to its end with follow. noun names it in the messages ("flip").
func createAndFollow(ctx context.Context, f *Factory, obj client.Object, kind, noun, output string, wait waitOptions,
	describe func() string, follow func(context.Context, client.WithWatch) error) error {
	if err := wait.check(); err != nil {
		return err
	}
	if wait.wait && output != outputTable {
		return usageErrorf("--wait writes the %s's progress; it cannot be combined with --output %s", noun, output)
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.Create(ctx, obj); err != nil {
		return apiError(err, kind, obj.GetName())
	}
	if err := printCreated(f.Streams().Out, output, kind, obj, describe()); err != nil || !wait.wait {
		return err
	}
	return follow(ctx, c)
}

// watchCommand is the `watch NAME` subcommand of a workflow kind.
type watchCommand struct {
	short, long, example string
	// kind names the workflow kind in the usage error; noun in the flags' help ("migration").
	kind, noun string
	complete   cobra.CompletionFunc
	// watch follows the workflow name with c.
	watch func(ctx context.Context, c client.WithWatch, name string, o waitOptions) error
}

func (w watchCommand) build(f *Factory) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:               "watch NAME",
		Short:             w.short,
		Long:              w.long,
		Example:           w.example,
		Args:              exactArgs(1, "the NAME of a "+w.kind),
		ValidArgsFunction: w.complete,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			return w.watch(cmd.Context(), c, args[0], o)
		},
	}
	o.addFlags(cmd, w.noun)
	return cmd
}

// workflowObject is a workflow a watch can follow: its status embeds the shared
// WorkflowStatus.
type workflowObject interface {
	client.Object
	GetWorkflowStatus() *nwv1.WorkflowStatus
}

// followTarget names the workflow a watch follows.
type followTarget[O workflowObject] struct {
	// kind is the kind as messages name it, lower case: vmvolumemigration.
	kind string
	// namespace is "" for a cluster-scoped kind.
	namespace, name string
	newObject       func() O
	newList         func() client.ObjectList
	// sample, when set, is asked every sampleInterval while the view is live for what the
	// workflow's status does not hold (a copy's progress, from its pod's log): given the
	// latest version seen, it returns that version with the news, and whether there is any.
	sample func(ctx context.Context, latest O) (O, bool)
}

// sampleInterval is how often a live view samples what the status does not hold.
const sampleInterval = 2 * time.Second

func (t followTarget[O]) object() string { return t.kind + "/" + t.name }

// workflowView is what a watch shows the workflow in.
type workflowView[O workflowObject] interface {
	// show draws or logs a version of the workflow that arrived at at; read says it was read
	// rather than delivered by a watch event, so when its values were written is not known.
	show(obj O, read bool, at time.Time)
	// redraw draws the live view again at now (durations move on); nothing when not live.
	redraw(now time.Time)
	// live reports whether the view is redrawn in place, on a terminal.
	live() bool
}

// rewatchDelay spaces out new watches when the API server keeps ending them at once (a
// variable for the tests).
var rewatchDelay = time.Second

// follow shows the workflow in view until its phase is final, and returns the outcome as an
// error with the exit code (--wait) or nil.
//
// It reads the workflow once, then watches it from that resourceVersion: every status the
// API server stores after it arrives as an event. A watch the API server ends (they time
// out) is started again from the last version seen; one whose version expired reads the
// object afresh first.
func follow[O workflowObject](ctx context.Context, f *Factory, c client.WithWatch, target followTarget[O], view workflowView[O], o waitOptions) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	var last *nwv1.WorkflowStatus
	notFinished := func() error {
		why := "interrupted"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = "timed out after " + o.timeout.String()
		}
		return &ExitError{Code: ExitNotFinished, Err: fmt.Errorf("%s waiting for %s: phase %s%s", why, target.object(), statusPhase(last), stepNote(last))}
	}
	var version string
	var latest O
	// observe shows a version of the workflow, and says whether it is final.
	observe := func(obj O, read bool) bool {
		latest = obj
		version = obj.GetResourceVersion()
		last = obj.GetWorkflowStatus().DeepCopy()
		view.show(obj, read, f.Now())
		return obj.GetWorkflowStatus().Phase.Finished()
	}
	get := func() (O, error) {
		obj := target.newObject()
		if err := c.Get(ctx, client.ObjectKey{Namespace: target.namespace, Name: target.name}, obj); err != nil {
			var none O
			if ctx.Err() != nil {
				return none, notFinished()
			}
			return none, apiError(err, target.kind, target.name)
		}
		return obj, nil
	}

	obj, err := get()
	if err != nil {
		return err
	}
	if observe(obj, true) {
		return outcome(target, obj, o.wait)
	}
	var tick, sampleTick <-chan time.Time
	if view.live() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
		if target.sample != nil {
			s := time.NewTicker(sampleInterval)
			defer s.Stop()
			sampleTick = s.C
		}
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
			opts := []client.ListOption{client.MatchingFields{"metadata.name": target.name},
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: version, AllowWatchBookmarks: true}}}
			if target.namespace != "" {
				opts = append(opts, client.InNamespace(target.namespace))
			}
			w, err = c.Watch(ctx, target.newList(), opts...)
			if err != nil {
				if ctx.Err() != nil {
					return notFinished()
				}
				return apiError(err, target.kind, target.name)
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
				if obj, ok := ev.Object.(O); ok && observe(obj, false) {
					return outcome(target, obj, o.wait)
				}
			case watch.Bookmark:
				if obj, ok := ev.Object.(O); ok {
					version = obj.GetResourceVersion()
				}
			case watch.Deleted:
				return fmt.Errorf("%s was deleted before it finished (phase %s)", target.object(), statusPhase(last))
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
					return apiError(err, target.kind, target.name)
				}
				// Too old to resume from: read it afresh and watch from there.
				w.Stop()
				w = nil
				obj, err := get()
				if err != nil {
					return err
				}
				if obj.GetResourceVersion() != version && observe(obj, true) {
					return outcome(target, obj, o.wait)
				}
			}
		case <-tick:
			view.redraw(f.Now())
		case <-sampleTick:
			// Bounded, so that a slow read of the log holds up neither the redraws nor the
			// watch's events for longer than an interval.
			sctx, cancel := context.WithTimeout(ctx, sampleInterval)
			obj, news := target.sample(sctx, latest)
			cancel()
			if news {
				latest = obj
				view.show(obj, false, f.Now())
			}
		case <-ctx.Done():
			return notFinished()
		}
	}
}

// outcome is how the watch ends for a final phase: with --wait, exit code 1 unless it
// Succeeded (the result is already printed).
func outcome[O workflowObject](target followTarget[O], obj O, wait bool) error {
	phase := obj.GetWorkflowStatus().Phase
	if !wait || phase == nwv1.WorkflowSucceeded {
		return nil
	}
	return &ExitError{Code: ExitFailed, Silent: true, Err: fmt.Errorf("%s ended %s", target.object(), phase)}
}

// statusPhase is the workflow's phase, Pending until its controller wrote one (or when
// nothing was read yet).
func statusPhase(st *nwv1.WorkflowStatus) nwv1.WorkflowPhase {
	if st == nil || st.Phase == "" {
		return nwv1.WorkflowPending
	}
	return st.Phase
}

// currentStep is the step now running, else the one a gate holds (Waiting); "" for none.
func currentStep(st *nwv1.WorkflowStatus) (nwv1.WorkflowStep, bool) {
	if st == nil {
		return nwv1.WorkflowStep{}, false
	}
	for _, state := range []nwv1.StepState{nwv1.StepRunning, nwv1.StepWaiting} {
		for _, s := range st.Steps {
			if s.State == state {
				return s, true
			}
		}
	}
	return nwv1.WorkflowStep{}, false
}

// stepNote says which step the workflow had reached, for a wait that ended early.
func stepNote(st *nwv1.WorkflowStatus) string {
	s, ok := currentStep(st)
	switch {
	case !ok:
		return ""
	case s.State == nwv1.StepWaiting:
		return ", step " + s.Name + " waiting"
	}
	return ", step " + s.Name
}

// terminalView writes a view's lines: on a terminal each frame replaces the last (inPlace),
// elsewhere lines are only appended.
type terminalView struct {
	w       io.Writer
	inPlace bool
	pal     palette
	width   int
	drawn   int // lines of the last frame, to move back over
}

func (v *terminalView) live() bool { return v.inPlace }

// replace draws frame over the last one.
func (v *terminalView) replace(frame []line) {
	if v.drawn > 0 {
		fmt.Fprintf(v.w, "\x1b[%dA\x1b[J", v.drawn)
	}
	v.print(frame)
	v.drawn = len(frame)
}

func (v *terminalView) print(lines []line) {
	var b strings.Builder
	for _, l := range lines {
		text := l.text
		if v.inPlace && v.width > 1 && width(text) >= v.width {
			// A wrapped line would throw off the redraw's count.
			text = string([]rune(text)[:v.width-2]) + "…"
		}
		b.WriteString(v.pal.paint(l.style, text))
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(v.w, b.String())
}
