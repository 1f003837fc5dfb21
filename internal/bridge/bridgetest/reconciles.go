package bridgetest

import (
	"testing"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// Reconciles is how many times the named controller has reconciled in this process, whatever
// the result, as controller-runtime's controller_runtime_reconcile_total metric counts them.
func Reconciles(t testing.TB, controller string) float64 {
	t.Helper()
	return testenv.ControllerMetric(t, "controller_runtime_reconcile_total", controller)
}
