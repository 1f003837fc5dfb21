package vmvolumemigration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// The audit trail is derived from the status, which is the migration's memory: every
// transition the status shows has a record, rebuilt with the same ID each time. After each
// reconcile the records the status shows and this process has not yet seen appended are
// appended; the log drops a record whose ID it already holds. So a transition whose record was
// lost with a crashed operator (status written, record not) is recorded after the restart,
// and nothing is recorded twice.

// auditProgress remembers, per migration, how many of its transitions this process has seen
// appended, so that a reconcile appends only the new ones.
type auditProgress struct {
	mu   sync.Mutex
	done map[types.UID]int
}

func (p *auditProgress) get(uid types.UID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done[uid]
}

func (p *auditProgress) set(uid types.UID, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = map[types.UID]int{}
	}
	p.done[uid] = max(p.done[uid], n)
}

func (p *auditProgress) forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.done, uid)
}

// recordTransitions appends the records of the transitions m's status shows. A record the
// log refuses as too long for a line is left out, with a log line and an Event: the builder
// bounds the texts it takes from the object, not the actor, and a record refused for good
// would otherwise be resent with every later one, which the log then refuses too, for ever.
func (r *Reconciler) recordTransitions(ctx context.Context, m *nwv1.VMVolumeMigration) {
	if r.Audit == nil {
		return
	}
	records := transitionRecords(m, r.Actor)
	from := r.audited.get(m.UID)
	if from >= len(records) {
		return
	}
	for pending := records[from:]; len(pending) > 0; {
		_, err := r.Audit.Append(ctx, pending...)
		if err == nil {
			break
		}
		var refused *audit.RecordError
		if !errors.Is(err, audit.ErrLineTooLong) || !errors.As(err, &refused) || refused.Index >= len(pending) {
			ctrl.LoggerFrom(ctx).Error(err, "Recording transitions in the audit trail failed; the next reconcile retries")
			return
		}
		r.leaveOut(ctx, m, pending[refused.Index], refused.Err)
		// Nothing of a refused call was written: the others go again, without it.
		pending = slices.Delete(slices.Clone(pending), refused.Index, refused.Index+1)
	}
	r.audited.set(m.UID, len(records))
}

// leaveOut reports a transition's record that the trail cannot hold.
func (r *Reconciler) leaveOut(ctx context.Context, m *nwv1.VMVolumeMigration, rec audit.Record, why error) {
	ctrl.LoggerFrom(ctx).Error(why, "Leaving a transition's record out of the audit trail: too long for one line",
		"migration", klog.KObj(m), "from", rec.From, "to", rec.To, "record", rec.ID)
	if r.Recorder != nil {
		r.Recorder.Event(m, corev1.EventTypeWarning, EventAuditRecordTooLong, truncate(fmt.Sprintf(
			"the audit record of the transition from %s to %s is too long for one line of the trail and was left out of it: %v", rec.From, rec.To, why), 1024))
	}
}

// transitionRecords replays the machine along the steps the status records and builds the
// record of each transition, in order; the start names who asked for the migration, as the
// admission webhook stamped it.
func transitionRecords(m *nwv1.VMVolumeMigration, actor string) []audit.Record {
	var asked []audit.Detail
	if who := m.Annotations[nwv1.AnnotationRequestedBy]; who != "" {
		asked = append(asked, audit.Detail{Name: "requestedBy", Value: who})
	}
	return workflow.Records(&m.Status.WorkflowStatus, planOf(m), migration.Kind, migration.Subject(m), actor, asked...)
}
