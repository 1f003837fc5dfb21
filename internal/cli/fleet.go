package cli

import (
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

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/fleetview"
)

const fleetHelp = `List the member clusters of a fleet hub, from the NodewrightClusterSummaries that
nodewright-fleet keeps there: run it against the hub (--kubeconfig/--context name the hub's
API server). Degraded members come first, then by name.

Columns: NAME (the member's name on the hub: its registering Secret or ClusterProfile),
REACHABLE (the hub's health check: True, False, Unknown before the first), PHASE (of the
member's NodewrightCluster), NODES (ready/total), MANAGEMENT, WORKFLOW (the first unfinished
flip or upgrade: kind/name, step, progress; "(+N)" when more run), PROFILE (name@version in
force), CHECKPOINT (ok: the published audit checkpoint matches the one the hub recorded;
mismatch: it is behind, different or gone; -: none yet), AGE.

A member is degraded when it is not reachable (or not checked yet), its phase is neither
SingleNode nor MultiNode, or its checkpoint does not match.

FELL BACK, under the table when a Kairos node of a listed member fell back: each image some
node's last fallback was from (its boot failed and GRUB booted the previous image), the
nodes that fell back from it across the listed members, and those members. The hub reads it
from the nodes' NodewrightAgentStatuses (status.os.kairos.lastFallback); each member's
summary has its own in status.boots (its nodes' slot, image and last fallback, and its count
per image), which -o json and -o yaml print.

The hub never acts on a member. Under the table each member's command is printed, to run
against the member's own API server with a kubeconfig context named after the member (the
summary's name); act there with the usual commands (flip, upgrade, approve, ...).

-o json and -o yaml print the listed summaries as a NodewrightClusterSummaryList.

Exit codes: 0 listed (also when none match), 1 the hub cannot be read (or does not serve
NodewrightClusterSummary), 2 usage.`

const fleetExamples = `  # Every member, degraded first, and the command to act on each with
  kubectl nodewright fleet --context hub

  # The members that need a person: unreachable, not SingleNode/MultiNode, or checkpoint mismatch
  kubectl nodewright fleet --context hub --degraded

  # The members on profile edge-standard, and those running a replication upgrade
  kubectl nodewright fleet --context hub --profile edge-standard
  kubectl nodewright fleet --context hub --workflow ReplicationUpgrade

  # The names of the degraded members, for a script
  kubectl nodewright fleet --context hub --degraded -o json | jq -r '.items[].metadata.name'

  # The members where a node fell back from an image, and how many nodes
  kubectl nodewright fleet --context hub -o json | jq -r '.items[] | .metadata.name as $m | .status.boots.fellBack[]? | "\($m) \(.nodes) \(.image)"'`

func newFleetCommand(f *Factory) *cobra.Command {
	var output string
	var filter fleetview.Filter
	cmd := &cobra.Command{
		Use:     "fleet",
		Short:   "List a fleet hub's member clusters: reachable, phase, nodes, workflow, profile, checkpoint, and how to act on each",
		Long:    fleetHelp,
		Example: fleetExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			if err := fleetview.CheckWorkflow(filter.Workflow); err != nil {
				return usageErrorf("--workflow %v", err)
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			list := &fleetv1alpha1.NodewrightClusterSummaryList{}
			if err := c.List(cmd.Context(), list); err != nil {
				return fleetError(err)
			}
			kept := list.Items[:0]
			for i := range list.Items {
				if filter.Matches(&list.Items[i]) {
					kept = append(kept, list.Items[i])
				}
			}
			list.Items = kept
			fleetview.SortDegradedFirst(list.Items)
			out := f.Streams().Out
			if output != outputTable {
				return printObjects(out, output, list)
			}
			if len(list.Items) == 0 {
				msg := "No member clusters found."
				if filter != (fleetview.Filter{}) {
					msg = "No member clusters match."
				}
				fmt.Fprintln(f.Streams().ErrOut, msg)
				return nil
			}
			p := palette{on: f.Color(out)}
			if err := fleetTable(list.Items, f.Now()).write(out, p); err != nil {
				return err
			}
			if err := writeFellBack(out, list.Items, p); err != nil {
				return err
			}
			return writeActWith(out, list.Items, p)
		},
	}
	cmd.Flags().BoolVar(&filter.Degraded, "degraded", false, "Only the degraded members: unreachable, phase not SingleNode or MultiNode, or checkpoint mismatch.")
	cmd.Flags().StringVar(&filter.Profile, "profile", "", "Only the members whose EdgeProfile in force has this name.")
	cmd.Flags().StringVar(&filter.Workflow, "workflow", "", "Only the members running a workflow: any, a KIND (BondModeFlipPlan, ReplicationUpgrade) or KIND/NAME.")
	_ = cmd.RegisterFlagCompletionFunc("workflow", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{fleetview.WorkflowAny, "BondModeFlipPlan", "ReplicationUpgrade"}, cobra.ShellCompDirectiveNoFileComp
	})
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	return cmd
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

// writeFellBack writes, under the table, each image a node of the members fell back from,
// the nodes and the members; nothing when none did.
func writeFellBack(w io.Writer, items []fleetv1alpha1.NodewrightClusterSummary, p palette) error {
	fell := fleetview.FellBackImages(items)
	if len(fell) == 0 {
		return nil
	}
	t := &table{header: []string{"  IMAGE", "NODES", "MEMBERS"}}
	for _, f := range fell {
		t.add(cs("  "+shown(f.Image), red), c(fmt.Sprint(f.Nodes)), c(shown(strings.Join(f.Members, ", "))))
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
