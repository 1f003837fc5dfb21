package bondflip

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// NodeState is where the node at position stands, derived from its steps alone
// (docs/decisions/0003): the steps are the state, this is a view of them.
//
//   - Pending: neither its step nor its rollback step has started (a step listed Pending,
//     held Waiting, or skipped unstarted by a rollback has not);
//   - RollingBack: its rollback step has started and not ended;
//   - RolledBack: its rollback step succeeded (or was skipped);
//   - Failed: its rollback step failed, or the workflow failed at its step;
//   - Done: its step succeeded, and its rollback step has not started;
//   - InProgress: otherwise.
func NodeState(st *nwv1.WorkflowStatus, position int) nwv1.NodeFlipState {
	var forward, rollback *nwv1.WorkflowStep
	for i := range st.Steps {
		s := &st.Steps[i]
		k, back, ok := ParseStep(Step(s.Name))
		if !ok || k != position || s.StartedAt == nil {
			continue // listed but not started: nothing of it done
		}
		if back {
			rollback = s
		} else {
			forward = s
		}
	}
	ended := func(s *nwv1.WorkflowStep) bool {
		return s.State == nwv1.StepSucceeded || s.State == nwv1.StepSkipped
	}
	switch {
	case forward == nil && rollback == nil:
		return nwv1.NodeFlipPending
	case rollback != nil && rollback.State == nwv1.StepFailed:
		return nwv1.NodeFlipFailed
	case rollback != nil && ended(rollback):
		return nwv1.NodeFlipRolledBack
	case rollback != nil:
		return nwv1.NodeFlipRollingBack
	case st.Phase == nwv1.WorkflowFailed && forward.State == nwv1.StepFailed:
		return nwv1.NodeFlipFailed
	case ended(forward):
		return nwv1.NodeFlipDone
	}
	return nwv1.NodeFlipInProgress
}

// The record of a node's parts (status.nodes[].parts) is its steps' memory of where they are,
// written in the same status patch as the steps themselves, so that a restarted operator
// carries on with the part the record shows under way. Each part's action is idempotent and
// finds out from the cluster what it already did.

// Part is the record of part in n, nil when it has not begun.
func Part(n *nwv1.NodeFlip, part string) *nwv1.NodeFlipPart {
	for i := range n.Parts {
		if n.Parts[i].Name == part {
			return &n.Parts[i]
		}
	}
	return nil
}

func partEnded(p *nwv1.NodeFlipPart) bool {
	return p != nil && p.State != nwv1.StepRunning && p.State != nwv1.StepPending
}

// Current is the part of parts under way in n: the one begun and not ended, else the first
// not begun; "" when every one has ended. Parts run in order: one ended is never run again.
func Current(n *nwv1.NodeFlip, parts []string) string {
	for _, part := range parts {
		if !partEnded(Part(n, part)) {
			return part
		}
	}
	return ""
}

// Next is the part that follows part in parts, "" after the last.
func Next(parts []string, part string) string {
	if i := slices.Index(parts, part); i >= 0 && i+1 < len(parts) {
		return parts[i+1]
	}
	return ""
}

// Begin records part as under way in n from now, its message msg; a part already begun keeps
// its start (its time limits count from it).
func Begin(n *nwv1.NodeFlip, part, msg string, now metav1.Time) {
	n.Part = part
	if p := Part(n, part); p != nil {
		return
	}
	n.Parts = append(n.Parts, nwv1.NodeFlipPart{Name: part, State: nwv1.StepRunning, StartedAt: ptr.To(now),
		Message: audit.Shorten(msg, workflow.MaxStepMessageBytes)})
}

// Say sets the message of part, under way in n.
func Say(n *nwv1.NodeFlip, part, msg string) {
	if p := Part(n, part); p != nil && p.State == nwv1.StepRunning {
		p.Message = audit.Shorten(msg, workflow.MaxStepMessageBytes)
	}
}

// End records how part ended in n: Succeeded, Skipped, Failed or Cancelled.
func End(n *nwv1.NodeFlip, part string, state nwv1.StepState, msg string, now metav1.Time) {
	Begin(n, part, "", now)
	p := Part(n, part)
	p.State, p.FinishedAt, p.Message = state, ptr.To(now), audit.Shorten(msg, workflow.MaxStepMessageBytes)
}

// FailedPart is the forward part n's step ended in without finishing it: the part that failed,
// or was under way when the flip stopped the step; "" when its parts all ended well, and
// Cordon when none began (nothing was recorded, though a cordon may have been written). A part
// not recorded while a later one is counts as ended well: a record written before the part
// existed (a flip begun by an operator without Cordon and Uncordon) did not run it.
func FailedPart(n *nwv1.NodeFlip) string {
	for i, part := range NodeParts {
		p := Part(n, part)
		if p == nil && slices.ContainsFunc(NodeParts[i+1:], func(later string) bool { return Part(n, later) != nil }) {
			continue
		}
		if p == nil && part == NodeParts[0] {
			return part
		}
		if p == nil || (p.State != nwv1.StepSucceeded && p.State != nwv1.StepSkipped) {
			return part
		}
	}
	return ""
}

// StopForward ends the forward part still under way in n, if any, as state (Cancelled when
// the flip was deleted, Failed when its step failed without the part saying so), with msg:
// the rollback does so when it begins, so that the record shows no part under way that is not.
func StopForward(n *nwv1.NodeFlip, state nwv1.StepState, msg string, now metav1.Time) {
	for _, part := range NodeParts {
		if p := Part(n, part); p != nil && p.State == nwv1.StepRunning {
			End(n, part, state, msg, now)
		}
	}
}

// MaxProbeAddresses is the most peer addresses a node's SetBondMode probes (the API's bound on
// spec.setBondMode.probes.peers).
const MaxProbeAddresses = 16

// ProbeAddresses are the addresses a node's change probes, from each peer's reported
// addresses, in the flip's order: every peer's first address, then the others while there is
// room, so that every peer is probed (a flip of 16 nodes has 15), and no address twice.
func ProbeAddresses(peers [][]string) []string {
	var out []string
	for round := 0; len(out) < MaxProbeAddresses; round++ {
		more := false
		for _, addresses := range peers {
			if round >= len(addresses) || len(out) == MaxProbeAddresses {
				continue
			}
			more = true
			if !slices.Contains(out, addresses[round]) {
				out = append(out, addresses[round])
			}
		}
		if !more {
			break
		}
	}
	return out
}
