package cli

import (
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	return clusterListCommand{
		short: "List the flips: target mode, phase, node and step, what holds it, age", long: flipListHelp, example: flipListExamples,
		kind:    "BondModeFlipPlan",
		newList: func() client.ObjectList { return &nwv1.BondModeFlipPlanList{} },
		table: func(list client.ObjectList, now time.Time) *table {
			return flipTable(list.(*nwv1.BondModeFlipPlanList).Items, now)
		},
	}.build(f)
}

func flipTable(items []nwv1.BondModeFlipPlan, now time.Time) *table {
	t := &table{header: []string{"NAME", "TARGET", "PHASE", "NODE", "STEP", "HELD BY", "AGE"}}
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
