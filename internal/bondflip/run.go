package bondflip

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// RunParts carries out a node's step of parts, recorded in n (status.nodes[k-1]), which the
// engine writes in its status patch with the step's own state: the part n shows under way,
// or the first not begun, through act. A part that waits makes the step wait, saying why;
// one that ends is recorded and the next begun in the same patch, its action run on the next
// reconcile; the step fails with the first part that fails and succeeds when its last part
// did.
func RunParts(n *nwv1.NodeFlip, parts []string, now metav1.Time, act func(part string) (engine.Outcome, error)) (engine.Outcome, error) {
	part := Current(n, parts)
	if part == "" {
		return engine.Succeeded("%s", summary(n, parts)), nil
	}
	Begin(n, part, "", now)
	out, err := act(part)
	if err != nil {
		return out, err
	}
	switch out.Event {
	case workflow.StepFailed:
		End(n, part, nwv1.StepFailed, out.Message, now)
		out.Message = part + ": " + out.Message
		return out, nil
	case workflow.StepSucceeded:
		state := nwv1.StepSucceeded
		if out.Skipped {
			state = nwv1.StepSkipped
		}
		End(n, part, state, out.Message, now)
		next := Next(parts, part)
		if next == "" {
			return engine.Succeeded("%s", summary(n, parts)), nil
		}
		Begin(n, next, "", now)
		return engine.Waiting(time.Millisecond, "%s %s: %s; %s next", part, state, out.Message, next), nil
	}
	Say(n, part, out.Message)
	out.Message = part + ": " + out.Message
	return out, nil
}

// StopForwardOf ends the part of node k's forward step still recorded under way in n when its
// rollback begins, as the status st says the step ended: cancelled by the flip's deletion, or
// failed by the engine (a write the API server refused) while the part ran.
func StopForwardOf(st *nwv1.WorkflowStatus, k int, n *nwv1.NodeFlip, now metav1.Time) {
	for _, s := range st.Steps {
		if s.Name != string(NodeStep(k)) {
			continue
		}
		state := nwv1.StepFailed
		if s.State == nwv1.StepCancelled {
			state = nwv1.StepCancelled
		}
		StopForward(n, state, s.Message, now)
	}
}

// summary is the message of a node's step that ended well: each part's outcome, the last
// part's message.
func summary(n *nwv1.NodeFlip, parts []string) string {
	var done []string
	last := ""
	for _, part := range parts {
		if p := Part(n, part); p != nil {
			done = append(done, part+" "+string(p.State))
			last = p.Message
		}
	}
	return strings.Join(done, ", ") + ": " + last
}
