package bootrecoverypolicy

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The policy's metrics, set from its status after each reconcile (so an operator that
// restarts shows the same).
var (
	fallbackGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodewright_node_boot_fallback",
		Help: "1 while a node's fallback from a staged image is not acknowledged (BootRecoveryPolicy spec.onFallback.alert).",
	}, []string{"node", "from_image", "to_image"})
	recoveryGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodewright_node_recovery_boot",
		Help: "1 while a node runs its recovery system (BootRecoveryPolicy spec.onRecoveryBoot.alert).",
	}, []string{"node"})
	healthGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodewright_node_post_boot_health_timed_out",
		Help: "1 while a node's current boot did not pass its post-boot health within the BootRecoveryPolicy's timeout.",
	}, []string{"node"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { metrics.Registry.MustRegister(fallbackGauge, recoveryGauge, healthGauge) })
}

func forgetMetrics() {
	fallbackGauge.Reset()
	recoveryGauge.Reset()
	healthGauge.Reset()
}

// setMetrics sets the gauges from p's status.
func setMetrics(p *nwv1.BootRecoveryPolicy) {
	forgetMetrics()
	for i := range p.Status.Nodes {
		n := &p.Status.Nodes[i]
		if fb := n.Unacknowledged(); fb != nil && alertOnFallback(p) {
			fallbackGauge.WithLabelValues(n.Name, fb.FromImage, fb.ToImage).Set(1)
		}
		if n.BootEntry == nwv1.KairosBootRecovery && alertOnRecovery(p) {
			recoveryGauge.WithLabelValues(n.Name).Set(1)
		}
		if h := n.PostBootHealth; h != nil && h.TimedOutAt != nil {
			healthGauge.WithLabelValues(n.Name).Set(1)
		}
	}
}
