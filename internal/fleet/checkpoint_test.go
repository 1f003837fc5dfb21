package fleet

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// TestCheckpointMismatch: a member that publishes a checkpoint other than the one the hub
// recorded, at the same sequence (a rewritten trail) or at an earlier one (a trail or
// ConfigMap put back), shows CheckpointConsistent False with the published checkpoint beside
// the recorded one, which stays; publishing the recorded one again makes it consistent.
func TestCheckpointMismatch(t *testing.T) {
	hub, members := startFleet(t, 1)
	m := members[0]
	createCluster(t, m)
	main, _ := trail(t, "main", 2, 2) // checkpoints at sequences 2 and 5
	fork, _ := trail(t, "fork", 2, 2) // the same sequences, other hashes
	checkpoint := func(line string) *fleetv1alpha1.AuditCheckpoint {
		c, err := parseCheckpoint(Published{Found: true, Line: line})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	at2, at5, fork5 := checkpoint(main[0]), checkpoint(main[1]), checkpoint(fork[1])
	same := func(a, b *fleetv1alpha1.AuditCheckpoint) bool {
		return a != nil && b != nil && a.Sequence == b.Sequence && a.Hash == b.Hash
	}
	// expect waits for the condition's reason and the recorded and published checkpoints.
	expect := func(reason string, recorded, published *fleetv1alpha1.AuditCheckpoint) {
		t.Helper()
		waitSummary(t, hub.Client, "site", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
			c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionCheckpointConsistent)
			want := metav1.ConditionFalse
			if reason == fleetv1alpha1.ReasonCheckpointOK {
				want = metav1.ConditionTrue
			}
			switch {
			case c == nil || c.Status != want || c.Reason != reason:
				return fmt.Sprintf("CheckpointConsistent %+v; want %s %s", c, want, reason)
			case !same(s.Status.Checkpoint, recorded):
				return fmt.Sprintf("recorded %+v; want %+v", s.Status.Checkpoint, recorded)
			case published == nil && s.Status.PublishedCheckpoint != nil, published != nil && !same(s.Status.PublishedCheckpoint, published):
				return fmt.Sprintf("publishedCheckpoint %+v; want %+v", s.Status.PublishedCheckpoint, published)
			}
			return ""
		})
	}

	publish(t, m, main[0])
	registerKubeconfig(t, hub, "site", m, bearer(m.hubToken(t, "hub-credential")))
	expect(fleetv1alpha1.ReasonCheckpointOK, at2, nil)
	publish(t, m, main[1])
	expect(fleetv1alpha1.ReasonCheckpointOK, at5, nil)

	// The same sequence, another hash: the trail was rewritten.
	publish(t, m, fork[1])
	expect(fleetv1alpha1.ReasonCheckpointForked, at5, fork5)
	// A sequence going back.
	publish(t, m, main[0])
	expect(fleetv1alpha1.ReasonCheckpointBehind, at5, at2)
	// The recorded checkpoint published again.
	publish(t, m, main[1])
	expect(fleetv1alpha1.ReasonCheckpointOK, at5, nil)
}
