package migration

import (
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// ActionStep is the audit action of a migration's transitions.
const ActionStep = "MigrationTransition"

// AuditRecord is the audit record of one transition of m, made by actor. Each state is
// visited at most once in a migration's life, so the record's identity needs no occurrence:
// recording the same transition again after a crash gives the same record.
func AuditRecord(m *nwv1.VMVolumeMigration, actor string, from, to State, e Event, message string, at time.Time, details ...audit.Detail) audit.Record {
	subject := audit.Subject{
		APIVersion: nwv1.GroupVersion.String(),
		Kind:       "VMVolumeMigration",
		Namespace:  m.Namespace,
		Name:       m.Name,
		UID:        m.UID,
		Generation: m.Generation,
	}
	return audit.Transition(subject, actor, ActionStep, from.String(), to.String(), string(e), message, "", at, details...)
}
