package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/fleetview"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

const (
	imageA = "quay.io/kairos/ubuntu:24.04-v2@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	imageB = "quay.io/kairos/ubuntu:24.04-v3@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	// imageOld is what the nodes booted instead.
	imageOld = "quay.io/kairos/ubuntu:24.04-v1"
)

// agentBoot is a node's NodewrightAgentStatus with a Kairos boot.
func agentBoot(name, slot, image, bootID string, fb *nodewrightv1alpha1.KairosFallback) *nodewrightv1alpha1.NodewrightAgentStatus {
	a := &nodewrightv1alpha1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}}
	a.Status.OS = &nodewrightv1alpha1.HostOSStatus{Kind: nodewrightv1alpha1.HostOSKairos, BootID: bootID,
		Kairos: &nodewrightv1alpha1.KairosStatus{BootEntry: nodewrightv1alpha1.KairosBootEntry(slot), Image: image, LastFallback: fb}}
	return a
}

func fellBackFrom(image, bootID string) *nodewrightv1alpha1.KairosFallback {
	return &nodewrightv1alpha1.KairosFallback{FromImage: image, ToImage: imageOld, BootID: bootID,
		SeenAt: metav1.NewTime(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))}
}

// report writes the node's NodewrightAgentStatus on the member, as its agent does.
func report(t *testing.T, m *apiServer, a *nodewrightv1alpha1.NodewrightAgentStatus) {
	t.Helper()
	ctx := context.Background()
	status := a.Status
	if err := m.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	a.Status = status
	if err := m.Client.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
}

// TestFallbacksCountedAcrossMembers: two members, each its own API server, each with a node
// whose last fallback was from image A; member 1's other node runs image B in its Active
// slot, member 2's other node is in its Passive slot on purpose (no fallback), and its third
// node is not Kairos. The hub keeps each node's slot, image and last fallback, and the fleet
// counts A twice, on two members; B fell back nowhere and is not counted. Then member 2 (its
// CRD loosened, as a member may) reports a fallback from an image of 4 KiB full of terminal
// escapes, new lines and a right-to-left override: the hub keeps 512 characters of it, none
// of them one a terminal or a page acts on.
func TestFallbacksCountedAcrossMembers(t *testing.T) {
	hub, members := startFleet(t, 2)
	m1, m2 := members[0], members[1]
	for _, m := range members {
		createCluster(t, m)
	}
	report(t, m1, agentBoot("edge-1", "Passive", imageOld, "boot-12", fellBackFrom(imageA, "boot-12")))
	report(t, m1, agentBoot("edge-2", "Active", imageB, "boot-20", nil))
	report(t, m2, agentBoot("edge-1", "Active", imageOld, "boot-31", fellBackFrom(imageA, "boot-30")))
	report(t, m2, agentBoot("edge-2", "Passive", imageOld, "boot-40", nil))
	report(t, m2, &nodewrightv1alpha1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu-1"}})
	registerKubeconfig(t, hub, "site-a", m1, bearer(m1.hubToken(t, "hub-credential")))
	registerKubeconfig(t, hub, "site-b", m2, bearer(m2.hubToken(t, "hub-credential")))

	seen := metav1.NewTime(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
	want := map[string]*fleetv1alpha1.MemberBoots{
		"site-a": {KairosNodes: 2, FellBackNodes: 1, FellBack: []fleetv1alpha1.ImageFallbacks{{Image: imageA, Nodes: 1}},
			Nodes: []fleetv1alpha1.MemberNodeBoot{
				{Name: "edge-1", Slot: "Passive", Image: imageOld, LastFallback: &fleetv1alpha1.MemberFallback{FromImage: imageA, ToImage: imageOld, BootID: "boot-12", SeenAt: &seen, ThisBoot: true}},
				{Name: "edge-2", Slot: "Active", Image: imageB}}},
		"site-b": {KairosNodes: 2, FellBackNodes: 1, FellBack: []fleetv1alpha1.ImageFallbacks{{Image: imageA, Nodes: 1}},
			Nodes: []fleetv1alpha1.MemberNodeBoot{
				{Name: "edge-1", Slot: "Active", Image: imageOld, LastFallback: &fleetv1alpha1.MemberFallback{FromImage: imageA, ToImage: imageOld, BootID: "boot-30", SeenAt: &seen}},
				{Name: "edge-2", Slot: "Passive", Image: imageOld}}},
	}
	for name, w := range want {
		waitSummary(t, hub.Client, name, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
			if !equality.Semantic.DeepEqual(s.Status.Boots, w) {
				return fmt.Sprintf("boots %s, want %s", show(s.Status.Boots), show(w))
			}
			return ""
		})
	}
	fell := fellBackOnHub(t, hub)
	if len(fell) != 1 || fell[0].Image != imageA || fell[0].Nodes != 2 || strings.Join(fell[0].Members, ",") != "site-a,site-b" {
		t.Fatalf("the fleet's fallbacks: %+v; want %s from 2 nodes on site-a and site-b, and no other image", fell, imageA)
	}

	// The attack: a member whose CRD takes any image reports one made to be printed.
	loosenFromImage(t, m2)
	absurd := strings.Repeat("\x1b]0;owned\x07\x1b[2J\n\u202eevil", 200)
	testenv.Eventually(t, patience, func() string {
		a := agentBoot("edge-3", "Passive", imageOld, "boot-50", fellBackFrom(absurd, "boot-50"))
		err := m2.Client.Create(context.Background(), a)
		if apierrors.IsAlreadyExists(err) {
			// Made by an earlier try whose status the CRD still refused: its version is needed.
			err = m2.Client.Get(context.Background(), client.ObjectKeyFromObject(a), a)
		}
		if err != nil {
			return err.Error()
		}
		a.Status = agentBoot("edge-3", "Passive", imageOld, "boot-50", fellBackFrom(absurd, "boot-50")).Status
		if err := m2.Client.Status().Update(context.Background(), a); err != nil {
			return "the member refuses the image still (its CRD not loosened yet): " + err.Error()
		}
		return ""
	})
	waitSummary(t, hub.Client, "site-b", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		b := s.Status.Boots
		if b == nil || b.FellBackNodes != 2 || len(b.FellBack) != 2 || len(b.Nodes) != 3 {
			return fmt.Sprintf("boots %s, want the third node and its fallback", show(b))
		}
		other := b.FellBack[0].Image // the images of one node each: imageA, and the other
		if other == imageA {
			other = b.FellBack[1].Image
		}
		for _, image := range []string{other, b.Nodes[2].LastFallback.FromImage} {
			if n := utf8.RuneCountInString(image); n != fleetv1alpha1.MaxImageLength {
				return fmt.Sprintf("an image of %d characters kept", n)
			}
			if i := strings.IndexFunc(image, func(r rune) bool { return !unicode.IsGraphic(r) }); i >= 0 {
				t.Fatalf("the hub keeps a character a terminal acts on (%q at %d): %q", image[i], i, image)
			}
		}
		return ""
	})
	fell = fellBackOnHub(t, hub)
	if len(fell) != 2 || fell[0].Image != imageA || fell[0].Nodes != 2 || fell[1].Nodes != 1 || strings.Join(fell[1].Members, ",") != "site-b" {
		t.Fatalf("the fleet's fallbacks: %+v", fell)
	}
}

