package agentstatus

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestProfileChanged: a status update that changes the profile in force changes the
// ConfigMap and threshold every node is judged against, so it reconciles every node; other
// status updates (the cluster's phase, its warnings) do not.
func TestProfileChanged(t *testing.T) {
	applied := func(version string, status metav1.ConditionStatus) *nwv1.NodewrightCluster {
		c := &nwv1.NodewrightCluster{}
		if version != "" {
			c.Status.Profile = &nwv1.ActiveProfile{Name: "site", Version: version, Digest: "sha256:" + version}
		}
		c.Status.Conditions = []metav1.Condition{{Type: nwv1.ConditionProfileApplied, Status: status, Reason: "R"}}
		return c
	}
	phase := func(c *nwv1.NodewrightCluster, p nwv1.ClusterPhase) *nwv1.NodewrightCluster {
		c.Status.Phase = p
		return c
	}
	cases := []struct {
		name          string
		before, after *nwv1.NodewrightCluster
		want          bool
	}{
		{"a profile applied", applied("", metav1.ConditionFalse), applied("1.0.0", metav1.ConditionTrue), true},
		{"another version", applied("1.0.0", metav1.ConditionTrue), applied("1.1.0", metav1.ConditionTrue), true},
		{"the profile no longer verifies", applied("1.0.0", metav1.ConditionTrue), applied("1.0.0", metav1.ConditionFalse), true},
		{"only the phase changed", phase(applied("1.0.0", metav1.ConditionTrue), nwv1.ClusterMultiNode),
			phase(applied("1.0.0", metav1.ConditionTrue), nwv1.ClusterDegraded), false},
	}
	for _, tc := range cases {
		if got := profileChanged.Update(event.UpdateEvent{ObjectOld: tc.before, ObjectNew: tc.after}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
