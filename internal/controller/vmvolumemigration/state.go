package vmvolumemigration

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
)

// planOf is the migration's plan, fixed by its spec. An unset mode is Cold: the controller
// never picks the path that needs more of the backend on its own.
func planOf(m *nwv1.VMVolumeMigration) migration.Plan {
	mode := m.Spec.Mode
	if mode == "" {
		mode = nwv1.MigrationCold
	}
	return migration.Plan{Mode: mode, RetainSource: m.Spec.RetainSource == nil || *m.Spec.RetainSource}
}

// stateOf reads the machine's state back from the status the controller wrote: the phase,
// the step now running, and the forward step that failed.
func stateOf(m *nwv1.VMVolumeMigration) migration.State {
	st := &m.Status
	s := migration.State{Phase: st.Phase}
	if s.Phase == "" {
		s.Phase = nwv1.WorkflowPending
	}
	for _, step := range st.Steps {
		switch {
		case step.State == nwv1.StepRunning:
			s.Step = migration.Step(step.Name)
		case step.State == nwv1.StepFailed && !isRollback(migration.Step(step.Name)):
			s.FailedStep = migration.Step(step.Name)
		case step.State == nwv1.StepFailed && s.Phase == nwv1.WorkflowFailed:
			s.Step = migration.Step(step.Name)
		}
	}
	if s.Phase == nwv1.WorkflowSucceeded || s.Phase == nwv1.WorkflowRolledBack {
		s.Step = ""
	}
	if s.Phase == nwv1.WorkflowPending || s.Phase == nwv1.WorkflowSucceeded {
		s.FailedStep = ""
	}
	return s
}

func isRollback(s migration.Step) bool { return strings.HasPrefix(string(s), "Rollback") }

// transition writes the move from one state to the next into the status: the step that
// finished (or failed), the step that starts, the phase, the times and the Succeeded
// condition.
func transition(m *nwv1.VMVolumeMigration, plan migration.Plan, from, to migration.State, e migration.Event, message string, skipped bool, now metav1.Time) {
	st := &m.Status
	if from.Phase == nwv1.WorkflowPending && to.Phase == nwv1.WorkflowRunning {
		st.Steps = nil
		for _, step := range plan.Forward() {
			st.Steps = append(st.Steps, nwv1.WorkflowStep{Name: string(step), State: nwv1.StepPending})
		}
		st.StartTime = ptr.To(now)
	}
	if from.Step != "" && to != from {
		state := nwv1.StepSucceeded
		switch {
		case e == migration.StepFailed:
			state = nwv1.StepFailed
		case e == migration.Cancel:
			state, message = nwv1.StepFailed, "cancelled: the migration was deleted"
		case skipped:
			state = nwv1.StepSkipped
		}
		finish(st, from.Step, state, message, now)
	}
	if from.Phase == nwv1.WorkflowRunning && (to.Phase == nwv1.WorkflowRollingBack || to.Phase == nwv1.WorkflowRolledBack) {
		// The forward steps that will not run now are skipped; the rollback steps are listed.
		for i := range st.Steps {
			if st.Steps[i].State == nwv1.StepPending {
				st.Steps[i].State = nwv1.StepSkipped
			}
		}
		for _, step := range plan.Rollback(to.FailedStep) {
			if !slices.ContainsFunc(st.Steps, func(s nwv1.WorkflowStep) bool { return s.Name == string(step) }) {
				st.Steps = append(st.Steps, nwv1.WorkflowStep{Name: string(step), State: nwv1.StepPending})
			}
		}
	}
	if to.Step != "" && to.Step != from.Step {
		for i := range st.Steps {
			if st.Steps[i].Name == string(to.Step) {
				st.Steps[i].State = nwv1.StepRunning
				st.Steps[i].StartedAt = ptr.To(now)
				st.Steps[i].Message = ""
			}
		}
	}
	st.Phase = to.Phase
	if to.Phase == nwv1.WorkflowSucceeded || to.Phase == nwv1.WorkflowRolledBack || to.Phase == nwv1.WorkflowFailed {
		st.CompletionTime = ptr.To(now)
	}
	setSucceededCondition(m, to, failureMessage(m, to))
}

// finish closes a step with its outcome.
func finish(st *nwv1.VMVolumeMigrationStatus, step migration.Step, state nwv1.StepState, message string, now metav1.Time) {
	for i := range st.Steps {
		if st.Steps[i].Name == string(step) {
			st.Steps[i].State = state
			st.Steps[i].FinishedAt = ptr.To(now)
			st.Steps[i].Message = truncate(message, 1024)
		}
	}
}

// stepMessage sets the message of the running step (what it waits for), reporting whether it
// changed.
func stepMessage(m *nwv1.VMVolumeMigration, step migration.Step, message string) bool {
	message = truncate(message, 1024)
	for i := range m.Status.Steps {
		if s := &m.Status.Steps[i]; s.Name == string(step) && s.Message != message {
			s.Message = message
			return true
		}
	}
	return false
}

// failureMessage says which step failed and why, for the Succeeded condition.
func failureMessage(m *nwv1.VMVolumeMigration, s migration.State) string {
	if s.FailedStep == "" {
		return ""
	}
	why := ""
	for _, step := range m.Status.Steps {
		if step.Name == string(s.FailedStep) {
			why = step.Message
		}
	}
	msg := fmt.Sprintf("step %s failed: %s", s.FailedStep, why)
	if s.Phase == nwv1.WorkflowFailed && s.Step != "" {
		for _, step := range m.Status.Steps {
			if step.Name == string(s.Step) {
				msg += fmt.Sprintf("; then rollback step %s failed: %s", s.Step, step.Message)
			}
		}
	}
	return msg
}

// setSucceededCondition derives the Succeeded condition from the state: Unknown while the
// migration runs or rolls back, True once it succeeded, False with the failed step as the
// reason once it rolled back or failed.
func setSucceededCondition(m *nwv1.VMVolumeMigration, s migration.State, failure string) {
	c := metav1.Condition{Type: nwv1.ConditionSucceeded, ObservedGeneration: m.Generation}
	switch s.Phase {
	case nwv1.WorkflowRunning:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, nwv1.ReasonInProgress, "step "+string(s.Step)+" is running"
	case nwv1.WorkflowRollingBack:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, nwv1.ReasonRollingBack, failure+"; rolling back"
	case nwv1.WorkflowSucceeded:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, nwv1.ReasonSucceeded, "the VM's volume is the verified target PVC"
	case nwv1.WorkflowRolledBack:
		c.Status, c.Reason = metav1.ConditionFalse, string(s.FailedStep)+"Failed"
		c.Message = failure + "; rolled back: the VM is as it was before the migration"
		if s.FailedStep == "" {
			c.Reason, c.Message = nwv1.ReasonCancelled, "cancelled before it started"
		}
	case nwv1.WorkflowFailed:
		c.Status, c.Reason = metav1.ConditionFalse, string(s.FailedStep)+"Failed"
		c.Message = failure + "; a person must look: see status.steps"
	default:
		return
	}
	c.Message = truncate(c.Message, 32768)
	meta.SetStatusCondition(&m.Status.Conditions, c)
}

// truncate bounds a message of the status or of an Event to n bytes, between characters.
func truncate(s string, n int) string { return audit.Shorten(s, n) }
