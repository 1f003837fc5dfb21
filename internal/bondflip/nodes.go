package bondflip

import (
	"slices"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// NodeState is where the node at position stands, derived from its steps alone
// (docs/decisions/0003): the steps are the state, this is a view of them.
//
//   - Pending: none of its steps has started (a step listed Pending, held Waiting, or skipped
//     unstarted by a rollback has not);
//   - RollingBack: one of its rollback steps has started and the last has not ended;
//   - RolledBack: its rollback steps ended, the last (RollbackVMs) succeeded or skipped;
//   - Failed: one of its rollback steps failed, or the workflow failed at one of its steps;
//   - Done: its six forward steps succeeded or were skipped, and no rollback step of it has
//     started;
//   - InProgress: otherwise.
func NodeState(st *nwv1.WorkflowStatus, position int) nwv1.NodeFlipState {
	var forward, rollback []nwv1.WorkflowStep
	for _, s := range st.Steps {
		k, part, ok := ParseStep(Step(s.Name))
		if !ok || k != position || s.StartedAt == nil {
			continue // listed but not started: nothing of it done
		}
		if slices.Contains(NodeParts, part) {
			forward = append(forward, s)
		} else {
			rollback = append(rollback, s)
		}
	}
	ended := func(s nwv1.WorkflowStep) bool {
		return s.State == nwv1.StepSucceeded || s.State == nwv1.StepSkipped
	}
	switch {
	case len(forward) == 0 && len(rollback) == 0:
		return nwv1.NodeFlipPending
	case slices.ContainsFunc(rollback, func(s nwv1.WorkflowStep) bool { return s.State == nwv1.StepFailed }):
		return nwv1.NodeFlipFailed
	case len(rollback) > 0:
		last := rollback[len(rollback)-1]
		if _, part, _ := ParseStep(Step(last.Name)); part == RollbackVMs && ended(last) {
			return nwv1.NodeFlipRolledBack
		}
		return nwv1.NodeFlipRollingBack
	case st.Phase == nwv1.WorkflowFailed && slices.ContainsFunc(forward, func(s nwv1.WorkflowStep) bool { return s.State == nwv1.StepFailed }):
		return nwv1.NodeFlipFailed
	case len(forward) == len(NodeParts) && !slices.ContainsFunc(forward, func(s nwv1.WorkflowStep) bool { return !ended(s) }):
		return nwv1.NodeFlipDone
	}
	return nwv1.NodeFlipInProgress
}
