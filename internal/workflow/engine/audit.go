package engine

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// The audit trail is derived from the status, which is the workflow's memory: every
// transition the status shows has a record, rebuilt with the same ID each time. After each
// reconcile the records the status shows and this process has not yet seen appended are
// appended; the log drops a record whose ID it already holds. So a transition whose record was
// lost with a crashed operator (status written, record not) is recorded after the restart,
// and nothing is recorded twice.

// progress remembers, per workflow, how many of its transitions this process has seen
// appended, so that a reconcile appends only the new ones. It is keyed by name, so that a
// workflow gone is forgotten when its reconcile finds it gone, and holds the UID, so that one
// recreated under the name starts again.
type progress struct {
	mu   sync.Mutex
	done map[types.NamespacedName]appended
}

type appended struct {
	uid types.UID
	n   int
}

func (p *progress) get(o client.Object) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.done[client.ObjectKeyFromObject(o)]; a.uid == o.GetUID() {
		return a.n
	}
	return 0
}

func (p *progress) set(o client.Object, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = map[types.NamespacedName]appended{}
	}
	key := client.ObjectKeyFromObject(o)
	if a := p.done[key]; a.uid == o.GetUID() {
		n = max(n, a.n)
	}
	p.done[key] = appended{uid: o.GetUID(), n: n}
}

func (p *progress) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.done, key)
}

// recordTransitions appends the records of the transitions o's status shows. A record the
// log refuses as too long for a line is left out, with a log line and an Event: the builder
// bounds the texts it takes from the object, not the actor, and a record refused for good
// would otherwise be resent with every later one, which the log then refuses too, for ever.
func (e *Engine[O]) recordTransitions(ctx context.Context, o O, p workflow.Plan) {
	if e.Audit == nil {
		return
	}
	records := TransitionRecords(o, p, e.Descriptor.Kind, e.Actor)
	from := e.audited.get(o)
	if from >= len(records) {
		return
	}
	for pending := records[from:]; len(pending) > 0; {
		_, err := e.Audit.Append(ctx, pending...)
		if err == nil {
			break
		}
		var refused *audit.RecordError
		if !errors.Is(err, audit.ErrLineTooLong) || !errors.As(err, &refused) || refused.Index >= len(pending) {
			ctrl.LoggerFrom(ctx).Error(err, "Recording transitions in the audit trail failed; the next reconcile retries")
			return
		}
		e.leaveOut(ctx, o, pending[refused.Index], refused.Err)
		// Nothing of a refused call was written: the others go again, without it.
		pending = slices.Delete(slices.Clone(pending), refused.Index, refused.Index+1)
	}
	e.audited.set(o, len(records))
}

// leaveOut reports a transition's record that the trail cannot hold.
func (e *Engine[O]) leaveOut(ctx context.Context, o O, rec audit.Record, why error) {
	ctrl.LoggerFrom(ctx).Error(why, "Leaving a transition's record out of the audit trail: too long for one line",
		"kind", e.Descriptor.Kind.Name, "object", klog.KObj(o), "from", rec.From, "to", rec.To, "record", rec.ID)
	if e.Recorder != nil {
		e.Recorder.Event(o, corev1.EventTypeWarning, workflow.EventAuditRecordTooLong, audit.Shorten(fmt.Sprintf(
			"the audit record of the transition from %s to %s is too long for one line of the trail and was left out of it: %v", rec.From, rec.To, why), workflow.MaxEventMessageBytes))
	}
}

// TransitionRecords replays the machine along the steps o's status records and builds the
// record of each transition, in order; the start names who asked for the workflow, as the
// admission webhook stamped it, and each approved step who approved it.
func TransitionRecords(o Object, p workflow.Plan, k workflow.Kind, actor string) []audit.Record {
	var asked []audit.Detail
	if who := o.GetAnnotations()[nwv1.AnnotationRequestedBy]; who != "" {
		asked = append(asked, audit.Detail{Name: "requestedBy", Value: who})
	}
	return workflow.Records(o.GetWorkflowStatus(), p, k, Subject(o, k), actor, asked...)
}

// Subject is o as its audit records name it.
func Subject(o Object, k workflow.Kind) audit.Subject {
	return audit.Subject{
		APIVersion: nwv1.GroupVersion.String(),
		Kind:       k.Name,
		Namespace:  o.GetNamespace(),
		Name:       o.GetName(),
		UID:        o.GetUID(),
		Generation: o.GetGeneration(),
	}
}
