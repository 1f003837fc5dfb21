package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/selfservice"
)

const requestWatchHelp = `Follow a VMOperationRequest until it ends: a line each time its status changes, with its
phase, the step under way or last done, its place in the namespace's queue, its approval (and
who gave it), and the controller's message, which says what holds it while it waits (an
administrator's approval, the maintenance window, the rate, the queue, node work) and what it
does while it runs; then what it made (the snapshot, the restore, the migration) and the
result. While it waits for an administrator, the command that approves it is printed once.

The lines come from a watch on the object (a watch the API server ends is started again, and
the request read again when its version expired); they are the same on a terminal as in a
pipe or a CI log.

Exit codes: without --wait, 0 once the request has ended, however it ended. With --wait:
0 Succeeded; 1 Failed or Refused (or it was deleted); 3 --timeout passed, or interrupted,
first. Either way 1 also means the request cannot be read, and 2 a usage error.`

const requestWatchExamples = `  kubectl nodewright request watch web-restore-x7k2p -n team-a

  # In a script: block until it ends, fail unless it Succeeded, give up after two hours
  kubectl nodewright request watch web-restore-x7k2p -n team-a --wait --timeout 2h`

func newRequestWatchCommand(f *Factory) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:               "watch NAME",
		Short:             "Follow a request: phase, step, queue, approval, what holds it, result",
		Long:              requestWatchHelp,
		Example:           requestWatchExamples,
		Args:              exactArgs(1, "the NAME of a VMOperationRequest"),
		ValidArgsFunction: completeRequests(f),
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
			return watchRequest(cmd.Context(), f, c, namespace, args[0], o)
		},
	}
	addRequestWaitFlags(cmd, &o)
	return cmd
}

// watchRequest writes a line each time the request's status changes, until its phase is
// final, and returns the outcome as an error with the exit code (--wait) or nil.
//
// It reads the request once, for an error that says why it cannot be followed, then leaves
// the watching to client-go's UntilWithSync (as kubectl wait does): a watch the API server ends
// is started again, and one whose version expired lists the request again.
func watchRequest(ctx context.Context, f *Factory, c client.WithWatch, namespace, name string, o waitOptions) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	object := requestKind + "/" + name
	var last *nwv1.VMOperationRequest
	notFinished := func() error {
		why := "interrupted"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = "timed out after " + o.timeout.String()
		}
		return &ExitError{Code: ExitNotFinished, Err: fmt.Errorf("%s waiting for %s: phase %s", why, object, requestPhase(last))}
	}
	first := &nwv1.VMOperationRequest{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, first); err != nil {
		if ctx.Err() != nil {
			return notFinished()
		}
		return apiError(err, requestKind, name)
	}
	out := f.Streams().Out
	log := &requestLog{terminalView: terminalView{w: out, pal: palette{on: f.Color(out)}}}
	last = first
	log.show(first, f.Now())
	if !selfservice.Unfinished(requestPhase(first)) {
		return requestOutcome(object, first, o.wait)
	}
	watchCtx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	_, err := watchtools.UntilWithSync(watchCtx, requestListWatch(c, namespace, name, refused), &nwv1.VMOperationRequest{}, nil,
		func(ev watch.Event) (bool, error) {
			r, ok := ev.Object.(*nwv1.VMOperationRequest)
			switch {
			case ev.Type == watch.Deleted, ok && r.UID != first.UID:
				return false, fmt.Errorf("%s was deleted before it finished (phase %s)", object, requestPhase(last))
			case !ok:
				return false, nil
			}
			last = r
			log.show(r, f.Now())
			return !selfservice.Unfinished(requestPhase(r)), nil
		})
	switch {
	case err == nil:
		return requestOutcome(object, last, o.wait)
	case ctx.Err() != nil:
		return notFinished()
	case watchCtx.Err() != nil:
		return context.Cause(watchCtx)
	}
	return err
}

