package vmvolumemigration

import (
	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// Labels on everything a migration creates, so that the operator's cache holds only its own
// Jobs, Pods and snapshots, and a person can find them.
const (
	LabelManagedBy    = children.LabelManagedBy
	ManagedBy         = children.ManagedBy
	LabelMigration    = migration.LabelName
	LabelMigrationUID = migration.LabelUID
)

// The annotations a migration writes on its VM (migration.AnnotationMigration,
// migration.AnnotationFailedMigration).
const (
	AnnotationMigration       = migration.AnnotationMigration
	AnnotationFailedMigration = migration.AnnotationFailedMigration
)

// Suffixes of the children's names.
const (
	suffixBefore = migration.SuffixBefore
	suffixAfter  = migration.SuffixAfter
	suffixTarget = migration.SuffixTarget
	suffixView   = migration.SuffixView
	suffixCopy   = migration.SuffixCopy
	suffixVerify = migration.SuffixVerify
)

// maxChildName keeps every child's name usable as a label value (a Job's pods carry it).
const maxChildName = children.MaxName

// childName is the deterministic name of a migration's child: "<migration>-<suffix>", or a
// shortened name with a hash of the migration's name when that would be too long.
func childName(m *nwv1.VMVolumeMigration, suffix string) string {
	return migration.ChildName(m, suffix)
}

// ownerOf is m as its children's labels name it.
func ownerOf(m *nwv1.VMVolumeMigration) children.Owner { return migration.Owner(m) }

// childLabels are the labels of every child of m.
func childLabels(m *nwv1.VMVolumeMigration) map[string]string { return ownerOf(m).Labels() }
