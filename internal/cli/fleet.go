package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/fleetview"
)

const fleetHelp = `List the member clusters of a fleet hub, from the NodewrightClusterSummaries that
nodewright-fleet keeps there: run it against the hub (--kubeconfig/--context name the hub's
API server). Degraded members come first, then by name.

The first line counts the members the filters keep by state: "3500 members: 3480 reachable,
20 unreachable, 12 degraded, 5 running a workflow" (also: not checked yet, checkpoint mismatch).

Columns: NAME (the member's name on the hub: its registering Secret or ClusterProfile),
REACHABLE (the hub's health check: True, False, Unknown before the first), PHASE (of the
member's NodewrightCluster), NODES (ready/total), MANAGEMENT, WORKFLOW (the first unfinished
flip or upgrade: kind/name, step, progress; "(+N)" when more run), PROFILE (name@version in
force), CHECKPOINT (ok: the published audit checkpoint matches the one the hub recorded;
mismatch: it is behind, different or gone; -: none yet), AGE.

A member is degraded when it is not reachable (or not checked yet), its phase is neither
SingleNode nor MultiNode, or its checkpoint does not match.

--limit N prints the first N members of that order, and says how many more there are (-o
json and yaml set the list's metadata.remainingItemCount; -o name says it on stderr).

FELL BACK, under the table when a Kairos node of a member the filters keep fell back (shown
under --limit or not): each image some node's last fallback was from (its boot failed and GRUB
booted the previous image), the nodes that fell back from it across those members, and the
first five members ("(+N)" the others). The hub reads it from the nodes'
NodewrightAgentStatuses (status.os.kairos.lastFallback); each member's summary has its own in
status.boots (its nodes' slot, image and last fallback, and its count per image), which -o
json and -o yaml print.

--counts prints, in place of the members, the state line and the members counted per
Kubernetes version, Nodewright version, profile (name@version; - when none is reported) and
OS image (the images the members' listed Kairos nodes boot: MEMBERS booting it, NODES booting
it, FELL BACK the nodes whose last fallback was from it, across the members, also for an image
no node boots any more). With -o json or yaml it prints the same counts as data.

The hub never acts on a member. Under the table each member's command is printed, to run
against the member's own API server with a kubeconfig context named after the member (the
summary's name); act there with the usual commands (flip, upgrade, approve, ...).

-o json and -o yaml print the listed summaries as a NodewrightClusterSummaryList; -o name
prints one nodewrightclustersummary.fleet.nodewright.spectrocloud.com/NAME per line, as
kubectl get -o name does.

The summaries are listed 500 at a time, as kubectl get does.

Exit codes: 0 listed (also when none match), 1 the hub cannot be read (or does not serve
NodewrightClusterSummary), 2 usage.`

const fleetExamples = `  # Every member, degraded first, and the command to act on each with
  kubectl nodewright fleet --context hub

  # The 20 members that need a person most, and how many more there are
  kubectl nodewright fleet --context hub --degraded --limit 20

  # How many members run each Kubernetes and Nodewright version, profile and OS image
  kubectl nodewright fleet --context hub --counts

  # The members on profile edge-standard, and those running a replication upgrade
  kubectl nodewright fleet --context hub --profile edge-standard
  kubectl nodewright fleet --context hub --workflow ReplicationUpgrade

  # The degraded members' summaries, one name a line, for a script
  kubectl nodewright fleet --context hub --degraded -o name

  # The members where a node fell back from an image, and how many nodes
  kubectl nodewright fleet --context hub -o json | jq -r '.items[] | .metadata.name as $m | .status.boots.fellBack[]? | "\($m) \(.nodes) \(.image)"'`

