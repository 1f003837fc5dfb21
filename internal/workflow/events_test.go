package workflow_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Each transition has its Event: Normal for progress, Warning for a failure and what
// follows it, in the kind's words, never longer than the API server takes.
func TestEachTransitionHasItsEvent(t *testing.T) {
	k := kind
	k.Noun = "test"
	type want struct{ eventType, reason, contains string }
	for _, tc := range []struct {
		name    string
		events  []workflow.Event
		skipped bool
		message string
		want    want
	}{
		{"the start", []workflow.Event{workflow.Start}, false, "started", want{corev1.EventTypeNormal, workflow.EventStarted, "the test started"}},
		{"a step done", []workflow.Event{workflow.Start, workflow.StepSucceeded}, false, "changed", want{corev1.EventTypeNormal, workflow.EventStepSucceeded, "Change: changed"}},
		{"a step skipped", []workflow.Event{workflow.Start, workflow.StepSucceeded}, true, "nothing to change", want{corev1.EventTypeNormal, workflow.EventStepSkipped, "Change: nothing to change"}},
		{"the last step done", []workflow.Event{workflow.Start, workflow.StepSucceeded, workflow.StepSucceeded}, false, "committed", want{corev1.EventTypeNormal, workflow.EventSucceeded, "the test succeeded"}},
		{"a step failed", []workflow.Event{workflow.Start, workflow.StepFailed}, false, "refused", want{corev1.EventTypeWarning, workflow.EventRollingBack, "step Change failed: refused; rolling back"}},
		{"rolled back", []workflow.Event{workflow.Start, workflow.StepFailed, workflow.StepSucceeded}, false, "reverted", want{corev1.EventTypeWarning, workflow.EventRolledBack, "; rolled back"}},
		{"the rollback failed", []workflow.Event{workflow.Start, workflow.StepFailed, workflow.StepFailed}, false, "stuck", want{corev1.EventTypeWarning, workflow.EventFailed, "then rollback step Revert failed: stuck"}},
		{"a long message", []workflow.Event{workflow.Start, workflow.StepSucceeded}, false, strings.Repeat("☃", 2000), want{corev1.EventTypeNormal, workflow.EventStepSucceeded, "..."}},
	} {
		st := &nwv1.WorkflowStatus{}
		var from, to workflow.State
		for i, e := range tc.events {
			message := "before"
			if i == len(tc.events)-1 {
				message = tc.message
			}
			from = workflow.StateOf(st, twoSteps{})
			to = step(t, st, e, message)
		}
		last := tc.events[len(tc.events)-1]
		eventType, reason, msg := workflow.TransitionEvent(st, k, from, to, last, tc.message, tc.skipped)
		if eventType != tc.want.eventType || reason != tc.want.reason || !strings.Contains(msg, tc.want.contains) || len(msg) > workflow.MaxEventMessageBytes {
			t.Errorf("%s: %s %s %q (%d bytes), want %s %s containing %q", tc.name, eventType, reason, msg, len(msg), tc.want.eventType, tc.want.reason, tc.want.contains)
		}
	}
}
