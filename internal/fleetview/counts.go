package fleetview

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// Unknown is the value counted for a member that does not report one (a Kubernetes or
// Nodewright version, a profile) or has not been checked yet.
const Unknown = "-"

// States counts the members by state, each by the rules of the rest of this package. A member
// may be in several: unreachable and degraded, say.
type States struct {
	Members int `json:"members"`
	// Reachable, Unreachable and Unchecked count the Reachable condition's True, False and
	// Unknown (or absent).
	Reachable   int `json:"reachable"`
	Unreachable int `json:"unreachable"`
	Unchecked   int `json:"unchecked"`
	Degraded    int `json:"degraded"`
	// Workflow counts the members running at least one workflow.
	Workflow int `json:"workflow"`
	// CheckpointMismatch counts the members whose checkpoint does not match the recorded one.
	CheckpointMismatch int `json:"checkpointMismatch"`
}

// CountStates counts the members by state.
func CountStates(items []fleetv1alpha1.NodewrightClusterSummary) States {
	st := States{Members: len(items)}
	for i := range items {
		s := &items[i]
		switch Reachable(s) {
		case metav1.ConditionTrue:
			st.Reachable++
		case metav1.ConditionFalse:
			st.Unreachable++
		default:
			st.Unchecked++
		}
		if Degraded(s) {
			st.Degraded++
		}
		if len(s.Status.Workflows) > 0 {
			st.Workflow++
		}
		if Checkpoint(s) == CheckpointMismatch {
			st.CheckpointMismatch++
		}
	}
	return st
}

// String is the states in one line: "3500 members: 3480 reachable, 20 unreachable, 12
// degraded, 5 running a workflow"; a state no member is in is left out, but for reachable and
// degraded.
func (st States) String() string { return st.Of(st.Members) }

// Of is String for members a filter kept of total: "12 of 3500 members: ...".
func (st States) Of(total int) string {
	parts := []string{}
	add := func(n int, what string, always bool) {
		if n > 0 || always {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(st.Reachable, "reachable", true)
	add(st.Unreachable, "unreachable", false)
	add(st.Unchecked, "not checked yet", false)
	add(st.Degraded, "degraded", true)
	add(st.Workflow, "running a workflow", false)
	add(st.CheckpointMismatch, "checkpoint mismatch", false)
	noun := "members"
	if total == 1 {
		noun = "member"
	}
	if total != st.Members {
		return fmt.Sprintf("%d of %d %s: %s", st.Members, total, noun, strings.Join(parts, ", "))
	}
	return fmt.Sprintf("%d %s: %s", st.Members, noun, strings.Join(parts, ", "))
}

// Count is how many members have one value.
type Count struct {
	Value   string `json:"value"`
	Members int    `json:"members"`
}

// ImageCount is how many members boot one OS image on their Kairos nodes.
type ImageCount struct {
	Image string `json:"image"`
	// Members boot Image on at least one of the Kairos nodes their summary lists.
	Members int `json:"members"`
	// Nodes are the listed Kairos nodes that boot it, across the members (a summary lists at
	// most 64 of a member's nodes).
	Nodes int `json:"nodes"`
	// FellBackNodes are the nodes, across the members, whose last fallback was from Image: an
	// image that fell back anywhere is flagged, whether any node boots it now or not.
	FellBackNodes int `json:"fellBackNodes,omitempty"`
}

// Versions counts the members per Kubernetes version, Nodewright version, profile
// (name@version) and OS image, each the most members first, then by value.
type Versions struct {
	Kubernetes []Count      `json:"kubernetes"`
	Nodewright []Count      `json:"nodewright"`
	Profile    []Count      `json:"profile"`
	OSImage    []ImageCount `json:"osImage"`
}

// CountVersions counts the members per version. A member that does not report a value is
// counted under Unknown; the OS images count only members with Kairos nodes, and the images
// nodes fell back from (FellBackImages) though no listed node boots them.
func CountVersions(items []fleetv1alpha1.NodewrightClusterSummary) Versions {
	k8s, nw, profile := map[string]int{}, map[string]int{}, map[string]int{}
	images := map[string]*ImageCount{}
	image := func(name string) *ImageCount {
		ic := images[name]
		if ic == nil {
			ic = &ImageCount{Image: name}
			images[name] = ic
		}
		return ic
	}
	for i := range items {
		s := &items[i]
		k8s[KubernetesVersion(s)]++
		nw[NodewrightVersion(s)]++
		profile[Profile(s)]++
		for _, name := range BootedImages(s) {
			image(name).Members++
		}
		if b := s.Status.Boots; b != nil {
			for _, n := range b.Nodes {
				if n.Image != "" {
					image(n.Image).Nodes++
				}
			}
		}
	}
	for _, f := range FellBackImages(items) {
		image(f.Image).FellBackNodes = int(f.Nodes)
	}
	v := Versions{Kubernetes: sortCounts(k8s), Nodewright: sortCounts(nw), Profile: sortCounts(profile),
		OSImage: make([]ImageCount, 0, len(images))}
	for _, ic := range images {
		v.OSImage = append(v.OSImage, *ic)
	}
	slices.SortFunc(v.OSImage, func(a, b ImageCount) int {
		if c := cmp.Compare(b.Members, a.Members); c != 0 {
			return c
		}
		return cmp.Compare(a.Image, b.Image)
	})
	return v
}

// BootedImages are the OS images the member's listed Kairos nodes boot, each once, sorted.
func BootedImages(s *fleetv1alpha1.NodewrightClusterSummary) []string {
	b := s.Status.Boots
	if b == nil {
		return nil
	}
	var out []string
	for _, n := range b.Nodes {
		if n.Image != "" && !slices.Contains(out, n.Image) {
			out = append(out, n.Image)
		}
	}
	slices.Sort(out)
	return out
}

func sortCounts(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for v, n := range m {
		out = append(out, Count{Value: v, Members: n})
	}
	slices.SortFunc(out, func(a, b Count) int {
		if c := cmp.Compare(b.Members, a.Members); c != 0 {
			return c
		}
		return cmp.Compare(a.Value, b.Value)
	})
	return out
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return Unknown
	}
	return s
}

// KubernetesVersion is the member's Kubernetes version as counted, Unknown when it reports none.
func KubernetesVersion(s *fleetv1alpha1.NodewrightClusterSummary) string {
	return orUnknown(s.Status.KubernetesVersion)
}

// NodewrightVersion is the member's Nodewright version as counted, Unknown when it reports none.
func NodewrightVersion(s *fleetv1alpha1.NodewrightClusterSummary) string {
	return orUnknown(s.Status.NodewrightVersion)
}

// SearchText is what a search of the members looks in, lower case, one field per line: the
// name, the registration's name, the profile (name@version), the Kubernetes and Nodewright
// versions, and each label as key=value. The fleet page's search matches a member when each
// of its words is in it.
func SearchText(s *fleetv1alpha1.NodewrightClusterSummary) string {
	fields := []string{s.Name, s.Spec.Registration.Name, Profile(s), s.Status.KubernetesVersion, s.Status.NodewrightVersion}
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fields = append(fields, k+"="+s.Labels[k])
	}
	return strings.ToLower(strings.Join(fields, "\n"))
}
