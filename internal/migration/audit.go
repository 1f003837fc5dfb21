package migration

import (
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// ActionStep is the audit action of a migration's transitions.
const ActionStep = "MigrationTransition"

// The labels that name a migration on its children (with children.LabelManagedBy).
const (
	LabelName = "nodewright.spectrocloud.com/migration"
	LabelUID  = "nodewright.spectrocloud.com/migration-uid"
)

// Descriptor is the migration as the workflow engine, the operator and admission know it.
var Descriptor = engine.Describe(&engine.Descriptor[*nwv1.VMVolumeMigration]{
	Kind: workflow.Kind{
		Name:         "VMVolumeMigration",
		AuditAction:  ActionStep,
		Succeeded:    "the VM's volume is the verified target PVC",
		RolledBack:   "rolled back: the VM is as it was before the migration",
		RolledBackAs: rolledBackWithoutTheVM,
		Cancelled:    "the migration was deleted",
		Noun:         "migration",
	},
	Controller: "vmvolumemigration",
	ShortNames: []string{"vmvm", "vmmig"},
	New:        func() *nwv1.VMVolumeMigration { return &nwv1.VMVolumeMigration{} },
	NewList:    func() client.ObjectList { return &nwv1.VMVolumeMigrationList{} },
	Plan:       func(m *nwv1.VMVolumeMigration) workflow.Plan { return PlanOf(m) },
	Plans: func() []workflow.Plan {
		var plans []workflow.Plan
		for _, mode := range []nwv1.MigrationMode{nwv1.MigrationCold, nwv1.MigrationHot} {
			for _, retain := range []bool{false, true} {
				plans = append(plans, Plan{Mode: mode, RetainSource: retain})
			}
		}
		return plans
	},
	Finalizer: "nodewright.spectrocloud.com/migration",
	NameLabel: LabelName,
	UIDLabel:  LabelUID,
	Children: []engine.Child{
		{Object: &batchv1.Job{}},
		// The Jobs' Pods carry the Jobs' labels; a Job's own change wakes the migration.
		{Object: &corev1.Pod{}, Unwatched: true},
		// A migration reads its VM's claims too.
		{Object: &corev1.PersistentVolumeClaim{}, AlsoOthers: true},
		{Object: &snapshotv1.VolumeSnapshot{}},
	},
	// KubeVirt's and the CSI snapshot API: a cluster may lack them, gain them after the
	// operator started, or lose them.
	APIs: servedapis.Kinds{
		virtv1.SchemeGroupVersion.WithKind("VirtualMachine"),
		virtv1.SchemeGroupVersion.WithKind("VirtualMachineInstance"),
		snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshot"),
		snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshotClass"),
	},
})

// Kind is what the shared workflow code calls a migration and says of its outcomes.
var Kind = Descriptor.Kind

// CopierPath is where nodewright-copy is in its image (internal/ociimage.BinaryPath). The copy
// Jobs run it by this path, never by name, so that nothing placed on PATH stands in for it; the
// chart's admission policy for the operator's Jobs admits only this command.
const CopierPath = "/usr/local/bin/nodewright-copy"

// Owner is m as the labels of its children name it.
func Owner(m *nwv1.VMVolumeMigration) children.Owner { return Descriptor.Owner(m) }

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
