package workflow

import (
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// The most a workflow's record keeps of its free texts, which come from the object: a step's
// message (the controller writes at most MaxStepMessageBytes of one, but the status can be
// written by others) and a detail's value (the requester, from an annotation). Even with
// every byte escaped, six for one, they keep the record far below audit.MaxLineBytes: a
// record the log refused would be resent with every later one, and refused with them.
const (
	MaxAuditMessageBytes = 4096
	MaxAuditDetailBytes  = 1024
)

// AuditRecord is the audit record of one transition of the workflow subject, made by actor.
// Each state is visited at most once in a workflow's life, so the record's identity needs no
// occurrence: recording the same transition again after a crash gives the same record. The
// message and the details' values are cut to MaxAuditMessageBytes and MaxAuditDetailBytes;
// the identity does not depend on them.
func AuditRecord(k Kind, subject audit.Subject, actor string, from, to State, e Event, message string, at time.Time, details ...audit.Detail) audit.Record {
	var cut []audit.Detail
	if len(details) > 0 {
		cut = make([]audit.Detail, len(details))
		for i, d := range details {
			cut[i] = audit.Detail{Name: d.Name, Value: audit.Shorten(d.Value, MaxAuditDetailBytes)}
		}
	}
	return audit.Transition(subject, actor, k.AuditAction, from.String(), to.String(), string(e),
		audit.Shorten(message, MaxAuditMessageBytes), "", at, cut...)
}

// Records replays the machine along the steps the status records and builds the record of
// each transition, in order: the start (with details, e.g. who asked), then each step's
// outcome (naming who approved the step, for one that waited for approval). A step still running ends the list; so does anything the machine would refuse or
// that would not move it (a status written by hand can say anything).
func Records(st *nwv1.WorkflowStatus, p Plan, k Kind, subject audit.Subject, actor string, startDetails ...audit.Detail) []audit.Record {
	if st.Phase == "" || st.Phase == nwv1.WorkflowPending || st.StartTime == nil {
		return nil
	}
	steps := map[string]nwv1.WorkflowStep{}
	for _, s := range st.Steps {
		steps[s.Name] = s
	}
	at := func(t *nwv1.WorkflowStep) time.Time {
		if t != nil && t.FinishedAt != nil {
			return t.FinishedAt.Time
		}
		return st.StartTime.Time
	}
	s := Pending
	next, err := Next(p, s, Start)
	if err != nil {
		return nil
	}
	out := []audit.Record{AuditRecord(k, subject, actor, s, next, Start, "started", st.StartTime.Time, startDetails...)}
	for s = next; s.Phase.Active(); s = next {
		step, ok := steps[string(s.Step)]
		if !ok {
			break
		}
		var e Event
		switch step.State {
		case nwv1.StepSucceeded, nwv1.StepSkipped:
			e = StepSucceeded
		case nwv1.StepFailed:
			e = StepFailed
		case nwv1.StepCancelled:
			e = Cancel
		default:
			return out // the step is still running: nothing more happened
		}
		if next, err = Next(p, s, e); err != nil || next == s {
			// A cancellation the machine keeps waiting on (a rollback step or an
			// irreversible one marked Cancelled) moves nothing: no transition to record.
			return out
		}
		var approved []audit.Detail
		if step.ApprovedBy != "" {
			approved = append(approved, audit.Detail{Name: "approvedBy", Value: step.ApprovedBy})
		}
		out = append(out, AuditRecord(k, subject, actor, s, next, e, step.Message, at(&step), approved...))
	}
	return out
}
