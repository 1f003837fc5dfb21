package vmvolumemigration

import (
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
