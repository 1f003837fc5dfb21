package nodewrightcluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// Audit actions of the observation bridge.
const (
	ActionLegacyTransition = "LegacyTransitionObserved"
	ActionLegacyAnomaly    = "LegacyAnomalyObserved"
)

// legacyRecords are the records of what a new status observed of the legacy state machine: its
// transition (when its generation moved) and each anomaly. The legacy generation tells apart
// transitions between the same two states, so that each is recorded once however often it is
// observed.
// The states come from the ConfigMap (its state and previousState), not from the status,
// which a stale cache could show older: the same observation always builds the same record.
func legacyRecords(nwc *nwv1.NodewrightCluster, obs legacy.Observation, next nwv1.NodewrightClusterStatus, anomalies []legacy.Anomaly, actor string, at time.Time) []audit.Record {
	if next.LegacyGeneration == 0 || next.LegacyGeneration == nwc.Status.LegacyGeneration {
		return nil
	}
	subject := audit.Subject{APIVersion: nwv1.GroupVersion.String(), Kind: "NodewrightCluster", Name: nwc.Name, UID: nwc.UID, Generation: nwc.Generation}
	gen := strconv.FormatInt(next.LegacyGeneration, 10)
	details := []audit.Detail{{Name: "legacyGeneration", Value: gen}}
	records := []audit.Record{audit.Transition(subject, actor, ActionLegacyTransition,
		string(obs.PreviousState), string(obs.State), "Observed",
		fmt.Sprintf("the legacy DaemonSet's state machine is at %s (generation %s)", obs.State, gen), gen, at, details...)}
	for _, a := range anomalies {
		records = append(records, audit.Transition(subject, actor, ActionLegacyAnomaly,
			"", string(a.Kind), string(a.Kind), a.Message, gen+"/"+string(a.Kind), at, details...))
	}
	return records
}

// recordLegacy appends the records; a failure is logged, never blocking the observation.
func (r *Reconciler) recordLegacy(ctx context.Context, nwc *nwv1.NodewrightCluster, obs legacy.Observation, next nwv1.NodewrightClusterStatus, anomalies []legacy.Anomaly, at time.Time) {
	if r.Audit == nil {
		return
	}
	records := legacyRecords(nwc, obs, next, anomalies, r.Actor, at)
	if len(records) == 0 {
		return
	}
	if _, err := r.Audit.Append(ctx, records...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Recording the legacy transition in the audit trail failed", "legacyGeneration", next.LegacyGeneration)
	}
}
