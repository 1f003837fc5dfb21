package fleetview

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

func summary(phase string, reachable, checkpoint metav1.ConditionStatus, reason string, ws ...fleetv1alpha1.MemberWorkflow) *fleetv1alpha1.NodewrightClusterSummary {
	s := &fleetv1alpha1.NodewrightClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: "m"}}
	s.Status.Phase, s.Status.Workflows = phase, ws
	s.Status.Profile = &fleetv1alpha1.MemberProfile{Name: "edge", Version: "1"}
	if reachable != "" {
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: reachable, Reason: "NotAnswering"})
	}
	if checkpoint != "" {
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionCheckpointConsistent, Status: checkpoint, Reason: reason})
	}
	return s
}

func TestWhy(t *testing.T) {
	for _, c := range []struct {
		s    *fleetv1alpha1.NodewrightClusterSummary
		want string
	}{
		{summary("MultiNode", metav1.ConditionTrue, metav1.ConditionTrue, "Consistent"), ""},
		{summary("SingleNode", metav1.ConditionTrue, metav1.ConditionUnknown, "NoCheckpoint"), ""},
		{summary("SingleNode", metav1.ConditionTrue, "", ""), ""},
		{summary("SingleNode", "", "", ""), "not checked yet"},
		{summary("MultiNode", metav1.ConditionFalse, metav1.ConditionTrue, "Consistent"), "unreachable (NotAnswering)"},
		{summary("Upgrading", metav1.ConditionTrue, metav1.ConditionTrue, "Consistent"), "phase Upgrading"},
		{summary("", metav1.ConditionTrue, "", ""), "no phase"},
		{summary("Degraded", metav1.ConditionFalse, metav1.ConditionFalse, "PublishedDiffersFromRecorded"),
			"unreachable (NotAnswering); phase Degraded; checkpoint PublishedDiffersFromRecorded"},
	} {
		if got := strings.Join(Why(c.s), "; "); got != c.want {
			t.Errorf("%s %v: why %q, want %q", c.s.Status.Phase, c.s.Status.Conditions, got, c.want)
		}
		if Degraded(c.s) != (c.want != "") {
			t.Errorf("%s %v: Degraded %v", c.s.Status.Phase, c.s.Status.Conditions, Degraded(c.s))
		}
	}
}

func TestFilter(t *testing.T) {
	flip := fleetv1alpha1.MemberWorkflow{Kind: "BondModeFlipPlan", Name: "to-lacp"}
	healthy := summary("MultiNode", metav1.ConditionTrue, metav1.ConditionTrue, "Consistent", flip)
	idle := summary("MultiNode", metav1.ConditionTrue, metav1.ConditionTrue, "Consistent")
	for _, c := range []struct {
		f             Filter
		healthy, idle bool
	}{
		{Filter{}, true, true},
		{Filter{Degraded: true}, false, false},
		{Filter{Profile: "edge"}, true, true},
		{Filter{Profile: "other"}, false, false},
		{Filter{Workflow: "any"}, true, false},
		{Filter{Workflow: "ANY"}, true, false},
		{Filter{Workflow: "bondmodeflipplan"}, true, false},
		{Filter{Workflow: "BondModeFlipPlan/to-lacp"}, true, false},
		{Filter{Workflow: "BondModeFlipPlan/other"}, false, false},
		{Filter{Workflow: "ReplicationUpgrade"}, false, false},
	} {
		if got := [2]bool{c.f.Matches(healthy), c.f.Matches(idle)}; got != [2]bool{c.healthy, c.idle} {
			t.Errorf("%+v keeps %v, want %v", c.f, got, [2]bool{c.healthy, c.idle})
		}
	}
	for v, ok := range map[string]bool{"": true, "any": true, "ReplicationUpgrade": true, "replicationupgrade/u1": true,
		"ReplicationUpgrade/": false, "Migration": false, "/x": false} {
		if err := CheckWorkflow(v); (err == nil) != ok {
			t.Errorf("CheckWorkflow(%q) = %v", v, err)
		}
	}
}

// TestContext: the context is named after the registering Secret or ClusterProfile, not after
// the summary, whose name says its source.
func TestContext(t *testing.T) {
	for _, c := range []struct {
		summary, registration, want string
	}{
		{"kubeconfig.site-a", "site-a", "site-a"},
		{"clusterprofile.inventory.site-b", "site-b", "site-b"},
		{"site-c", "", "site-c"},
	} {
		s := &fleetv1alpha1.NodewrightClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: c.summary},
			Spec: fleetv1alpha1.NodewrightClusterSummarySpec{Registration: fleetv1alpha1.Registration{Name: c.registration}}}
		if got := Context(s); got != c.want {
			t.Errorf("%s: context %q, want %q", c.summary, got, c.want)
		}
		if got, want := Command(s), "kubectl --context "+c.want+" nodewright status"; got != want {
			t.Errorf("%s: %q, want %q", c.summary, got, want)
		}
	}
}

// TestFellBackImages: the fleet's count of each image adds the members' counts; a member
// names it once; the most nodes first, then by image; an image with no node is no image.
func TestFellBackImages(t *testing.T) {
	member := func(name string, nodes int32, fell ...fleetv1alpha1.ImageFallbacks) fleetv1alpha1.NodewrightClusterSummary {
		s := fleetv1alpha1.NodewrightClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.Status.Boots = &fleetv1alpha1.MemberBoots{KairosNodes: 3, FellBackNodes: nodes, FellBack: fell}
		return s
	}
	items := []fleetv1alpha1.NodewrightClusterSummary{
		member("site-c", 1, fleetv1alpha1.ImageFallbacks{Image: "b", Nodes: 1}),
		member("site-a", 3, fleetv1alpha1.ImageFallbacks{Image: "a", Nodes: 2}, fleetv1alpha1.ImageFallbacks{Image: "c", Nodes: 1}),
		member("site-b", 1, fleetv1alpha1.ImageFallbacks{Image: "a", Nodes: 1}, fleetv1alpha1.ImageFallbacks{Image: "z", Nodes: 0}),
		{ObjectMeta: metav1.ObjectMeta{Name: "site-d"}},
	}
	var got []string
	for _, f := range FellBackImages(items) {
		got = append(got, fmt.Sprintf("%s:%d:%s", f.Image, f.Nodes, strings.Join(f.Members, ",")))
	}
	if want := "a:3:site-a,site-b b:1:site-c c:1:site-a"; strings.Join(got, " ") != want {
		t.Errorf("got %s, want %s", strings.Join(got, " "), want)
	}
	for i, want := range []string{"1 from b", "2 from a (+1)", "1 from a", "-"} {
		if got := MemberFellBack(&items[i]); got != want {
			t.Errorf("MemberFellBack(%s) = %q, want %q", items[i].Name, got, want)
		}
	}
}
