package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// fleetImageA is an image Kairos nodes of two members fell back from.
const fleetImageA = "quay.io/kairos/ubuntu:24.04-v2@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// fleetImageB is the image Kairos nodes of site-a and site-b boot, which fell back nowhere.
const fleetImageB = "quay.io/kairos/ubuntu:24.04-v1"

// TestFleet runs kubectl nodewright fleet against an API server that is not a hub (a clear
// error), then against one that serves the fleet CRD and holds five members' summaries: the
// table, degraded first, and each member's command, with every filter, is the golden file
// testdata/fleet.golden (ages aside), with the images the members' nodes fell back from (FELL
// BACK: imageA from 3 nodes on site-a and site-d, and an image whose escape is quoted, not
// printed); the line counting the members by state on top; --limit, and how many it left
// out; --counts (the images a node boots, and those that fell back flagged); -o name. The
// members are listed two at a time: every page is read. -o json and yaml print the summaries
// kept, their boots too, with --limit the remaining count; --counts -o json the counts.
func TestFleet(t *testing.T) {
	ctx := context.Background()
	// Five members in pages of two: every page is read.
	defer func(n int64) { fleetChunkSize = n }(fleetChunkSize)
	fleetChunkSize = 2
	if err := env.Client.List(ctx, &fleetv1alpha1.NodewrightClusterSummaryList{}); meta.IsNoMatchError(err) {
		r := plugin(t, runOpts{}, "fleet")
		r.wantCode(t, ExitFailed)
		want := "Error: this API server does not serve NodewrightClusterSummary (fleet.nodewright.spectrocloud.com/v1alpha1): it is not a fleet hub; point --kubeconfig/--context at the hub"
		if !strings.HasPrefix(r.stderr, want) || r.stdout != "" {
			t.Errorf("against a member: stdout %q, stderr %q, want it to start with %q", r.stdout, r.stderr, want)
		}
	} // else another run of the test installed the CRD already
	if err := env.InstallCRDs(testenv.FleetCRDPaths(env.RepoRoot)...); err != nil {
		t.Fatal(err)
	}

	r := plugin(t, runOpts{}, "fleet")
	r.wantCode(t, ExitOK)
	if r.stdout != "" || r.stderr != "No member clusters found.\n" {
		t.Errorf("an empty hub: stdout %q, stderr %q", r.stdout, r.stderr)
	}

	for _, s := range testenv.FleetMembers() {
		// Kairos nodes fell back from imageA on site-a (two) and site-d (one), and from an
		// image a summary names with a terminal escape on site-d.
		switch s.Name {
		case "site-a":
			s.Status.Boots = &fleetv1alpha1.MemberBoots{KairosNodes: 3, FellBackNodes: 2, FellBack: []fleetv1alpha1.ImageFallbacks{{Image: fleetImageA, Nodes: 2}},
				Nodes: []fleetv1alpha1.MemberNodeBoot{{Name: "n1", Image: fleetImageB}, {Name: "n2", Image: fleetImageB}, {Name: "n3", Image: fleetImageA}}}
		case "site-d":
			s.Status.Boots = &fleetv1alpha1.MemberBoots{KairosNodes: 2, FellBackNodes: 2,
				FellBack: []fleetv1alpha1.ImageFallbacks{{Image: fleetImageA, Nodes: 1}, {Image: "evil\x1b]0;owned\x07:v9", Nodes: 1}}}
		case "site-b":
			s.Status.Boots = &fleetv1alpha1.MemberBoots{KairosNodes: 1, Nodes: []fleetv1alpha1.MemberNodeBoot{{Name: "n1", Image: fleetImageB}}}
		}
		testenv.StoreSummary(t, env.Client, s)
	}
	var b strings.Builder
	for _, args := range [][]string{
		{"fleet"},
		{"fleet", "--degraded"},
		{"fleet", "--profile", "edge-standard"},
		{"fleet", "--workflow", "ReplicationUpgrade"},
		{"fleet", "--workflow", "bondmodeflipplan/to-lacp"},
		{"fleet", "--workflow", "any", "--degraded"},
		{"fleet", "--profile", "edge-standard", "--degraded"},
		{"fleet", "--limit", "2"},
		{"fleet", "--limit", "5"},
		{"fleet", "--degraded", "--limit", "1"},
		{"fleet", "--counts"},
		{"fleet", "--counts", "--profile", "edge-standard"},
		{"fleet", "-o", "name"},
		{"fleet", "-o", "name", "--degraded", "--limit", "2"},
		{"fleet", "--profile", "none-such"},
	} {
		r := plugin(t, runOpts{}, args...)
		r.wantCode(t, ExitOK)
		fmt.Fprintf(&b, "=== kubectl nodewright %s\n%s", strings.Join(args, " "), ages.ReplaceAllString(r.stdout, "   AGE"))
		if r.stderr != "" {
			fmt.Fprintf(&b, "(stderr) %s", r.stderr)
		}
	}
	golden(t, "fleet.golden", b.String())

	r = plugin(t, runOpts{}, "fleet", "--degraded", "-o", "json")
	r.wantCode(t, ExitOK)
	var list fleetv1alpha1.NodewrightClusterSummaryList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
		if s.Kind != "NodewrightClusterSummary" || s.ManagedFields != nil {
			t.Errorf("-o json: item %s has kind %q, managed fields %v", s.Name, s.Kind, s.ManagedFields != nil)
		}
	}
	if list.Kind != "NodewrightClusterSummaryList" || strings.Join(names, ",") != "site-c,site-d,site-e" {
		t.Errorf("-o json --degraded: %s %v", list.Kind, names)
	}
	if boots := list.Items[1].Status.Boots; list.Items[1].Name != "site-d" || boots == nil || len(boots.FellBack) != 2 || boots.FellBack[0].Image != fleetImageA || boots.FellBack[0].Nodes != 1 {
		t.Errorf("-o json --degraded: site-d's boots %+v", list.Items[1].Status.Boots)
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Errorf("the table prints a terminal escape a summary holds")
	}
	r = plugin(t, runOpts{}, "fleet", "--workflow", "ReplicationUpgrade/u1", "-o", "yaml")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "kind: NodewrightClusterSummaryList\n") || !strings.Contains(r.stdout, "name: site-d\n") || strings.Contains(r.stdout, "name: site-b\n") {
		t.Errorf("-o yaml --workflow ReplicationUpgrade/u1:\n%s", r.stdout)
	}

	r = plugin(t, runOpts{}, "fleet", "--limit", "2", "-o", "json")
	r.wantCode(t, ExitOK)
	list = fleetv1alpha1.NodewrightClusterSummaryList{}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(list.Items) != 2 || list.Items[0].Name != "site-c" || list.RemainingItemCount == nil || *list.RemainingItemCount != 3 ||
		r.stderr != "3 more member(s) not shown (--limit 2; --limit 0 prints every one).\n" {
		t.Errorf("--limit 2 -o json: %d items, remaining %v, stderr %q", len(list.Items), list.RemainingItemCount, r.stderr)
	}
	r = plugin(t, runOpts{}, "fleet", "--counts", "-o", "json")
	r.wantCode(t, ExitOK)
	var counts fleetCounts
	if err := json.Unmarshal([]byte(r.stdout), &counts); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if st := counts.States; st.Members != 5 || st.Degraded != 3 || st.Unreachable != 1 || st.Workflow != 3 || st.CheckpointMismatch != 1 {
		t.Errorf("--counts -o json: states %+v", st)
	}
	if images := counts.Versions.OSImage; len(images) != 3 || images[0].Image != fleetImageB || images[0].Members != 2 || images[0].FellBackNodes != 0 ||
		images[1].Image != fleetImageA || images[1].FellBackNodes != 3 {
		t.Errorf("--counts -o json: OS images %+v", images)
	}

	for _, c := range []usageCase{
		{[]string{"fleet", "--limit", "-1"}, `Error: --limit -1: want 0 (every member) or more`},
		{[]string{"fleet", "--counts", "-o", "name"}, `Error: --counts prints counts, not members: -o table, json or yaml`},
		{[]string{"fleet", "--counts", "--limit", "3"}, `Error: --counts counts every member the filters keep: it takes no --limit`},
		{[]string{"fleet", "--workflow", "Migration"}, `Error: --workflow "Migration": want any, KIND or KIND/NAME, KIND one of BondModeFlipPlan, ReplicationUpgrade`},
		{[]string{"fleet", "--workflow", "ReplicationUpgrade/"}, `Error: --workflow "ReplicationUpgrade/": want KIND/NAME with a name`},
		{[]string{"fleet", "-o", "wide"}, `Error: --output "wide": want one of table, json, yaml, name`},
		{[]string{"fleet", "site-a"}, `Error: unknown command "site-a" for "kubectl nodewright fleet"`},
	} {
		r := plugin(t, runOpts{}, c.args...)
		r.wantCode(t, ExitUsage)
		if !strings.HasPrefix(r.stderr, c.want) {
			t.Errorf("%v: stderr %q, want it to start with %q", c.args, r.stderr, c.want)
		}
	}
}
