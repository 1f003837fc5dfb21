package testenv

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ControllerMetric is the value of one of controller-runtime's per-controller metrics
// (controller_runtime_reconcile_total, controller_runtime_active_workers...) for the named
// controller in this process: a counter's or a gauge's, summed over its other labels.
func ControllerMetric(t testing.TB, name, controller string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering the metrics: %v", err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return total
}
