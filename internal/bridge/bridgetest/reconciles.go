package bridgetest

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Reconciles is how many times the named controller has reconciled in this process, whatever
// the result, as controller-runtime's controller_runtime_reconcile_total metric counts them.
func Reconciles(t testing.TB, controller string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering the metrics: %v", err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
