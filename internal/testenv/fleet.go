package testenv

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// FleetMembers are the summaries of a small fleet, as nodewright-fleet would write them on
// its hub, for the tests of what shows them (kubectl nodewright fleet, the UI's fleet page):
//
//   - site-a: healthy, MultiNode 3/3, Managed, profile edge-standard@1.2.0, nothing running
//   - site-b: healthy, SingleNode 1/1, a replication upgrade in Place
//   - site-c: unreachable (NotAnswering), a bond-mode flip in Node2Confirm, profile edge-lab
//   - site-d: phase Degraded 1/2, two workflows, no profile, checkpoint behind the recorded one
//   - site-e: registered, not checked yet: nothing known
func FleetMembers() []fleetv1alpha1.NodewrightClusterSummary {
	reachable := func(ok bool, reason string) metav1.Condition {
		c := metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionTrue, Reason: reason, Message: "checked"}
		if !ok {
			c.Status = metav1.ConditionFalse
		}
		return c
	}
	checkpoint := func(ok bool, reason string) metav1.Condition {
		c := metav1.Condition{Type: fleetv1alpha1.ConditionCheckpointConsistent, Status: metav1.ConditionTrue, Reason: reason, Message: "compared"}
		if !ok {
			c.Status = metav1.ConditionFalse
		}
		return c
	}
	standard := &fleetv1alpha1.MemberProfile{Name: "edge-standard", Version: "1.2.0"}
	member := func(name string, st fleetv1alpha1.NodewrightClusterSummaryStatus) fleetv1alpha1.NodewrightClusterSummary {
		return fleetv1alpha1.NodewrightClusterSummary{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: fleetv1alpha1.NodewrightClusterSummarySpec{Registration: fleetv1alpha1.Registration{
				Source: fleetv1alpha1.FromKubeconfigSecret, Namespace: "nodewright-fleet", Name: name}},
			Status: st,
		}
	}
	upgrade := fleetv1alpha1.MemberWorkflow{Kind: "ReplicationUpgrade", Name: "to-two", Phase: "Running", Step: "Place", Progress: "placed 4/8"}
	flip := fleetv1alpha1.MemberWorkflow{Kind: "BondModeFlipPlan", Name: "to-lacp", Phase: "Running", Step: "Node2Confirm"}
	return []fleetv1alpha1.NodewrightClusterSummary{
		member("site-a", fleetv1alpha1.NodewrightClusterSummaryStatus{Phase: "MultiNode", Nodes: fleetv1alpha1.MemberNodes{Ready: 3, Total: 3},
			Management: "Managed", Profile: standard, KubernetesVersion: "v1.34.2", NodewrightVersion: "0.9.0",
			Checkpoint: &fleetv1alpha1.AuditCheckpoint{Sequence: 120, Hash: "aa11"},
			Conditions: []metav1.Condition{reachable(true, fleetv1alpha1.ReasonAnswering), checkpoint(true, fleetv1alpha1.ReasonCheckpointOK)}}),
		member("site-b", fleetv1alpha1.NodewrightClusterSummaryStatus{Phase: "SingleNode", Nodes: fleetv1alpha1.MemberNodes{Ready: 1, Total: 1},
			Management: "Managed", Profile: standard, Workflows: []fleetv1alpha1.MemberWorkflow{upgrade},
			Conditions: []metav1.Condition{reachable(true, fleetv1alpha1.ReasonAnswering), checkpoint(true, fleetv1alpha1.ReasonCheckpointOK)}}),
		member("site-c", fleetv1alpha1.NodewrightClusterSummaryStatus{Phase: "MultiNode", Nodes: fleetv1alpha1.MemberNodes{Ready: 2, Total: 3},
			Management: "Observe", Profile: &fleetv1alpha1.MemberProfile{Name: "edge-lab", Version: "0.3.0"}, Workflows: []fleetv1alpha1.MemberWorkflow{flip},
			Conditions: []metav1.Condition{reachable(false, fleetv1alpha1.ReasonNotAnswering), checkpoint(true, fleetv1alpha1.ReasonCheckpointOK)}}),
		member("site-d", fleetv1alpha1.NodewrightClusterSummaryStatus{Phase: "Degraded", Nodes: fleetv1alpha1.MemberNodes{Ready: 1, Total: 2},
			Management: "Managed", Workflows: []fleetv1alpha1.MemberWorkflow{{Kind: "ReplicationUpgrade", Name: "u1", Phase: "Running", Step: "Sync", Progress: "synced 1/4"}, flip},
			Checkpoint:          &fleetv1alpha1.AuditCheckpoint{Sequence: 40, Hash: "bb22"},
			PublishedCheckpoint: &fleetv1alpha1.AuditCheckpoint{Sequence: 31, Hash: "cc33"},
			Conditions:          []metav1.Condition{reachable(true, fleetv1alpha1.ReasonAnswering), checkpoint(false, fleetv1alpha1.ReasonCheckpointBehind)}}),
		member("site-e", fleetv1alpha1.NodewrightClusterSummaryStatus{}),
	}
}

// StoreSummary creates s on the hub c with its status, as nodewright-fleet would, and deletes
// it when the test ends. The condition times are set now.
func StoreSummary(t testing.TB, c client.Client, s fleetv1alpha1.NodewrightClusterSummary) *fleetv1alpha1.NodewrightClusterSummary {
	t.Helper()
	ctx := context.Background()
	status := *s.Status.DeepCopy()
	for i := range status.Conditions {
		status.Conditions[i].LastTransitionTime = metav1.Now()
	}
	created := s.DeepCopy()
	created.Status = fleetv1alpha1.NodewrightClusterSummaryStatus{}
	if err := c.Create(ctx, created); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), created); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting summary %s: %v", created.Name, err)
		}
	})
	created.Status = status
	if err := c.Status().Update(ctx, created); err != nil {
		t.Fatal(err)
	}
	return created
}
