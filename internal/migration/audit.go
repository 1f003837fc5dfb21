package migration

import (
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// ActionStep is the audit action of a migration's transitions.
const ActionStep = "MigrationTransition"

// The most a migration's record keeps of its free texts, which come from the object: a
// step's message (the controller writes at most 1 KiB of one, but the status can be written
// by others) and a detail's value (the requester, from an annotation). Even with every byte
// escaped, six for one, they keep the record far below audit.MaxLineBytes: a record the log
// refused would be resent with every later one, and refused with them, for ever.
const (
	MaxAuditMessageBytes = 4096
	MaxAuditDetailBytes  = 1024
)

// AuditRecord is the audit record of one transition of m, made by actor. Each state is
// visited at most once in a migration's life, so the record's identity needs no occurrence:
// recording the same transition again after a crash gives the same record. The message and
// the details' values are cut to MaxAuditMessageBytes and MaxAuditDetailBytes; the identity
// does not depend on them.
func AuditRecord(m *nwv1.VMVolumeMigration, actor string, from, to State, e Event, message string, at time.Time, details ...audit.Detail) audit.Record {
	subject := audit.Subject{
		APIVersion: nwv1.GroupVersion.String(),
		Kind:       "VMVolumeMigration",
		Namespace:  m.Namespace,
		Name:       m.Name,
		UID:        m.UID,
		Generation: m.Generation,
	}
	var cut []audit.Detail
	if len(details) > 0 {
		cut = make([]audit.Detail, len(details))
		for i, d := range details {
			cut[i] = audit.Detail{Name: d.Name, Value: audit.Shorten(d.Value, MaxAuditDetailBytes)}
		}
	}
	return audit.Transition(subject, actor, ActionStep, from.String(), to.String(), string(e),
		audit.Shorten(message, MaxAuditMessageBytes), "", at, cut...)
}