func newFleetCommand(f *Factory) *cobra.Command {
	o := &fleetOptions{}
	cmd := &cobra.Command{
		Use:     "fleet",
		Short:   "List a fleet hub's member clusters: reachable, phase, nodes, workflow, profile, checkpoint, and how to act on each",
		Long:    fleetHelp,
		Example: fleetExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&o.output, outputTable, outputJSON, outputYAML, fleetOutputName); err != nil {
				return err
			}
			if err := fleetview.CheckWorkflow(o.filter.Workflow); err != nil {
				return usageErrorf("--workflow %v", err)
			}
			switch {
			case o.limit < 0:
				return usageErrorf("--limit %d: want 0 (every member) or more", o.limit)
			case o.counts && o.output == fleetOutputName:
				return usageErrorf("--counts prints counts, not members: -o table, json or yaml")
			case o.counts && o.limit > 0:
				return usageErrorf("--counts counts every member the filters keep: it takes no --limit")
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			list, err := listSummaries(cmd.Context(), c)
			if err != nil {
				return fleetError(err)
			}
			return o.print(f, list)
		},
	}
	cmd.Flags().BoolVar(&o.filter.Degraded, "degraded", false, "Only the degraded members: unreachable, phase not SingleNode or MultiNode, or checkpoint mismatch.")
	cmd.Flags().StringVar(&o.filter.Profile, "profile", "", "Only the members whose EdgeProfile in force has this name.")
	cmd.Flags().StringVar(&o.filter.Workflow, "workflow", "", "Only the members running a workflow: any, a KIND (BondModeFlipPlan, ReplicationUpgrade) or KIND/NAME.")
	_ = cmd.RegisterFlagCompletionFunc("workflow", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{fleetview.WorkflowAny, "BondModeFlipPlan", "ReplicationUpgrade"}, cobra.ShellCompDirectiveNoFileComp
	})
	cmd.Flags().IntVar(&o.limit, "limit", 0, "Print only the first N members (degraded first, then by name) and how many more there are; 0 prints every one.")
	cmd.Flags().BoolVar(&o.counts, "counts", false, "Print the members counted by state and per Kubernetes version, Nodewright version, profile and OS image, in place of the members.")
	outputFlag(cmd, &o.output, outputTable, outputJSON, outputYAML, fleetOutputName)
	return cmd
}

// fleetOutputName is -o name: one kind.group/name per member, as kubectl get -o name prints.
const fleetOutputName = "name"

// fleetChunkSize is how many summaries one list request asks for, as kubectl get's
// --chunk-size does: a hub of 3,500 members answers in pages, not in one response of several
// MiB that the API server builds whole. A variable for the tests.
var fleetChunkSize int64 = 500

// fleetResource is what -o name prints before a member's name.
var fleetResource = "nodewrightclustersummary." + fleetv1alpha1.GroupVersion.Group

type fleetOptions struct {
	output string
	filter fleetview.Filter
	limit  int
	counts bool
}

// listSummaries lists the hub's summaries fleetChunkSize at a time. A continue token that
// expired between two pages (the hub compacted its history) starts the list again whole.
func listSummaries(ctx context.Context, c client.Client) (*fleetv1alpha1.NodewrightClusterSummaryList, error) {
	all := &fleetv1alpha1.NodewrightClusterSummaryList{}
	for cont := ""; ; {
		page := &fleetv1alpha1.NodewrightClusterSummaryList{}
		err := c.List(ctx, page, client.Limit(fleetChunkSize), client.Continue(cont))
		if apierrors.IsResourceExpired(err) && cont != "" {
			err = c.List(ctx, all)
			return all, err
		}
		if err != nil {
			return nil, err
		}
		all.Items = append(all.Items, page.Items...)
		all.ResourceVersion = page.ResourceVersion
		if cont = page.Continue; cont == "" {
			return all, nil
		}
	}
}

