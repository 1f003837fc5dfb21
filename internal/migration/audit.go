package migration

import (
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// ActionStep is the audit action of a migration's transitions.
const ActionStep = "MigrationTransition"

// Kind is what the shared workflow code calls a migration and says of its outcomes.
var Kind = workflow.Kind{
	Name:        "VMVolumeMigration",
	AuditAction: ActionStep,
	Succeeded:   "the VM's volume is the verified target PVC",
	RolledBack:  "rolled back: the VM is as it was before the migration",
	Cancelled:   "the migration was deleted",
	Noun:        "migration",
}

// The labels that name a migration on its children (with children.LabelManagedBy).
const (
	LabelName = "nodewright.spectrocloud.com/migration"
	LabelUID  = "nodewright.spectrocloud.com/migration-uid"
)

// CopierPath is where nodewright-copy is in its image (internal/ociimage.BinaryPath). The copy
// Jobs run it by this path, never by name, so that nothing placed on PATH stands in for it; the
// chart's admission policy for the operator's Jobs admits only this command.
const CopierPath = "/usr/local/bin/nodewright-copy"

// Owner is m as the labels of its children name it.
func Owner(m *nwv1.VMVolumeMigration) children.Owner {
	return children.Owner{Name: m.Name, NameLabel: LabelName, UID: m.UID, UIDLabel: LabelUID, Noun: "migration"}
}

// Subject is m as its audit records name it.
func Subject(m *nwv1.VMVolumeMigration) audit.Subject {
	return audit.Subject{
		APIVersion: nwv1.GroupVersion.String(),
		Kind:       Kind.Name,
		Namespace:  m.Namespace,
		Name:       m.Name,
		UID:        m.UID,
		Generation: m.Generation,
	}
}

// AuditRecord is the audit record of one transition of m, made by actor (workflow.AuditRecord).
func AuditRecord(m *nwv1.VMVolumeMigration, actor string, from, to State, e Event, message string, at time.Time, details ...audit.Detail) audit.Record {
	return workflow.AuditRecord(Kind, Subject(m), actor, from, to, e, message, at, details...)
}
