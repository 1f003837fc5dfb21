package ui

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/fleetview"
)

// kindMember are the fleet hub's NodewrightClusterSummaries, one per member cluster: the only
// kind a page started with --fleet shows.
const kindMember = "NodewrightClusterSummary"

// fleetSources are the watches of a page pointed at a fleet hub.
func fleetSources() []source {
	return []source{{kind: kindMember, newList: func() client.ObjectList { return &fleetv1alpha1.NodewrightClusterSummaryList{} },
		example: &fleetv1alpha1.NodewrightClusterSummary{}, encode: encodeMember}}
}

// memberView is what `kubectl nodewright fleet` shows of a member, derived by the same rules
// (internal/fleetview), so that the page does not derive it again.
type memberView struct {
	Degraded   bool     `json:"degraded"`
	Why        []string `json:"why"`
	Reachable  string   `json:"reachable"`
	Nodes      string   `json:"nodes"`
	Profile    string   `json:"profile"`
	Checkpoint string   `json:"checkpoint"`
	// FellBack is the member's fallbacks in a few words, "-" when no node fell back.
	FellBack string `json:"fellBack"`
	Context  string `json:"context"`
	Command  string `json:"command"`
	// Kubernetes and Nodewright are the versions as the page counts them, "-" when none is
	// reported; Images the OS images the member's listed Kairos nodes boot.
	Kubernetes string   `json:"kubernetes"`
	Nodewright string   `json:"nodewright"`
	Images     []string `json:"images"`
	// Search is what the page's search looks in (fleetview.SearchText).
	Search string `json:"search"`
}

// shownMember is a summary with its view.
type shownMember struct {
	*fleetv1alpha1.NodewrightClusterSummary
	View memberView `json:"view"`
}

func encodeMember(o client.Object) any {
	s := o.(*fleetv1alpha1.NodewrightClusterSummary).DeepCopy()
	s.ManagedFields = nil
	v := memberView{Why: fleetview.Why(s), Reachable: string(fleetview.Reachable(s)), Nodes: fleetview.Nodes(s),
		Profile: fleetview.Profile(s), Checkpoint: fleetview.Checkpoint(s), FellBack: fleetview.MemberFellBack(s),
		Context: fleetview.Context(s), Command: fleetview.Command(s),
		Kubernetes: fleetview.KubernetesVersion(s), Nodewright: fleetview.NodewrightVersion(s), Images: fleetview.BootedImages(s),
		Search: fleetview.SearchText(s)}
	v.Degraded = len(v.Why) > 0
	if v.Why == nil {
		v.Why = []string{}
	}
	if v.Images == nil {
		v.Images = []string{}
	}
	return shownMember{NodewrightClusterSummary: s, View: v}
}
