package osupgrade_test

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

const image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestThePlanUpgradesNodeByNodeAndUndoesNothing(t *testing.T) {
	p, err := osupgrade.NewPlan(3, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Forward(), []workflow.Step{"Preflight", "Node1", "Node2", "Node3", "Recovery"}; !slices.Equal(got, want) {
		t.Fatalf("forward %v, want %v", got, want)
	}
	for _, s := range p.Forward() {
		if got := p.Rollback(s); len(got) != 0 {
			t.Errorf("a failure in %s rolls back %v: an OS upgrade is not undone by the policy", s, got)
		}
		if !workflow.CancelsWhileWaiting(p, s) {
			t.Errorf("%s cannot be cancelled while its gates hold it", s)
		}
		if p.Irreversible(s) == (s == osupgrade.Preflight) {
			t.Errorf("%s irreversible %t", s, p.Irreversible(s))
		}
		want := workflow.GatesNodeChange
		if s == osupgrade.Preflight {
			want = workflow.GatesPreflight
		}
		if p.Gates(s) != want {
			t.Errorf("%s gated by %v, want %v", s, p.Gates(s), want)
		}
	}
	if k, ok := osupgrade.ParseStep("Node12"); !ok || k != 12 || p.ActionKey("Node12") != osupgrade.ActionNode {
		t.Errorf("Node12: %d %t %s", k, ok, p.ActionKey("Node12"))
	}
	if _, ok := osupgrade.ParseStep("Recovery"); ok {
		t.Error("Recovery is no node's step")
	}
	if none, _ := osupgrade.NewPlan(0, true); !slices.Equal(none.Forward(), []workflow.Step{"Preflight"}) {
		t.Errorf("no node: %v, want the Preflight alone (it says why)", none.Forward())
	}
	if _, err := osupgrade.NewPlan(osupgrade.MaxNodes+1, false); err == nil {
		t.Error("17 nodes admitted")
	}
}

// TestANodeRunsTheImageOnlyFromItsActiveSlotWithoutFailure: the booted image is the target's
// repository and tag, from the active slot, not after a failed upgrade.
func TestANodeRunsTheImageOnlyFromItsActiveSlotWithoutFailure(t *testing.T) {
	repo := "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0"
	if got := osupgrade.Repository(image); got != repo {
		t.Fatalf("repository %q, want %q", got, repo)
	}
	for _, c := range []struct {
		name string
		k    *nwv1.KairosStatus
		want bool
	}{
		{"active", &nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive, Image: repo}, true},
		{"no report", nil, false},
		{"another tag", &nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive, Image: "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2"}, false},
		{"passive", &nwv1.KairosStatus{BootEntry: nwv1.KairosBootPassive, Image: repo}, false},
		{"recovery", &nwv1.KairosStatus{BootEntry: nwv1.KairosBootRecovery, Image: repo}, false},
		{"after a failure", &nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive, Image: repo, UpgradeFailure: true}, false},
	} {
		if got := osupgrade.Runs(c.k, image); got != c.want {
			t.Errorf("%s: runs %t, want %t", c.name, got, c.want)
		}
	}
}

func TestTheAcknowledgedNodesAreTheAnnotations(t *testing.T) {
	p := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		nwv1.AnnotationAcknowledgeFallback: " edge-2, ,edge-3,edge-2"}}}
	if got := osupgrade.Acknowledged(p); !slices.Equal(got, []string{"edge-2", "edge-3"}) {
		t.Fatalf("acknowledged %v", got)
	}
}

// TestAPolicyChangesTheNodeOfItsCurrentStep: what keeps out of node work's way (a snapshot
// policy's runs) is told the node of the step that runs or waits, every node at the Recovery,
// none at the Preflight, and that it cannot say ("?") when no step does.
func TestAPolicyChangesTheNodeOfItsCurrentStep(t *testing.T) {
	p := &nwv1.OSVersionPolicy{Spec: nwv1.OSVersionPolicySpec{Image: image, UpgradeRecovery: nwv1.RecoveryUpgradeAfterSoak}}
	for i, n := range []string{"edge-1", "edge-2"} {
		p.Status.Nodes = append(p.Status.Nodes, nwv1.NodeOSUpgrade{Name: n, Position: int32(i + 1)})
	}
	plan := osupgrade.PlanOf(p)
	var said []string
	s := workflow.Pending
	say := func() {
		nodes, known := osupgrade.Descriptor.Changing(p)
		if !known {
			nodes = []string{"?"}
		}
		said = append(said, string(s.Step)+":"+strings.Join(nodes, ","))
	}
	move := func(e workflow.Event) {
		next, err := workflow.Next(plan, s, e)
		if err != nil {
			t.Fatal(err)
		}
		workflow.Transition(&p.Status.WorkflowStatus, plan, osupgrade.Kind, 1, s, next, e, "", false, metav1.Now())
		workflow.Admit(&p.Status.WorkflowStatus, next.Step, "", metav1.Now())
		s = next
	}
	say()
	for _, e := range []workflow.Event{workflow.Start, workflow.StepSucceeded, workflow.StepSucceeded, workflow.StepSucceeded} {
		move(e)
		say()
	}
	if got, want := strings.Join(said, " "), ":? Preflight: Node1:edge-1 Node2:edge-2 Recovery:edge-1,edge-2"; got != want {
		t.Errorf("the nodes changed, step by step: %s, want %s", got, want)
	}
}
