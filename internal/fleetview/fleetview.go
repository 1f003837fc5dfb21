// Package fleetview is what `kubectl nodewright fleet` and the UI's fleet page show of the
// hub's NodewrightClusterSummaries: whether a member is degraded and why, its checkpoint in one
// word, the filters, and the command to act on the member with. Pure: no client.
//
// The hub only reads its members; acting on one is done against that member's own API
// server, with a kubeconfig context of its own. The view assumes that context is named after
// the member: the name of the registering Secret or ClusterProfile on the hub (the summary's
// name is that name with its source, "kubeconfig.<secret>" or
// "clusterprofile.<namespace>.<name>").
package fleetview

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// The checkpoint states, in one word.
const (
	CheckpointOK       = "ok"
	CheckpointMismatch = "mismatch"
	// CheckpointNone: the member publishes none yet, or the hub has not compared.
	CheckpointNone = "-"
)

// The workflow kinds a member reports, as --workflow takes them.
var workflowKinds = []string{"BondModeFlipPlan", "ReplicationUpgrade"}

// WorkflowAny matches a member running any workflow.
const WorkflowAny = "any"

// Reachable is the Reachable condition's status: True, False or Unknown (not checked yet).
func Reachable(s *fleetv1alpha1.NodewrightClusterSummary) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

// Checkpoint is the CheckpointConsistent condition in one word.
func Checkpoint(s *fleetv1alpha1.NodewrightClusterSummary) string {
	c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionCheckpointConsistent)
	switch {
	case c == nil:
		return CheckpointNone
	case c.Status == metav1.ConditionTrue:
		return CheckpointOK
	case c.Status == metav1.ConditionFalse:
		return CheckpointMismatch
	}
	return CheckpointNone
}

// Why says why a member is degraded, one phrase per reason; none when it is healthy. A member
// is degraded when it is not reachable (False, or not checked yet), when its cluster's phase is
// neither SingleNode nor MultiNode (an empty phase: the hub has seen no NodewrightCluster),
// or when its checkpoint does not match the one the hub recorded.
func Why(s *fleetv1alpha1.NodewrightClusterSummary) []string {
	var why []string
	if c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable); c == nil {
		why = append(why, "not checked yet")
	} else if c.Status != metav1.ConditionTrue {
		why = append(why, "unreachable ("+c.Reason+")")
	}
	switch p := s.Status.Phase; p {
	case "SingleNode", "MultiNode":
	case "":
		why = append(why, "no phase")
	default:
		why = append(why, "phase "+p)
	}
	if Checkpoint(s) == CheckpointMismatch {
		c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionCheckpointConsistent)
		why = append(why, "checkpoint "+c.Reason)
	}
	return why
}

// Degraded reports whether Why finds anything.
func Degraded(s *fleetv1alpha1.NodewrightClusterSummary) bool { return len(Why(s)) > 0 }

// Nodes is ready/total, or "-" before the hub saw the member's cluster.
func Nodes(s *fleetv1alpha1.NodewrightClusterSummary) string {
	n := s.Status.Nodes
	if n.Total == 0 && n.Ready == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", n.Ready, n.Total)
}

// Workflow is one workflow as a line: "ReplicationUpgrade/to-three Place 4/8".
func Workflow(w fleetv1alpha1.MemberWorkflow) string {
	parts := []string{w.Kind + "/" + w.Name}
	for _, p := range []string{w.Step, w.Progress} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, " ")
}

// Profile is the profile in force, "name@version", or "-".
func Profile(s *fleetv1alpha1.NodewrightClusterSummary) string {
	p := s.Status.Profile
	switch {
	case p == nil || p.Name == "":
		return "-"
	case p.Version == "":
		return p.Name
	}
	return p.Name + "@" + p.Version
}

// Context is the kubeconfig context to act on the member with: the name of its
// registration, or else the summary's.
func Context(s *fleetv1alpha1.NodewrightClusterSummary) string {
	if name := s.Spec.Registration.Name; name != "" {
		return name
	}
	return s.Name
}

// Command is the command that shows the member, run against its own API server.
func Command(s *fleetv1alpha1.NodewrightClusterSummary) string {
	return "kubectl --context " + Context(s) + " nodewright status"
}