// print writes what o asks for of the hub's members, list.
func (o *fleetOptions) print(f *Factory, list *fleetv1alpha1.NodewrightClusterSummaryList) error {
	out, errOut := f.Streams().Out, f.Streams().ErrOut
	total := len(list.Items)
	kept := list.Items[:0]
	for i := range list.Items {
		if o.filter.Matches(&list.Items[i]) {
			kept = append(kept, list.Items[i])
		}
	}
	list.Items = kept
	fleetview.SortDegradedFirst(list.Items)
	if o.counts {
		return o.printCounts(f, list.Items, total)
	}
	all := list.Items
	hidden := 0
	if o.limit > 0 && len(all) > o.limit {
		hidden = len(all) - o.limit
		list.Items = all[:o.limit]
	}
	notShown := fmt.Sprintf("%d more member(s) not shown (--limit %d; --limit 0 prints every one).", hidden, o.limit)
	switch o.output {
	case fleetOutputName:
		for i := range list.Items {
			if _, err := fmt.Fprintf(out, "%s/%s\n", fleetResource, list.Items[i].Name); err != nil {
				return err
			}
		}
		if hidden > 0 {
			fmt.Fprintln(errOut, notShown)
		}
		return nil
	case outputJSON, outputYAML:
		if hidden > 0 {
			remaining := int64(hidden)
			list.RemainingItemCount = &remaining
			fmt.Fprintln(errOut, notShown)
		}
		return printObjects(out, o.output, list)
	}
	if len(all) == 0 {
		msg := "No member clusters found."
		if o.filter != (fleetview.Filter{}) {
			msg = fmt.Sprintf("No member clusters match (of %d).", total)
		}
		fmt.Fprintln(errOut, msg)
		return nil
	}
	p := palette{on: f.Color(out)}
	if _, err := fmt.Fprintln(out, o.summaryLine(all, total)+"\n"); err != nil {
		return err
	}
	if err := fleetTable(list.Items, f.Now()).write(out, p); err != nil {
		return err
	}
	if hidden > 0 {
		if _, err := fmt.Fprintln(out, notShown); err != nil {
			return err
		}
	}
	// Every member the filters keep, shown or not: an image that fell back anywhere is flagged.
	if err := writeFellBack(out, all, p); err != nil {
		return err
	}
	return writeActWith(out, list.Items, p)
}

// summaryLine counts the members the filters keep by state, "12 of 3500 members: ..." when
// they left some out.
func (o *fleetOptions) summaryLine(kept []fleetv1alpha1.NodewrightClusterSummary, total int) string {
	return fleetview.CountStates(kept).Of(total)
}

// fleetCounts is what --counts prints with -o json or yaml.
type fleetCounts struct {
	States   fleetview.States   `json:"states"`
	Versions fleetview.Versions `json:"versions"`
}

// printCounts writes the members counted by state and per version.
func (o *fleetOptions) printCounts(f *Factory, items []fleetv1alpha1.NodewrightClusterSummary, total int) error {
	out := f.Streams().Out
	counts := fleetCounts{States: fleetview.CountStates(items), Versions: fleetview.CountVersions(items)}
	if o.output != outputTable {
		return printData(out, o.output, counts)
	}
	p := palette{on: f.Color(out)}
	if _, err := fmt.Fprintln(out, o.summaryLine(items, total)); err != nil {
		return err
	}
	for _, section := range []struct {
		header string
		counts []fleetview.Count
	}{
		{"KUBERNETES", counts.Versions.Kubernetes},
		{"NODEWRIGHT", counts.Versions.Nodewright},
		{"PROFILE", counts.Versions.Profile},
	} {
		t := &table{header: []string{section.header, "MEMBERS"}}
		for _, n := range section.counts {
			t.add(c(shown(n.Value)), c(fmt.Sprint(n.Members)))
		}
		if err := writeSection(out, t, p); err != nil {
			return err
		}
	}
	t := &table{header: []string{"OS IMAGE", "MEMBERS", "NODES", "FELL BACK"}}
	for _, ic := range counts.Versions.OSImage {
		image, fell := c(shown(ic.Image)), c("-")
		if ic.FellBackNodes > 0 {
			image, fell = cs(shown(ic.Image), red), cs(fmt.Sprintf("%d node(s)", ic.FellBackNodes), red)
		}
		t.add(image, c(fmt.Sprint(ic.Members)), c(fmt.Sprint(ic.Nodes)), fell)
	}
	if len(t.rows) == 0 {
		_, err := fmt.Fprintln(out, "\nNo Kairos node reports the OS image it boots.")
		return err
	}
	return writeSection(out, t, p)
}

