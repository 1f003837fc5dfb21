package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
)

const flipListHelp = `List the BondModeFlipPlans (they are cluster-scoped: -n does not apply): name, target mode,
phase, the node now being changed and its step (running, or waiting for a gate), the gate that
holds it (the Held condition's reason), and age. -o json and -o yaml print the objects as a
BondModeFlipPlanList.

Exit codes: 0 listed (also when there are none), 1 the list cannot be read, 2 usage.`

const flipListExamples = `  kubectl nodewright flip list

  # The flips waiting for a person
  kubectl nodewright flip list -o json | jq -r '.items[] | select(.status.conditions[]? | .type == "Held" and .reason == "AwaitingApproval") | .metadata.name'`

func newFlipListCommand(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the flips: target mode, phase, node and step, what holds it, age",
		Long:    flipListHelp,
		Example: flipListExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			list := &nwv1.BondModeFlipPlanList{}
			if err := c.List(cmd.Context(), list); err != nil {
				return apiError(err, "bondmodeflipplans", "")
			}
			slices.SortFunc(list.Items, func(a, b nwv1.BondModeFlipPlan) int { return strings.Compare(a.Name, b.Name) })
			out := f.Streams().Out
			if output != outputTable {
				return printObjects(out, output, list)
			}
			if len(list.Items) == 0 {
				fmt.Fprintln(f.Streams().ErrOut, "No BondModeFlipPlans found.")
				return nil
			}
			return flipTable(list.Items, f).write(out, palette{on: f.Color(out)})
		},
	}
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	return cmd
}

func flipTable(items []nwv1.BondModeFlipPlan, f *Factory) *table {
	t := &table{header: []string{"NAME", "TARGET", "PHASE", "NODE", "STEP", "HELD BY", "AGE"}}
	now := f.Now()
	for i := range items {
		flip := &items[i]
		st := &flip.Status.WorkflowStatus
		p := bondflip.ProgressOf(flip)
		node, step, heldBy := "-", "-", "-"
		if s := p.Current; s != nil {
			step = s.Name
			if s.State == nwv1.StepWaiting {
				step += " (waiting)"
			}
			if p.CurrentPosition > 0 {
				node = nodeName(p, p.CurrentPosition)
			}
		}
		if p.Held != nil {
			heldBy = p.Held.Reason
		}
		phase := statusPhase(st)
		t.add(c(flip.Name), c(string(flip.Spec.TargetMode)), cs(string(phase), phaseLineStyle(phase)),
			c(node), c(step), c(heldBy), c(age(&flip.CreationTimestamp, now)))
	}
	return t
}