func fellBackOnHub(t *testing.T, hub *apiServer) []fleetview.FellBack {
	t.Helper()
	var list fleetv1alpha1.NodewrightClusterSummaryList
	if err := hub.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items { // named as kubectl nodewright fleet shows them
		list.Items[i].Name = list.Items[i].Spec.Registration.Name
	}
	return fleetview.FellBackImages(list.Items)
}

func show(b *fleetv1alpha1.MemberBoots) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprintf("%+v", *b)
}

// loosenFromImage drops the member's bound on lastFallback.fromImage: the hub cannot count on
// the member's CRDs.
func loosenFromImage(t *testing.T, m *apiServer) {
	t.Helper()
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := m.Client.Get(ctx, client.ObjectKey{Name: "nodewrightagentstatuses.nodewright.spectrocloud.com"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for i := range versions {
		v := versions[i].(map[string]any)
		path := []string{"schema", "openAPIV3Schema", "properties", "status", "properties", "os", "properties", "kairos", "properties",
			"lastFallback", "properties", "fromImage", "maxLength"}
		if _, found, _ := unstructured.NestedFieldNoCopy(v, path...); !found {
			t.Fatalf("the CRD has no %s", strings.Join(path, "."))
		}
		unstructured.RemoveNestedField(v, path...)
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if err := m.Client.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}
}

// TestSetBoots: what the summary says of a member's boots, from what a read kept of its nodes.
func TestSetBoots(t *testing.T) {
	seen := func(agents ...*nodewrightv1alpha1.NodewrightAgentStatus) BootsSeen {
		var b BootsSeen
		for _, a := range agents {
			b.see(a)
		}
		return b
	}
	t.Run("counted per image, the most first", func(t *testing.T) {
		var status fleetv1alpha1.NodewrightClusterSummaryStatus
		setBoots(&status, seen(agentBoot("n3", "Active", imageOld, "b3", fellBackFrom(imageB, "b1")),
			agentBoot("n1", "Passive", imageOld, "b1", fellBackFrom(imageA, "b1")),
			agentBoot("n2", "Passive", imageOld, "b2", fellBackFrom(imageA, "b1")),
			agentBoot("n4", "Recovery", imageOld, "b4", nil),
			&nodewrightv1alpha1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}}), true, nil)
		b := status.Boots
		if b == nil || b.KairosNodes != 4 || b.FellBackNodes != 3 || fmt.Sprint(b.FellBack) != fmt.Sprint([]fleetv1alpha1.ImageFallbacks{{Image: imageA, Nodes: 2}, {Image: imageB, Nodes: 1}}) {
			t.Fatalf("boots %s", show(b))
		}
		var names []string
		for _, n := range b.Nodes {
			names = append(names, fmt.Sprintf("%s:%s:%v", n.Name, n.Slot, n.LastFallback != nil && n.LastFallback.ThisBoot))
		}
		if got := strings.Join(names, " "); got != "n1:Passive:true n2:Passive:false n3:Active:false n4:Recovery:false" {
			t.Errorf("nodes %s", got)
		}
	})
	t.Run("bounded, all counted", func(t *testing.T) {
		var agents []*nodewrightv1alpha1.NodewrightAgentStatus
		for i := range 2000 {
			agents = append(agents, agentBoot(fmt.Sprintf("n%04d", i), "Passive", imageOld, "b", fellBackFrom(fmt.Sprintf("img-%04d", i%1500), "b")))
		}
		b := seen(agents...)
		if len(b.FellBack) != maxCountedImages {
			t.Errorf("%d images counted, want at most %d", len(b.FellBack), maxCountedImages)
		}
		var status fleetv1alpha1.NodewrightClusterSummaryStatus
		setBoots(&status, b, true, nil)
		s := status.Boots
		if s.KairosNodes != 2000 || s.FellBackNodes != 2000 || len(s.Nodes) != fleetv1alpha1.MaxBootNodes || len(s.FellBack) != fleetv1alpha1.MaxFellBackImages ||
			s.FellBack[0] != (fleetv1alpha1.ImageFallbacks{Image: "img-0000", Nodes: 2}) {
			t.Errorf("%d Kairos nodes, %d fell back, %d listed, images %v", s.KairosNodes, s.FellBackNodes, len(s.Nodes), s.FellBack)
		}
	})
	t.Run("no Kairos node", func(t *testing.T) {
		status := fleetv1alpha1.NodewrightClusterSummaryStatus{Boots: &fleetv1alpha1.MemberBoots{KairosNodes: 1}}
		setBoots(&status, seen(&nodewrightv1alpha1.NodewrightAgentStatus{}), true, nil)
		if status.Boots != nil {
			t.Errorf("boots %s", show(status.Boots))
		}
	})
	t.Run("not read yet", func(t *testing.T) {
		was := &fleetv1alpha1.MemberBoots{KairosNodes: 1}
		status := fleetv1alpha1.NodewrightClusterSummaryStatus{Boots: was}
		setBoots(&status, BootsSeen{}, false, nil)
		if status.Boots != was {
			t.Errorf("boots %s; want them left", show(status.Boots))
		}
	})
	t.Run("a role that predates the boots", func(t *testing.T) {
		var status fleetv1alpha1.NodewrightClusterSummaryStatus
		setBoots(&status, BootsSeen{}, false, apierrors.NewForbidden(agentStatuses.GroupResource(), "", fmt.Errorf("no")))
		if status.Boots == nil || !strings.Contains(status.Boots.Unreadable, "fleet.hubReader role predates") {
			t.Errorf("boots %s", show(status.Boots))
		}
		setBoots(&status, BootsSeen{}, false, fmt.Errorf("dial: \x1b[31m%s", strings.Repeat("x", 2000)))
		if u := status.Boots.Unreadable; utf8.RuneCountInString(u) > 1024 || strings.ContainsRune(u, '\x1b') {
			t.Errorf("unreadable %q", u)
		}
	})
}

// FuzzPrintable: whatever a member sends, what the hub keeps is valid UTF-8 of at most n
// characters, each one printed as it is.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{imageA, "", "\x1b]52;c;aGk=\x07", "a\nb\rc\td", "\u202eexe.gpj", "\xff\xfe", strings.Repeat("é", 600), "\u200b\u2066x"} {
		f.Add(s, 512)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = max(0, n%2048)
		got := printable(s, n)
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) > n {
			t.Fatalf("printable(%q, %d) = %q", s, n, got)
		}
		if i := strings.IndexFunc(got, func(r rune) bool { return !unicode.IsGraphic(r) }); i >= 0 {
			t.Fatalf("printable(%q, %d) = %q keeps %q", s, n, got, got[i:])
		}
		if utf8.RuneCountInString(s) <= n && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) < 0 && utf8.ValidString(s) && got != s {
			t.Fatalf("printable(%q, %d) = %q changed a printable string", s, n, got)
		}
	})
}
