package bondmodeflipplan

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// TestAPartsTimeLimitCountsFromItsOwnStart: a node's step began long ago; its part under way
// began a minute ago. The part's limits count from the part's start, as each part's did when
// it was a step of its own; the Preflight's from the step's.
func TestAPartsTimeLimitCountsFromItsOwnStart(t *testing.T) {
	now := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	stepStart, partStart := metav1.NewTime(now.Add(-20*time.Minute)), metav1.NewTime(now.Add(-time.Minute))
	f := &nwv1.BondModeFlipPlan{}
	f.Status.Steps = []nwv1.WorkflowStep{{Name: "Preflight", State: nwv1.StepSucceeded, StartedAt: &stepStart},
		{Name: "Node1", State: nwv1.StepRunning, StartedAt: &stepStart}}
	f.Status.Nodes = []nwv1.NodeFlip{{Name: "edge-1", Position: 1}}
	bondflip.Begin(&f.Status.Nodes[0], bondflip.RestoreVMs, "", partStart)
	run := &engine.Run[*nwv1.BondModeFlipPlan]{Object: f, State: workflow.State{Phase: nwv1.WorkflowRunning, Step: "Node1"}, Now: metav1.NewTime(now)}
	s := &scope{Run: run, f: f, part: bondflip.RestoreVMs, partStarted: partStart.Time}
	if passed, left := s.Deadline(vmStepTimeout); passed || left != vmStepTimeout-time.Minute {
		t.Errorf("RestoreVMs, a minute in, its step 20 minutes in: passed %v, %s left; want %s left", passed, left, vmStepTimeout-time.Minute)
	}
	if passed, _ := s.Deadline(30 * time.Second); !passed {
		t.Error("a 30 s limit a minute into the part has not passed")
	}
	if got := s.StepStarted(); !got.Equal(partStart.Time) {
		t.Errorf("started %s; want the part's start %s", got, partStart.Time)
	}
	s.part = ""
	if passed, _ := s.Deadline(vmStepTimeout); !passed {
		t.Error("without a part, the step's own start counts: 20 minutes is past 15")
	}
}

// TestTheConfirmNeedsEveryPausedPairSeen: the Confirm of edge-1's change needs each pair its
// PauseResync paused seen Connected, not only those the peers' reports still show: a peer
// whose report lost the resource (its DRBD unreadable), or lost edge-1 among the resource's
// connections, does not confirm it.
func TestTheConfirmNeedsEveryPausedPairSeen(t *testing.T) {
	f := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "flip"}}
	seeing := func(state string) *nwv1.NodewrightAgentStatus {
		return &nwv1.NodewrightAgentStatus{Status: nwv1.NodewrightAgentStatusStatus{Storage: &nwv1.DRBDStatus{
			ResourceStatuses: []nwv1.DRBDResourceStatus{{Name: "pvc-a", Peers: []nwv1.DRBDPeerStatus{{Name: "edge-1", ConnectionState: state}}}}}}}
	}
	paused := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Name: opName(f, pausePrefix(1)+"-"+shortHash("edge-2", "pvc-a"))},
		Spec: nwv1.NodeOperationSpec{NodeName: "edge-2", Type: nwv1.OperationDRBDPauseSync, DRBDPauseSync: &nwv1.DRBDPeerOperation{Resource: "pvc-a", Peer: "edge-1"}}}
	for _, c := range []struct {
		name string
		peer *nwv1.NodewrightAgentStatus
		want string
	}{
		{"connected", seeing("Connected"), ""},
		{"connecting", seeing("Connecting"), "edge-2 sees edge-1's connection of pvc-a Connecting"},
		{"DRBD unreadable", &nwv1.NodewrightAgentStatus{}, "edge-2 reports no DRBD resources"},
		{"the resource gone", &nwv1.NodewrightAgentStatus{Status: nwv1.NodewrightAgentStatusStatus{Storage: &nwv1.DRBDStatus{}}}, "edge-2 reports no resource pvc-a"},
		{"edge-1 gone from the resource", &nwv1.NodewrightAgentStatus{Status: nwv1.NodewrightAgentStatusStatus{Storage: &nwv1.DRBDStatus{
			ResourceStatuses: []nwv1.DRBDResourceStatus{{Name: "pvc-a"}}}}}, "edge-2 reports no connection of pvc-a to edge-1"},
	} {
		s := &scope{f: f, order: []string{"edge-1", "edge-2"}, ops: map[string]*nwv1.NodeOperation{paused.Name: paused},
			agents: map[string]*nwv1.NodewrightAgentStatus{"edge-1": {}, "edge-2": c.peer}}
		pairs := s.confirmPairs("edge-1", pausePrefix(1))
		if len(pairs) != 1 || pairs[0] != (pair{peer: "edge-2", resource: "pvc-a"}) {
			t.Errorf("%s: pairs %v; want edge-2's pvc-a", c.name, pairs)
		}
		if got := s.connected("edge-1", pairs); got != c.want {
			t.Errorf("%s: %q; want %q", c.name, got, c.want)
		}
	}
}
