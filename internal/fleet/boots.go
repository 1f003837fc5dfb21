package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// What the hub keeps of a member's nodes' boots is bounded, as its workflows are: it reads
// the NodewrightAgentStatuses a page at a time (each may be large: its DRBD resources and
// peers), keeps of each Kairos node only its slot, image and last fallback, every string
// clipped and stripped of what a terminal or a page would act on, and counts the fallbacks
// per image over every node, listed or not.
const (
	// maxCountedImages is how many distinct images one read counts fallbacks from; the
	// fallbacks from any other image count in FellBackNodes alone. A member whose every node
	// names an image of its own cannot make the hub hold more.
	maxCountedImages = 1024
)

// agentStatuses is the resource the boots are read from.
var agentStatuses = nodewrightv1alpha1.GroupVersion.WithResource("nodewrightagentstatuses")

// BootsSeen is what the hub keeps of a member's nodes' boots.
type BootsSeen struct {
	// Nodes are the first MaxBootNodes Kairos nodes read, by name.
	Nodes []fleetv1alpha1.MemberNodeBoot
	// KairosNodes counts every node that reports a Kairos boot.
	KairosNodes int32
	// FellBack counts, for the first maxCountedImages images read, the nodes whose last
	// fallback was from it.
	FellBack map[string]int32
	// FellBackNodes counts every node with a last fallback.
	FellBackNodes int32
}

// see keeps the node's boot if it reports a Kairos one.
func (b *BootsSeen) see(a *nodewrightv1alpha1.NodewrightAgentStatus) {
	host := a.Status.OS
	if host == nil || host.Kairos == nil {
		return
	}
	k := host.Kairos
	b.KairosNodes++
	node := fleetv1alpha1.MemberNodeBoot{Name: printable(a.Name, 253), Slot: printable(string(k.BootEntry), 32),
		Image: printable(k.Image, fleetv1alpha1.MaxImageLength)}
	if f := k.LastFallback; f != nil && f.FromImage != "" {
		from := printable(f.FromImage, fleetv1alpha1.MaxImageLength)
		node.LastFallback = &fleetv1alpha1.MemberFallback{FromImage: from, ToImage: printable(f.ToImage, fleetv1alpha1.MaxImageLength),
			BootID: printable(f.BootID, 64), ThisBoot: f.BootID != "" && f.BootID == host.BootID}
		if !f.SeenAt.IsZero() {
			seen := f.SeenAt
			node.LastFallback.SeenAt = &seen
		}
		b.FellBackNodes++
		if _, counted := b.FellBack[from]; counted || len(b.FellBack) < maxCountedImages {
			if b.FellBack == nil {
				b.FellBack = map[string]int32{}
			}
			b.FellBack[from]++
		}
	}
	if len(b.Nodes) < fleetv1alpha1.MaxBootNodes {
		b.Nodes = append(b.Nodes, node)
	}
}

// printable is s clipped to n characters, each one a person reads as it is: an invalid UTF-8
// sequence, a control character (a terminal's escape sequences, a new line that would forge a
// row of a table) or a format character (a right-to-left override that shows an image under
// another name) is replaced by U+FFFD. A member's report is data a person reads in a terminal
// (kubectl nodewright fleet) or a page, never markup or commands.
func printable(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if !unicode.IsGraphic(r) {
			return '\uFFFD'
		}
		return r
	}, s)
	return clip(s, n)
}

// readBoots reads the member's NodewrightAgentStatuses a page at a time. A member that does
// not serve the kind (an older member) has no Kairos node; a list whose continuation expired
// meanwhile starts again.
func readBoots(ctx context.Context, c client.Reader) (BootsSeen, error) {
	for {
		var seen BootsSeen
		err := pages(ctx, c, func() *nodewrightv1alpha1.NodewrightAgentStatusList {
			return &nodewrightv1alpha1.NodewrightAgentStatusList{}
		},
			func(l *nodewrightv1alpha1.NodewrightAgentStatusList) {
				for i := range l.Items {
					seen.see(&l.Items[i])
				}
			})
		switch {
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			return BootsSeen{}, nil
		case apierrors.IsResourceExpired(err):
			continue
		case err != nil:
			return BootsSeen{}, fmt.Errorf("listing NodewrightAgentStatuses: %w", err)
		}
		return seen, nil
	}
}

func equalBoots(a, b BootsSeen) bool { return equality.Semantic.DeepEqual(a, b) }

// bootReader keeps BootsSeen for each engaged member.
type bootReader = memberReader[BootsSeen]

func newBootReader(wake chan<- event.TypedGenericEvent[string]) *bootReader {
	r := newMemberReader("boots", []schema.GroupVersionResource{agentStatuses}, readBoots, equalBoots, wake)
	// A node's boot changes when it boots; its NodewrightAgentStatus changes far more often
	// (its DRBD resources, its heartbeat): polled with the health checks, not watched.
	r.polled = true
	return r
}

// whyUnreadable is the summary's boots.unreadable for a read of the member's nodes that failed.
func whyUnreadable(err error) string {
	if apierrors.IsForbidden(err) {
		return "the hub may not list the member's NodewrightAgentStatuses: its fleet.hubReader role predates the hub reading them; upgrade the member's chart"
	}
	return printable("reading the member's NodewrightAgentStatuses: "+err.Error(), 1024)
}

// setBoots sets the member's boots from the last read of its nodes that succeeded (none
// without a Kairos node); before any did, it says why the first failed, or leaves the boots
// as they were while none ended yet.
func setBoots(status *fleetv1alpha1.NodewrightClusterSummaryStatus, b BootsSeen, read bool, err error) {
	switch {
	case !read && err != nil:
		status.Boots = &fleetv1alpha1.MemberBoots{Unreadable: whyUnreadable(err)}
		return
	case !read:
		return
	case b.KairosNodes == 0:
		status.Boots = nil
		return
	}
	boots := &fleetv1alpha1.MemberBoots{KairosNodes: b.KairosNodes, FellBackNodes: b.FellBackNodes,
		Nodes: slices.SortedFunc(slices.Values(b.Nodes), func(x, y fleetv1alpha1.MemberNodeBoot) int { return cmp.Compare(x.Name, y.Name) })}
	for _, image := range sets.List(sets.KeySet(b.FellBack)) {
		boots.FellBack = append(boots.FellBack, fleetv1alpha1.ImageFallbacks{Image: image, Nodes: b.FellBack[image]})
	}
	slices.SortStableFunc(boots.FellBack, func(x, y fleetv1alpha1.ImageFallbacks) int { return cmp.Compare(y.Nodes, x.Nodes) })
	boots.FellBack = boots.FellBack[:min(len(boots.FellBack), fleetv1alpha1.MaxFellBackImages)]
	if len(boots.Nodes) == 0 {
		boots.Nodes = nil
	}
	if len(boots.FellBack) == 0 {
		boots.FellBack = nil
	}
	status.Boots = boots
}
