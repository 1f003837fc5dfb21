package cli

import (
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const upgradeWatchHelp = `Follow a ReplicationUpgrade until it ends: its phase; the six stages (Preflight, Place,
Sync, Verify, Quorum, ReleaseTaints), each with its state, duration and message, and under the
one running its progress as the operator writes it ("placed 120/400"); the volumes (how many,
on which node, onto which nodes) with the new replicas placed and the volumes up to date and
verified; the initial synchronisation over every new replica in percent, and the replicas
still synchronising, the least done first (at most 16: resource, node, percent). When a gate
holds the next stage (approval, the maintenance window, another workflow, the cluster's
health, the management mode), the Held condition says which and why; a Manual upgrade's stage
that waits for a person comes with the command that approves it. When a stage fails, the
rollback steps follow the stages as they run. When the upgrade ends: the phase and, when it
rolled back or failed, the stage, the reason, and which rollback steps ran.

The view is driven by a watch on the object: it changes when the status does, and on a
terminal it redraws once a second so that the running stage's duration stays current. When
standard output is not a terminal (a pipe, a CI log) nothing is redrawn: one line is written
per phase, step, progress, synchronisation percent or gate change, then the result.

Exit codes: without --wait, 0 once the upgrade has ended, however it ended. With --wait:
0 Succeeded; 1 Failed or RolledBack (or it was deleted); 3 --timeout passed, or interrupted,
first. Either way 1 also means the upgrade cannot be read, and 2 a usage error.`

const upgradeWatchExamples = `  # The live view
  kubectl nodewright upgrade watch to-two

  # In a script: block until it ends, fail unless it Succeeded, give up after a day
  kubectl nodewright upgrade watch to-two --wait --timeout 24h`

// upgrades are the ReplicationUpgrades, as upgrade watch shows them.
var upgrades = gatedKind[*nwv1.ReplicationUpgrade]{kind: upgradeKind, apiKind: "ReplicationUpgrade", noun: "upgrade",
	newObject: func() *nwv1.ReplicationUpgrade { return &nwv1.ReplicationUpgrade{} },
	newList:   func() client.ObjectList { return &nwv1.ReplicationUpgradeList{} },
	frame:     renderUpgradeFrame, changes: upgradeChangeLines}

func newUpgradeWatchCommand(f *Factory) *cobra.Command {
	return upgrades.watchCommand(f, "Follow an upgrade stage by stage: volumes, sync, the gate that holds it, the result, live", upgradeWatchHelp, upgradeWatchExamples)
}
