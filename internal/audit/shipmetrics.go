package audit

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The shipper's metrics, on controller-runtime's registry (served with the manager's metrics),
// labelled with the shipper's name. Alert on nodewright_audit_ship_pending_entries growing, or
// on the last success being old: either means the copy outside the node is falling behind.
var (
	shipPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodewright_audit_ship_pending_entries",
		Help: "Audit entries in the local files that the receiver does not hold yet.",
	}, []string{"sink"})
	shipDelivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodewright_audit_ship_delivered_entries_total",
		Help: "Audit entries the receiver acknowledged holding, since the process started.",
	}, []string{"sink"})
	shipReceiverEntries = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodewright_audit_ship_receiver_entries",
		Help: "Audit entries the receiver holds, as it last said (its next seq).",
	}, []string{"sink"})
	shipFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodewright_audit_ship_failures_total",
		Help: "Failed attempts to ship audit entries (connection, timeout, refusal, local read).",
	}, []string{"sink"})
	shipLastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodewright_audit_ship_last_success_timestamp_seconds",
		Help: "When the receiver last acknowledged where it stands, in seconds since the epoch.",
	}, []string{"sink"})
	registerShipMetrics sync.Once
)

type shipperMetrics struct {
	pending, receiver, lastSuccess prometheus.Gauge
	delivered, failures            prometheus.Counter
}

func newShipperMetrics(name string) shipperMetrics {
	registerShipMetrics.Do(func() {
		metrics.Registry.MustRegister(shipPending, shipDelivered, shipReceiverEntries, shipFailures, shipLastSuccess)
	})
	return shipperMetrics{
		pending:     shipPending.WithLabelValues(name),
		receiver:    shipReceiverEntries.WithLabelValues(name),
		lastSuccess: shipLastSuccess.WithLabelValues(name),
		delivered:   shipDelivered.WithLabelValues(name),
		failures:    shipFailures.WithLabelValues(name),
	}
}
