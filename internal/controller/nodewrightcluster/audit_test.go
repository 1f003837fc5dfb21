package nodewrightcluster

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

func TestLegacyRecords(t *testing.T) {
	nwc := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: "nodewright", UID: "0b6c6b8e-1111-4c2b-9d7e-000000000002"}}
	nwc.Status.LegacyGeneration, nwc.Status.LegacyState = 6, "SINGLE_NODE_READY"
	obs := legacy.Observation{PreviousState: "SINGLE_NODE_READY", State: "UPGRADE_REQUESTED", Generation: 7}
	next := nwc.Status
	next.LegacyGeneration, next.LegacyState = 7, "UPGRADE_REQUESTED"
	anomalies := []legacy.Anomaly{{Kind: legacy.GenerationJump, Message: "missed one"}}
	at := time.Unix(1_800_000_000, 0)

	records := legacyRecords(nwc, obs, next, anomalies, "operator", at)
	if len(records) != 2 || records[0].Action != ActionLegacyTransition || records[0].From != "SINGLE_NODE_READY" ||
		records[0].To != "UPGRADE_REQUESTED" || records[1].Action != ActionLegacyAnomaly || records[1].To != string(legacy.GenerationJump) {
		t.Fatalf("records %+v", records)
	}
	// A stale status (an older state and generation) observes the same ConfigMap: the same
	// records, so the log keeps one of each.
	stale := nwc.DeepCopy()
	stale.Status.LegacyGeneration, stale.Status.LegacyState = 5, "BOOTSTRAP"
	again := legacyRecords(stale, obs, next, anomalies, "operator", at.Add(time.Minute))
	if len(again) != 2 || again[0].ID != records[0].ID || again[1].ID != records[1].ID {
		t.Errorf("observing the same ConfigMap again gave other record IDs")
	}
	// The next transition between the same two states is another record.
	obs.Generation, next.LegacyGeneration = 9, 9
	if later := legacyRecords(nwc, obs, next, nil, "operator", at); len(later) != 1 || later[0].ID == records[0].ID {
		t.Errorf("a later transition between the same states: %+v", later)
	}
	// Nothing new observed: nothing recorded.
	if none := legacyRecords(nwc, obs, nwc.Status, anomalies, "operator", at); len(none) != 0 {
		t.Errorf("records without a new generation: %+v", none)
	}
}