// Filter selects members; its zero value selects every one.
type Filter struct {
	// Degraded keeps only the degraded members.
	Degraded bool
	// Profile keeps the members whose profile in force has this name.
	Profile string
	// Workflow keeps the members running a workflow: "any", a KIND (case-insensitive), or
	// KIND/NAME.
	Workflow string
}

// CheckWorkflow refuses a --workflow value whose kind no member reports, naming the kinds.
func CheckWorkflow(v string) error {
	if v == "" || strings.EqualFold(v, WorkflowAny) {
		return nil
	}
	kind, name, hasName := strings.Cut(v, "/")
	if hasName && name == "" {
		return fmt.Errorf("%q: want KIND/NAME with a name", v)
	}
	if !slices.ContainsFunc(workflowKinds, func(k string) bool { return strings.EqualFold(k, kind) }) {
		return fmt.Errorf("%q: want %s, KIND or KIND/NAME, KIND one of %s", v, WorkflowAny, strings.Join(workflowKinds, ", "))
	}
	return nil
}

// Matches reports whether the filter keeps s.
func (f Filter) Matches(s *fleetv1alpha1.NodewrightClusterSummary) bool {
	if f.Degraded && !Degraded(s) {
		return false
	}
	if f.Profile != "" && (s.Status.Profile == nil || s.Status.Profile.Name != f.Profile) {
		return false
	}
	if f.Workflow == "" {
		return true
	}
	kind, name, hasName := strings.Cut(f.Workflow, "/")
	return slices.ContainsFunc(s.Status.Workflows, func(w fleetv1alpha1.MemberWorkflow) bool {
		switch {
		case strings.EqualFold(f.Workflow, WorkflowAny):
			return true
		case !strings.EqualFold(w.Kind, kind):
			return false
		}
		return !hasName || w.Name == name
	})
}

// SortDegradedFirst orders members degraded first, then by name.
func SortDegradedFirst(items []fleetv1alpha1.NodewrightClusterSummary) {
	slices.SortStableFunc(items, func(a, b fleetv1alpha1.NodewrightClusterSummary) int {
		if da, db := Degraded(&a), Degraded(&b); da != db {
			if da {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// FellBack is one image that Kairos nodes fell back from, across the members.
type FellBack struct {
	// Image is the image the nodes' last fallback was from (lastFallback.fromImage).
	Image string `json:"image"`
	// Nodes counts the nodes whose last fallback was from Image, on every member.
	Nodes int32 `json:"nodes"`
	// Members are the members with such a node, by name.
	Members []string `json:"members"`
}

// FellBackImages counts, across the members, the nodes whose last fallback was from each
// image, the most nodes first, then by image. A member counts the images of its own summary
// (status.boots.fellBack, at most 16 images, each with its count); an image that fell back
// nowhere is not listed.
func FellBackImages(items []fleetv1alpha1.NodewrightClusterSummary) []FellBack {
	byImage := map[string]*FellBack{}
	for i := range items {
		b := items[i].Status.Boots
		if b == nil {
			continue
		}
		for _, f := range b.FellBack {
			if f.Nodes <= 0 {
				continue
			}
			fb := byImage[f.Image]
			if fb == nil {
				fb = &FellBack{Image: f.Image}
				byImage[f.Image] = fb
			}
			fb.Nodes += f.Nodes
			if !slices.Contains(fb.Members, items[i].Name) {
				fb.Members = append(fb.Members, items[i].Name)
			}
		}
	}
	out := make([]FellBack, 0, len(byImage))
	for _, fb := range byImage {
		slices.Sort(fb.Members)
		out = append(out, *fb)
	}
	slices.SortFunc(out, func(a, b FellBack) int {
		if c := cmp.Compare(b.Nodes, a.Nodes); c != 0 {
			return c
		}
		return cmp.Compare(a.Image, b.Image)
	})
	return out
}

// MemberFellBack is the member's fallbacks in a few words: "2 from IMAGE" for its image
// with the most, "(+N)" for the nodes that fell back from others; "-" when none did.
func MemberFellBack(s *fleetv1alpha1.NodewrightClusterSummary) string {
	b := s.Status.Boots
	if b == nil || b.FellBackNodes == 0 || len(b.FellBack) == 0 {
		return "-"
	}
	f := b.FellBack[0]
	out := fmt.Sprintf("%d from %s", f.Nodes, f.Image)
	if more := b.FellBackNodes - f.Nodes; more > 0 {
		out += fmt.Sprintf(" (+%d)", more)
	}
	return out
}
