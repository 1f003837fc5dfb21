package workflow

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// The reasons of the Events every workflow raises on itself, one per transition.
const (
	EventStarted       = "Started"
	EventStepSucceeded = "StepSucceeded"
	EventStepSkipped   = "StepSkipped"
	EventStepFailed    = "StepFailed"
	EventRollingBack   = "RollingBack"
	EventRolledBack    = "RolledBack"
	EventSucceeded     = "Succeeded"
	EventFailed        = "Failed"
	// EventStepStarted: the gates of a Waiting step let it start.
	EventStepStarted = "StepStarted"
	// EventAuditRecordTooLong: the audit log refused a transition's record as too long for
	// one line of the trail; it was left out.
	EventAuditRecordTooLong = "AuditRecordTooLong"
)

// The reasons of a gate's Event (and the Held condition's) are the gate's own:
// nwv1.ReasonAnotherWorkflowRunning, ReasonClusterNotReady, ReasonAwaitingApproval,
// ReasonOutsideWindow.

// MaxEventMessageBytes is the most an Event's message keeps (the API server's limit).
const MaxEventMessageBytes = 1024

// TransitionEvent is the Event of the transition from one state to the next, written into st
// already: its type, reason and message, in the words of kind.
func TransitionEvent(st *nwv1.WorkflowStatus, k Kind, from, to State, e Event, message string, skipped bool) (eventType, reason, msg string) {
	eventType, reason, msg = corev1.EventTypeNormal, EventStepSucceeded, fmt.Sprintf("%s: %s", from.Step, message)
	switch {
	case to.Phase == nwv1.WorkflowSucceeded:
		reason, msg = EventSucceeded, fmt.Sprintf("%s: %s; the %s succeeded", from.Step, message, k.Noun)
	case to.Phase == nwv1.WorkflowRolledBack:
		eventType, reason, msg = corev1.EventTypeWarning, EventRolledBack, FailureMessage(st, to)+"; rolled back"
	case to.Phase == nwv1.WorkflowFailed:
		eventType, reason, msg = corev1.EventTypeWarning, EventFailed, FailureMessage(st, to)
	case from.Phase == nwv1.WorkflowRunning && to.Phase == nwv1.WorkflowRollingBack:
		eventType, reason, msg = corev1.EventTypeWarning, EventRollingBack, FailureMessage(st, to)+"; rolling back"
	case e == StepFailed:
		eventType, reason = corev1.EventTypeWarning, EventStepFailed
	case skipped:
		reason = EventStepSkipped
	case e == Start:
		reason, msg = EventStarted, fmt.Sprintf("the %s started", k.Noun)
	}
	return eventType, reason, audit.Shorten(msg, MaxEventMessageBytes)
}
