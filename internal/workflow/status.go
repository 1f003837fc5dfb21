package workflow

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// The status is the workflow's memory: a controller reads the machine's state back from it
// (StateOf) on every reconcile, and writes each transition into it (Transition) in the same
// patch as anything else it learned. Nothing else is kept, so a restarted operator resumes
// where the status says, and the audit trail is rebuilt from it (Records).

// The most a status keeps of a step's message and of the Succeeded condition's message.
const (
	MaxStepMessageBytes      = 1024
	MaxConditionMessageBytes = 32768
)

// Kind tells the shared code what to call a workflow kind and what its outcomes mean, in
// words a person reads on the Succeeded condition.
type Kind struct {
	// Name is the kind, as audit records name their subject's kind.
	Name string
	// AuditAction is the action of its transitions' audit records.
	AuditAction string
	// Succeeded says what holds once the workflow succeeded.
	Succeeded string
	// RolledBack says what holds once it rolled back.
	RolledBack string
	// RolledBackAs, when set, says what holds once it rolled back where the status shows that
	// RolledBack does not (the migration's VM was deleted meanwhile, say); "" means RolledBack.
	RolledBackAs func(st *nwv1.WorkflowStatus) string
	// Cancelled is the message of the step a cancellation stopped (who cancelled, how).
	Cancelled string
	// Noun is what Events call one ("migration").
	Noun string
}

