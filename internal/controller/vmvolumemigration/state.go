package vmvolumemigration

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// planOf is the migration's plan, fixed by its spec. An unset mode is Cold: the controller
// never picks the path that needs more of the backend on its own.
func planOf(m *nwv1.VMVolumeMigration) migration.Plan {
	mode := m.Spec.Mode
	if mode == "" {
		mode = nwv1.MigrationCold
	}
	return migration.Plan{Mode: mode, RetainSource: m.Spec.RetainSource == nil || *m.Spec.RetainSource}
}

// stateOf reads the machine's state back from the status the controller wrote.
func stateOf(m *nwv1.VMVolumeMigration) migration.State {
	return workflow.StateOf(&m.Status.WorkflowStatus, planOf(m))
}

// transition writes the move from one state to the next into the status.
func transition(m *nwv1.VMVolumeMigration, plan migration.Plan, from, to migration.State, e migration.Event, message string, skipped bool, now metav1.Time) {
	workflow.Transition(&m.Status.WorkflowStatus, plan, migration.Kind, m.Generation, from, to, e, message, skipped, now)
}

// stepMessage sets the message of the running step (what it waits for), reporting whether it
// changed.
func stepMessage(m *nwv1.VMVolumeMigration, step migration.Step, message string) bool {
	return workflow.StepMessage(&m.Status.WorkflowStatus, step, message)
}

// truncate bounds a message of the status or of an Event to n bytes, between characters.
func truncate(s string, n int) string { return audit.Shorten(s, n) }
