package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/api/meta"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// The watch views of the cluster-wide workflows (flips, upgrades) are pure functions of the
// workflow as last seen and the clock: frame draws the live view on a terminal, changes
// writes the log a script reads. Unlike a migration's, they have no rate to compute from
// earlier versions. What holds their next step, and what a person can do about it, they say
// the same way (workflow.Gating).

// gatedKind is a cluster-wide workflow kind as its watch shows it.
type gatedKind[O workflowObject] struct {
	// kind is the kind as messages name it, lower case (bondmodeflipplan); apiKind as the API
	// names it (BondModeFlipPlan); noun as the help names one (flip).
	kind, apiKind, noun string
	newObject           func() O
	newList             func() client.ObjectList
	// frame is the live view of the workflow at now.
	frame func(obj O, now time.Time) []line
	// changes are the log lines for what changed from prev (nil for the first version seen)
	// to cur, seen at.
	changes func(prev, cur O, seen time.Time) []line
}

// watchCommand is the kind's `watch NAME`.
func (k gatedKind[O]) watchCommand(f *Factory, short, long, example string) *cobra.Command {
	return watchCommand{
		short: short, long: long, example: example, kind: k.apiKind, noun: k.noun,
		complete: completeClusterNames(f, k.newList),
		watch: func(ctx context.Context, c client.WithWatch, name string, o waitOptions) error {
			return k.follow(ctx, f, c, name, o)
		},
	}.build(f)
}

// follow follows the workflow name until its phase is final (follow), drawing the live view on
// a terminal or writing the change log elsewhere.
func (k gatedKind[O]) follow(ctx context.Context, f *Factory, c client.WithWatch, name string, o waitOptions) error {
	out := f.Streams().Out
	view := k.view(out, f.IsTerminal(out), palette{on: f.Color(out)}, terminalWidth(out))
	target := followTarget[O]{kind: k.kind, name: name, newObject: k.newObject, newList: k.newList}
	return follow(ctx, f, c, target, view, o)
}

// view is the view of a workflow of the kind written to w: redrawn in place on a terminal
// (live), or a log of changes.
func (k gatedKind[O]) view(w io.Writer, live bool, pal palette, width int) *gatedView[O] {
	return &gatedView[O]{terminalView: terminalView{w: w, inPlace: live, pal: pal, width: width}, kind: k}
}

// gatedView writes the view of a cluster-wide workflow: redrawn in place on a terminal, or as
// a log of changes.
type gatedView[O workflowObject] struct {
	terminalView
	kind gatedKind[O]
	last O
	seen bool
}

func (v *gatedView[O]) show(obj O, _ bool, at time.Time) {
	prev := v.last
	v.last, v.seen = obj.DeepCopyObject().(O), true
	if v.inPlace {
		v.redraw(at)
		return
	}
	v.print(v.kind.changes(prev, v.last, at))
}

func (v *gatedView[O]) redraw(now time.Time) {
	if !v.inPlace || !v.seen {
		return
	}
	v.replace(v.kind.frame(v.last, now))
}

// approveCommand is the command that approves the step a Manual workflow waits on, ref
// naming it as approve takes it (bondflip/NAME); "" when no step waits for a person.
func approveCommand(ref string, g workflow.Gating) string {
	if g.Approvable == "" {
		return ""
	}
	return fmt.Sprintf("kubectl nodewright approve %s --step %s", ref, g.Approvable)
}

// approvedNote says who approved the step waiting, once approved; "" otherwise.
func approvedNote(g workflow.Gating) string {
	if g.Approved == "" {
		return ""
	}
	note := "step " + g.Approved + " is approved"
	if g.ApprovedBy != "" {
		note += " by " + g.ApprovedBy
	}
	return note
}

// heldLines say which gate holds the next step and why, and what a person can do about it.
func heldLines(ref string, g workflow.Gating) []line {
	var out []line
	if held := g.Held; held != nil {
		text := "  ‖ Held: " + held.Reason
		if held.Message != "" {
			text += ": " + oneLine(held.Message)
		}
		out = append(out, line{text: text, style: yellow})
	}
	if cmd := approveCommand(ref, g); cmd != "" {
		out = append(out, line{text: "    Approve it: " + cmd, style: bold})
	} else if note := approvedNote(g); note != "" {
		out = append(out, line{text: "    " + note + "; it starts once its other gates open", style: dim})
	}
	return out
}

// gatingChangeLines are the log lines for a change of what holds the next step, from was
// (the zero Gating before the first version seen) to cur, seen at: the gate that holds it,
// with the command that approves it, and an approval.
func gatingChangeLines(ref string, was, cur workflow.Gating, at string) []line {
	var out []line
	if held := cur.Held; held != nil && (was.Held == nil || held.Reason != was.Held.Reason || held.Message != was.Held.Message) {
		text := fmt.Sprintf("%s held %s", at, held.Reason)
		if held.Message != "" {
			text += ": " + oneLine(held.Message)
		}
		out = append(out, line{text: text, style: yellow})
	}
	if cmd := approveCommand(ref, cur); cmd != "" && approveCommand(ref, was) != cmd {
		out = append(out, line{text: fmt.Sprintf("%s approve it: %s", at, cmd), style: bold})
	}
	if note := approvedNote(cur); note != "" && approvedNote(was) != note {
		out = append(out, line{text: at + " " + note})
	}
	return out
}

// succeededText is what the Succeeded condition adds to a finished workflow's result: the
// reason (the step that failed) unless it succeeded, and the message.
func succeededText(st *nwv1.WorkflowStatus) string {
	c := meta.FindStatusCondition(st.Conditions, nwv1.ConditionSucceeded)
	if c == nil {
		return ""
	}
	text := ""
	if st.Phase != nwv1.WorkflowSucceeded && c.Reason != "" {
		text += ": " + c.Reason
	}
	if c.Message != "" {
		text += ": " + oneLine(c.Message)
	}
	return text
}