func writeSection(w io.Writer, t *table, p palette) error {
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	return t.write(w, p)
}

// fleetError says what a failed list of the summaries means: most often, that the API server
// is not the hub's.
func fleetError(err error) error {
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return errors.New("this API server does not serve NodewrightClusterSummary (" + fleetv1alpha1.GroupVersion.String() +
			"): it is not a fleet hub; point --kubeconfig/--context at the hub, where nodewright-fleet runs and config/crd/fleet is installed")
	}
	return apiError(err, "nodewrightclustersummaries", "")
}

func fleetTable(items []fleetv1alpha1.NodewrightClusterSummary, now time.Time) *table {
	t := &table{header: []string{"NAME", "REACHABLE", "PHASE", "NODES", "MANAGEMENT", "WORKFLOW", "PROFILE", "CHECKPOINT", "AGE"}}
	for i := range items {
		s := &items[i]
		name := c(s.Name)
		if fleetview.Degraded(s) {
			name = cs(s.Name, red)
		}
		reachable := string(fleetview.Reachable(s))
		reachStyle := green
		if reachable != string(metav1.ConditionTrue) {
			reachStyle = red
		}
		phase := orDash(s.Status.Phase)
		phaseStyle := green
		if phase != "SingleNode" && phase != "MultiNode" {
			phaseStyle = red
		}
		workflow := "-"
		if ws := s.Status.Workflows; len(ws) > 0 {
			workflow = fleetview.Workflow(ws[0])
			if len(ws) > 1 {
				workflow += fmt.Sprintf(" (+%d)", len(ws)-1)
			}
		}
		checkpoint := fleetview.Checkpoint(s)
		cpStyle := plain
		if checkpoint == fleetview.CheckpointMismatch {
			cpStyle = red
		}
		t.add(name, cs(reachable, reachStyle), cs(phase, phaseStyle), c(fleetview.Nodes(s)), c(orDash(s.Status.Management)),
			c(workflow), c(fleetview.Profile(s)), cs(checkpoint, cpStyle), c(age(&s.CreationTimestamp, now)))
	}
	return t
}

// fellBackMembersShown is how many members FELL BACK names per image; "(+N)" counts the rest
// (-o json lists them all, in each summary's status.boots).
const fellBackMembersShown = 5

// writeFellBack writes, under the table, each image a node of the members fell back from,
// the nodes and the members; nothing when none did.
func writeFellBack(w io.Writer, items []fleetv1alpha1.NodewrightClusterSummary, p palette) error {
	fell := fleetview.FellBackImages(items)
	if len(fell) == 0 {
		return nil
	}
	t := &table{header: []string{"  IMAGE", "NODES", "MEMBERS"}}
	for _, f := range fell {
		members := f.Members
		more := ""
		if len(members) > fellBackMembersShown {
			members, more = members[:fellBackMembersShown], fmt.Sprintf(" (+%d)", len(members)-fellBackMembersShown)
		}
		t.add(cs("  "+shown(f.Image), red), c(fmt.Sprint(f.Nodes)), c(shown(strings.Join(members, ", "))+more))
	}
	if _, err := fmt.Fprintln(w, "\n"+p.paint(bold, "FELL BACK: images a Kairos node booted and fell back from (its last fallback):")); err != nil {
		return err
	}
	return t.write(w, p)
}

// shown is s as a terminal shows it, quoted if it holds a character the terminal would act
// on (the hub strips them from what a member says; a summary is still data to print).
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) >= 0 || !utf8.ValidString(s) {
		return strconv.QuoteToGraphic(s)
	}
	return s
}

// writeActWith writes, under the table, the command to act on each member with.
func writeActWith(w io.Writer, items []fleetv1alpha1.NodewrightClusterSummary, p palette) error {
	t := &table{}
	for i := range items {
		t.add(c("  "+items[i].Name), c(fleetview.Command(&items[i])))
	}
	if _, err := fmt.Fprintln(w, "\n"+p.paint(bold, "Act on a member with its own kubeconfig context (the hub only reads):")); err != nil {
		return err
	}
	return t.write(w, p)
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
