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
