package cli

import (
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const flipWatchHelp = `Follow a BondModeFlipPlan until it ends: its phase, the Preflight, and one line per node in
the flip's order with its position, name, previous and current bond mode (as its agent last
reported it) and state (Pending, InProgress, Done, RollingBack, RolledBack, Failed); under a
node, the step of it that runs or waits, with its duration and message. When a gate holds the
next step (approval, the maintenance window, another workflow, the cluster's health, the
management mode), the Held condition says which and why; a Manual flip's step that waits for
a person comes with the command that approves it. When the flip ends: the phase and, when it
rolled back or failed, the node, the step and the reason.

The view is driven by a watch on the object: it changes when the status does, and on a
terminal it redraws once a second so that the running step's duration stays current. When
standard output is not a terminal (a pipe, a CI log) nothing is redrawn: one line is written
per phase, step, node or gate change, then the result.

Exit codes: without --wait, 0 once the flip has ended, however it ended. With --wait:
0 Succeeded; 1 Failed or RolledBack (or it was deleted); 3 --timeout passed, or interrupted,
first. Either way 1 also means the flip cannot be read, and 2 a usage error.`

const flipWatchExamples = `  # The live view
  kubectl nodewright flip watch to-lacp

  # In a script: block until it ends, fail unless it Succeeded, give up after two hours
  kubectl nodewright flip watch to-lacp --wait --timeout 2h`

// flips are the BondModeFlipPlans, as flip watch shows them.
var flips = gatedKind[*nwv1.BondModeFlipPlan]{kind: flipKind, apiKind: "BondModeFlipPlan", noun: "flip",
	newObject: func() *nwv1.BondModeFlipPlan { return &nwv1.BondModeFlipPlan{} },
	newList:   func() client.ObjectList { return &nwv1.BondModeFlipPlanList{} },
	frame:     renderFlipFrame, changes: flipChangeLines}

func newFlipWatchCommand(f *Factory) *cobra.Command {
	return flips.watchCommand(f, "Follow a flip node by node: modes, steps, the gate that holds it, the result, live", flipWatchHelp, flipWatchExamples)
}
