package vmvolumemigration

import (
	"crypto/sha256"
	"encoding/hex"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Labels on everything a migration creates, so that the operator's cache holds only its own
// Jobs, Pods and snapshots, and a person can find them.
const (
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	ManagedBy         = "nodewright"
	LabelMigration    = "nodewright.spectrocloud.com/migration"
	LabelMigrationUID = "nodewright.spectrocloud.com/migration-uid"
)

// AnnotationMigration on a VirtualMachine marks it as being migrated (a lock: one migration
// per VM at a time) and keeps what a rollback restores: the VM's run strategy and the volume's
// original source. See vmRecord.
const AnnotationMigration = "nodewright.spectrocloud.com/migration"

// AnnotationFailedMigration on a VirtualMachine is the record of a migration that failed and
// could not be rolled back, kept when that migration was deleted. Migrations of the VM are
// refused until a person has restored the VM and removed it.
const AnnotationFailedMigration = "nodewright.spectrocloud.com/failed-migration"

// Suffixes of the children's names.
const (
	suffixBefore = "before"
	suffixAfter  = "after"
	suffixTarget = "target"
	suffixView   = "before-view"
	suffixCopy   = "copy"
	suffixVerify = "verify"
)

// maxChildName keeps every child's name usable as a label value (a Job's pods carry it).
const maxChildName = 63

// childName is the deterministic name of a migration's child: "<migration>-<suffix>", or a
// shortened name with a hash of the migration's name when that would be too long.
func childName(m *nwv1.VMVolumeMigration, suffix string) string {
	name := m.Name + "-" + suffix
	if len(name) <= maxChildName {
		return name
	}
	keep := maxChildName - len(suffix) - 10 - 2
	return m.Name[:keep] + "-" + nameHash(m.Name, 10) + "-" + suffix
}

// labelValue is the migration's name as a label value (its hash when too long).
func labelValue(m *nwv1.VMVolumeMigration) string {
	if len(m.Name) <= 63 {
		return m.Name
	}
	return nameHash(m.Name, 40)
}

// nameHash is the first n hex digits of the SHA-256 of name.
func nameHash(name string, n int) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])[:n]
}

// childLabels are the labels of every child of m.
func childLabels(m *nwv1.VMVolumeMigration) map[string]string {
	return map[string]string{
		LabelManagedBy:    ManagedBy,
		LabelMigration:    labelValue(m),
		LabelMigrationUID: string(m.UID),
	}
}
