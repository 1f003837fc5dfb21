package fleetview

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// boots is a member's Kairos nodes, each booting its image, and its fallbacks per image.
func boots(images []string, fellBack ...fleetv1alpha1.ImageFallbacks) *fleetv1alpha1.MemberBoots {
	b := &fleetv1alpha1.MemberBoots{KairosNodes: int32(len(images)), FellBack: fellBack}
	for i, img := range images {
		b.Nodes = append(b.Nodes, fleetv1alpha1.MemberNodeBoot{Name: string(rune('a' + i)), Image: img})
	}
	for _, f := range fellBack {
		b.FellBackNodes += f.Nodes
	}
	return b
}

func TestCountStates(t *testing.T) {
	flip := fleetv1alpha1.MemberWorkflow{Kind: "BondModeFlipPlan", Name: "to-lacp"}
	for _, c := range []struct {
		name  string
		items []*fleetv1alpha1.NodewrightClusterSummary
		want  States
		line  string
	}{
		{"none", nil, States{}, "0 members: 0 reachable, 0 degraded"},
		{"one healthy", []*fleetv1alpha1.NodewrightClusterSummary{summary("MultiNode", metav1.ConditionTrue, metav1.ConditionTrue, "Consistent")},
			States{Members: 1, Reachable: 1}, "1 member: 1 reachable, 0 degraded"},
		{"every state", []*fleetv1alpha1.NodewrightClusterSummary{
			summary("MultiNode", metav1.ConditionTrue, metav1.ConditionTrue, "Consistent"),
			summary("MultiNode", metav1.ConditionTrue, metav1.ConditionTrue, "Consistent", flip),
			summary("MultiNode", metav1.ConditionFalse, metav1.ConditionTrue, "Consistent", flip),
			summary("SingleNode", "", "", ""),
			summary("Degraded", metav1.ConditionTrue, metav1.ConditionFalse, "PublishedBehindRecorded"),
			summary("SingleNode", metav1.ConditionUnknown, metav1.ConditionUnknown, "NoCheckpoint"),
		}, States{Members: 6, Reachable: 3, Unreachable: 1, Unchecked: 2, Degraded: 4, Workflow: 2, CheckpointMismatch: 1},
			"6 members: 3 reachable, 1 unreachable, 2 not checked yet, 4 degraded, 2 running a workflow, 1 checkpoint mismatch"},
	} {
		items := make([]fleetv1alpha1.NodewrightClusterSummary, len(c.items))
		for i, s := range c.items {
			items[i] = *s
		}
		got := CountStates(items)
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		if got.String() != c.line {
			t.Errorf("%s: %q, want %q", c.name, got.String(), c.line)
		}
		if of, want := got.Of(3500), fmt.Sprintf("%d of 3500 members: ", got.Members); !strings.HasPrefix(of, want) || of[len(want):] != c.line[strings.Index(c.line, ": ")+2:] {
			t.Errorf("%s: of 3500: %q", c.name, of)
		}
	}
}

func TestCountVersions(t *testing.T) {
	const v1, v2, v3 = "quay.io/kairos/ubuntu:v1", "quay.io/kairos/ubuntu:v2", "quay.io/kairos/ubuntu:v3"
	member := func(name, k8s, nw string, profile *fleetv1alpha1.MemberProfile, b *fleetv1alpha1.MemberBoots) fleetv1alpha1.NodewrightClusterSummary {
		s := fleetv1alpha1.NodewrightClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.Status.KubernetesVersion, s.Status.NodewrightVersion, s.Status.Profile, s.Status.Boots = k8s, nw, profile, b
		return s
	}
	std := &fleetv1alpha1.MemberProfile{Name: "edge-standard", Version: "1.2.0"}
	for _, c := range []struct {
		name  string
		items []fleetv1alpha1.NodewrightClusterSummary
		want  Versions
	}{
		{"none", nil, Versions{Kubernetes: []Count{}, Nodewright: []Count{}, Profile: []Count{}, OSImage: []ImageCount{}}},
		{"nothing reported", []fleetv1alpha1.NodewrightClusterSummary{member("a", "", " ", nil, nil)}, Versions{
			Kubernetes: []Count{{Unknown, 1}}, Nodewright: []Count{{Unknown, 1}}, Profile: []Count{{Unknown, 1}}, OSImage: []ImageCount{}}},
		{"most members first, then by value; a member once per image, its nodes each", []fleetv1alpha1.NodewrightClusterSummary{
			member("a", "v1.34.2", "0.9.0", std, boots([]string{v2, v2, v1})),
			member("b", "v1.34.2", "0.9.1", std, boots([]string{v2})),
			member("c", "v1.33.5", "0.9.0", &fleetv1alpha1.MemberProfile{Name: "edge-lab"}, boots([]string{v1, ""})),
			member("d", "v1.35.0", "0.9.0", &fleetv1alpha1.MemberProfile{Name: "edge-standard", Version: "1.3.0"}, nil),
		}, Versions{
			Kubernetes: []Count{{"v1.34.2", 2}, {"v1.33.5", 1}, {"v1.35.0", 1}},
			Nodewright: []Count{{"0.9.0", 3}, {"0.9.1", 1}},
			Profile:    []Count{{"edge-standard@1.2.0", 2}, {"edge-lab", 1}, {"edge-standard@1.3.0", 1}},
			OSImage:    []ImageCount{{Image: v1, Members: 2, Nodes: 2}, {Image: v2, Members: 2, Nodes: 3}},
		}},
		{"an image that fell back is flagged, booted or not", []fleetv1alpha1.NodewrightClusterSummary{
			member("a", "v1.34.2", "0.9.0", std, boots([]string{v1, v1}, fleetv1alpha1.ImageFallbacks{Image: v2, Nodes: 2})),
			member("b", "v1.34.2", "0.9.0", std, boots([]string{v2, v1}, fleetv1alpha1.ImageFallbacks{Image: v2, Nodes: 1}, fleetv1alpha1.ImageFallbacks{Image: v3, Nodes: 1})),
		}, Versions{
			Kubernetes: []Count{{"v1.34.2", 2}}, Nodewright: []Count{{"0.9.0", 2}}, Profile: []Count{{"edge-standard@1.2.0", 2}},
			OSImage: []ImageCount{{Image: v1, Members: 2, Nodes: 3}, {Image: v2, Members: 1, Nodes: 1, FellBackNodes: 3}, {Image: v3, FellBackNodes: 1}},
		}},
	} {
		if got := CountVersions(c.items); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestSearchText(t *testing.T) {
	s := summary("MultiNode", metav1.ConditionTrue, metav1.ConditionTrue, "Consistent")
	s.Name, s.Spec.Registration.Name = "kubeconfig.Store-042", "Store-042"
	s.Labels = map[string]string{"region": "EU-West", "fleet.nodewright.spectrocloud.com/tier": "gold"}
	s.Status.KubernetesVersion, s.Status.NodewrightVersion = "v1.34.2", "0.9.0"
	want := "kubeconfig.store-042\nstore-042\nedge@1\nv1.34.2\n0.9.0\nfleet.nodewright.spectrocloud.com/tier=gold\nregion=eu-west"
	if got := SearchText(s); got != want {
		t.Errorf("SearchText %q, want %q", got, want)
	}
}