// StateOf reads the machine's state back from the status: the phase, the step now running,
// and the forward step whose failure or cancellation started the rollback (or, in Failed,
// the rollback step that failed too).
func StateOf(st *nwv1.WorkflowStatus, p Plan) State {
	s := State{Phase: st.Phase}
	if s.Phase == "" {
		s.Phase = nwv1.WorkflowPending
	}
	forward := p.Forward()
	for _, step := range st.Steps {
		name := Step(step.Name)
		isForward := slices.Contains(forward, name)
		switch {
		case step.State == nwv1.StepRunning || step.State == nwv1.StepWaiting:
			s.Step = name
		case (step.State == nwv1.StepFailed || step.State == nwv1.StepCancelled) && isForward:
			s.FailedStep = name
		case step.State == nwv1.StepFailed && s.Phase == nwv1.WorkflowFailed:
			s.Step = name
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

// Transition writes the move from one state to the next into the status: the step that
// finished (succeeded, was skipped, failed or was cancelled), the step that starts, the
// phase, the times and the Succeeded condition (of the object's generation).
func Transition(st *nwv1.WorkflowStatus, p Plan, k Kind, generation int64, from, to State, e Event, message string, skipped bool, now metav1.Time) {
	if from.Phase == nwv1.WorkflowPending && to.Phase == nwv1.WorkflowRunning {
		st.Steps = nil
		for _, step := range p.Forward() {
			st.Steps = append(st.Steps, nwv1.WorkflowStep{Name: string(step), State: nwv1.StepPending})
		}
		st.StartTime = ptr.To(now)
	}
	if from.Step != "" && to != from {
		state := nwv1.StepSucceeded
		switch {
		case e == StepFailed:
			state = nwv1.StepFailed
		case e == Cancel:
			state, message = nwv1.StepCancelled, k.Cancelled
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
		for _, step := range p.Rollback(to.FailedStep) {
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
				if to.Phase == nwv1.WorkflowRunning && GatesOf(p, to.Step) != 0 {
					// It starts once its gates let it (Admit).
					st.Steps[i].State, st.Steps[i].StartedAt = nwv1.StepWaiting, nil
				}
			}
		}
	}
	st.Phase = to.Phase
	if to.Phase.Finished() {
		st.CompletionTime = ptr.To(now)
	}
	SetSucceededCondition(st, k, generation, to)
}

// Admit starts a Waiting step whose gates all let it: it runs from now, approved by
// approvedBy when a person approved it. It reports whether the status changed.
func Admit(st *nwv1.WorkflowStatus, step Step, approvedBy string, now metav1.Time) bool {
	for i := range st.Steps {
		if s := &st.Steps[i]; s.Name == string(step) && s.State == nwv1.StepWaiting {
			s.State, s.StartedAt, s.Message = nwv1.StepRunning, ptr.To(now), ""
			s.ApprovedBy = audit.Shorten(approvedBy, MaxStepMessageBytes)
			st.NextWindowStart = nil
			return true
		}
	}
	return false
}

// Waiting reports whether the status holds step at its gates: listed, not yet started.
func Waiting(st *nwv1.WorkflowStatus, step Step) bool {
	return stepState(st, step) == nwv1.StepWaiting
}

// finish closes a step with its outcome.
func finish(st *nwv1.WorkflowStatus, step Step, state nwv1.StepState, message string, now metav1.Time) {
	for i := range st.Steps {
		if st.Steps[i].Name == string(step) {
			st.Steps[i].State = state
			st.Steps[i].FinishedAt = ptr.To(now)
			st.Steps[i].Message = audit.Shorten(message, MaxStepMessageBytes)
		}
	}
}

// StepMessage sets the message of the running step (what it waits for), reporting whether it
// changed.
func StepMessage(st *nwv1.WorkflowStatus, step Step, message string) bool {
	message = audit.Shorten(message, MaxStepMessageBytes)
	for i := range st.Steps {
		if s := &st.Steps[i]; s.Name == string(step) && s.Message != message {
			s.Message = message
			return true
		}
	}
	return false
}

// StepStarted is when the step began, and whether the status says.
func StepStarted(st *nwv1.WorkflowStatus, step Step) (metav1.Time, bool) {
	for _, s := range st.Steps {
		if s.Name == string(step) && s.StartedAt != nil {
			return *s.StartedAt, true
		}
	}
	return metav1.Time{}, false
}

// FailureMessage says which step failed (or was cancelled) and why, and which rollback step
// failed after it; empty when no step failed.
func FailureMessage(st *nwv1.WorkflowStatus, s State) string {
	if s.FailedStep == "" {
		return ""
	}
	verb, why := "failed", ""
	for _, step := range st.Steps {
		if step.Name == string(s.FailedStep) {
			why = step.Message
			if step.State == nwv1.StepCancelled {
				verb = "was cancelled"
			}
		}
	}
	msg := fmt.Sprintf("step %s %s: %s", s.FailedStep, verb, why)
	if s.Phase == nwv1.WorkflowFailed && s.Step != "" {
		for _, step := range st.Steps {
			if step.Name == string(s.Step) {
				msg += fmt.Sprintf("; then rollback step %s failed: %s", s.Step, step.Message)
			}
		}
	}
	return msg
}

// SetSucceededCondition derives the Succeeded condition from the state: Unknown while the
// workflow runs or rolls back, True once it succeeded, False once it rolled back or failed,
// with the failed step as the reason (<Step>Failed); a workflow that a cancellation rolled
// back has the reason Cancelled, but one whose rollback then failed names its step, since a
// person must look.
func SetSucceededCondition(st *nwv1.WorkflowStatus, k Kind, generation int64, s State) {
	failure := FailureMessage(st, s)
	c := metav1.Condition{Type: nwv1.ConditionSucceeded, ObservedGeneration: generation}
	failedReason := string(s.FailedStep) + "Failed"
	cancelled := stepState(st, s.FailedStep) == nwv1.StepCancelled
	switch s.Phase {
	case nwv1.WorkflowRunning:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, nwv1.ReasonInProgress, "step "+string(s.Step)+" is running"
		if stepState(st, s.Step) == nwv1.StepWaiting {
			c.Message = "step " + string(s.Step) + " waits for its gates (see the Held condition)"
		}
	case nwv1.WorkflowRollingBack:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, nwv1.ReasonRollingBack, failure+"; rolling back"
	case nwv1.WorkflowSucceeded:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, nwv1.ReasonSucceeded, k.Succeeded
	case nwv1.WorkflowRolledBack:
		c.Status, c.Reason = metav1.ConditionFalse, failedReason
		if cancelled {
			c.Reason = nwv1.ReasonCancelled
		}
		c.Message = failure + "; " + k.rolledBack(st)
		if s.FailedStep == "" {
			c.Reason, c.Message = nwv1.ReasonCancelled, "cancelled before it started"
		}
	case nwv1.WorkflowFailed:
		c.Status, c.Reason = metav1.ConditionFalse, failedReason
		c.Message = failure + "; a person must look: see status.steps"
	default:
		return
	}
	c.Message = audit.Shorten(c.Message, MaxConditionMessageBytes)
	meta.SetStatusCondition(&st.Conditions, c)
}

// rolledBack says what holds once the workflow rolled back.
func (k Kind) rolledBack(st *nwv1.WorkflowStatus) string {
	if k.RolledBackAs != nil {
		if said := k.RolledBackAs(st); said != "" {
			return said
		}
	}
	return k.RolledBack
}

// stepState is the state the status records for step, empty when it lists no such step.
func stepState(st *nwv1.WorkflowStatus, step Step) nwv1.StepState {
	for _, s := range st.Steps {
		if s.Name == string(step) {
			return s.State
		}
	}
	return ""
}