// requestListWatch lists and watches the one request namespace/name. The API server's refusal
// to list or watch (the user may get the request but not list it, say) ends the watch with
// refused, as an error that says so, rather than leaving client-go to try again for ever.
func requestListWatch(c client.WithWatch, namespace, name string, refused context.CancelCauseFunc) cache.ListerWatcher {
	selected := func(opts metav1.ListOptions) []client.ListOption {
		return []client.ListOption{client.InNamespace(namespace), &client.ListOptions{Raw: &opts}, client.MatchingFields{"metadata.name": name}}
	}
	isRefusal := func(err error) bool {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			refused(apiError(err, "vmoperationrequests", ""))
			return true
		}
		return false
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &nwv1.VMOperationRequestList{}
			if err := c.List(ctx, list, selected(opts)...); err != nil && !isRefusal(err) {
				return nil, err
			}
			return list, nil // refused: the watch is ending; nothing for client-go to log
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := c.Watch(ctx, &nwv1.VMOperationRequestList{}, selected(opts)...)
			if err != nil && isRefusal(err) {
				return watch.NewEmptyWatch(), nil
			}
			return w, err
		},
		DisableChunking: true,
	}
}

// requestOutcome is how the watch ends for a final phase: with --wait, exit code 1 unless it
// Succeeded (the result is already printed).
func requestOutcome(object string, r *nwv1.VMOperationRequest, wait bool) error {
	phase := requestPhase(r)
	if !wait || phase == nwv1.VMOperationSucceeded {
		return nil
	}
	return &ExitError{Code: ExitFailed, Silent: true, Err: fmt.Errorf("%s ended %s", object, phase)}
}

// requestLog writes the log of a request: its header once, then a line for each state that
// differs from the last one written, then the result.
type requestLog struct {
	terminalView
	// said is the last state written, without its time; "" before the first.
	said string
	// hinted: the command that approves it was written.
	hinted bool
}

func (l *requestLog) show(r *nwv1.VMOperationRequest, at time.Time) {
	var lines []line
	if l.said == "" {
		lines = append(lines, line{text: fmt.Sprintf("%s %s/%s: %s", requestKind, r.Namespace, r.Name, describeRequest(r)), style: bold})
		if r.Spec.Reason != "" {
			lines = append(lines, line{text: "Reason: " + shown(oneLine(r.Spec.Reason))})
		}
	}
	phase := requestPhase(r)
	ended := !selfservice.Unfinished(phase)
	if state := requestState(r, ended); state != l.said {
		l.said = state
		lines = append(lines, line{text: timestamp(at) + " " + state, style: requestPhaseStyle(phase)})
	}
	if r.Status.Approval == nwv1.ApprovalRequired && !ended && !l.hinted {
		l.hinted = true
		lines = append(lines, line{text: fmt.Sprintf("  An administrator approves it with: kubectl nodewright request approve %s -n %s", r.Name, r.Namespace), style: yellow})
	}
	if ended {
		lines = append(lines, requestResult(r)...)
	}
	l.print(lines)
}

// requestState is the request's state in one line: phase, step, queue and approval, and, until
// it ends, the controller's message (the result says it then).
func requestState(r *nwv1.VMOperationRequest, ended bool) string {
	st := r.Status
	parts := []string{"phase " + string(requestPhase(r))}
	if st.Step != "" {
		parts = append(parts, "step "+shown(st.Step))
	}
	if st.QueuePosition > 0 {
		parts = append(parts, fmt.Sprintf("queue %d", st.QueuePosition))
	}
	if st.Approval != "" {
		approval := "approval " + shown(st.Approval)
		if st.ApprovedBy != "" {
			approval += " by " + shown(st.ApprovedBy)
		}
		parts = append(parts, approval)
	}
	text := strings.Join(parts, ", ")
	if st.Message != "" && !ended {
		text += ": " + shown(oneLine(st.Message))
	}
	return text
}

// requestResult says what an ended request made, and how it ended.
func requestResult(r *nwv1.VMOperationRequest) []line {
	st := r.Status
	var out []line
	for _, made := range []struct{ kind, name string }{
		{"VirtualMachineSnapshot", st.Snapshot}, {"VirtualMachineRestore", st.Restore}, {"VMVolumeMigration", st.Migration},
	} {
		if made.name != "" {
			out = append(out, line{text: fmt.Sprintf("Made: %s %s", made.kind, shown(made.name))})
		}
	}
	phase := requestPhase(r)
	text := "Result: " + string(phase)
	if st.StartTime != nil && st.CompletionTime != nil {
		text += " after " + shortDuration(st.CompletionTime.Sub(st.StartTime.Time))
	}
	if st.Message != "" {
		text += ": " + shown(oneLine(st.Message))
	}
	return append(out, line{text: text, style: requestPhaseStyle(phase)})
}
