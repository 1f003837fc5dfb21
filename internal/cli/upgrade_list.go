package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
)

const upgradeListHelp = `List the ReplicationUpgrades (they are cluster-scoped: -n does not apply): name, peers,
phase, the stage now running (its position of the six) or the one a gate holds ("waiting"), or
the rollback step running, or the stage that failed; the running stage's progress as the
operator writes it ("placed 120/400") while it runs, the gate that holds it (the Held condition's reason),
and age. -o json and -o yaml print the objects as a ReplicationUpgradeList.

Exit codes: 0 listed (also when there are none), 1 the list cannot be read, 2 usage.`

const upgradeListExamples = `  kubectl nodewright upgrade list

  # The upgrades waiting for a person
  kubectl nodewright upgrade list -o json | jq -r '.items[] | select(.status.conditions[]? | .type == "Held" and .reason == "AwaitingApproval") | .metadata.name'`

func newUpgradeListCommand(f *Factory) *cobra.Command {
	return clusterListCommand{
		short: "List the upgrades: peers, phase, stage, progress, what holds it, age", long: upgradeListHelp, example: upgradeListExamples,
		kind:    "ReplicationUpgrade",
		newList: func() client.ObjectList { return &nwv1.ReplicationUpgradeList{} },
		table: func(list client.ObjectList, now time.Time) *table {
			return upgradeTable(list.(*nwv1.ReplicationUpgradeList).Items, now)
		},
	}.build(f)
}

func upgradeTable(items []nwv1.ReplicationUpgrade, now time.Time) *table {
	t := &table{header: []string{"NAME", "PEERS", "PHASE", "STAGE", "PROGRESS", "HELD BY", "AGE"}}
	for i := range items {
		u := &items[i]
		p := replupgrade.ProgressOf(u)
		phase := statusPhase(&u.Status.WorkflowStatus)
		progress, heldBy := "-", "-"
		if u.Status.Progress != "" && !phase.Finished() {
			progress = u.Status.Progress // the running stage's: none once it ended
		}
		if p.Held != nil {
			heldBy = p.Held.Reason
		}
		t.add(c(u.Name), c(strings.Join(u.Spec.PeerNodes, ",")), cs(string(phase), phaseLineStyle(phase)),
			c(stageText(p)), c(progress), c(heldBy), c(age(&u.CreationTimestamp, now)))
	}
	return t
}

// stageText is where an upgrade stands in a word or three: the stage running or waiting
// ("3/6 Sync", "2/6 Place (waiting)"), the rollback step running ("RemoveReplicas
// (rollback)"), the stage that failed once it ended ("3/6 Sync (failed)"); "-" otherwise.
func stageText(p replupgrade.Progress) string {
	switch {
	case p.Current != nil && p.Stage > 0 && p.Current.State == nwv1.StepWaiting:
		return stageName(p.Stage, p.Current.Name) + " (waiting)"
	case p.Current != nil && p.Stage > 0:
		return stageName(p.Stage, p.Current.Name)
	case p.Current != nil:
		return p.Current.Name + " (rollback)"
	case p.Failed != nil && p.FailedStage > 0:
		return stageName(p.FailedStage, p.Failed.Name) + " (" + strings.ToLower(string(p.Failed.State)) + ")"
	}
	return "-"
}

// stageName is a stage with its position among the six: "3/6 Sync".
func stageName(position int, name string) string {
	return fmt.Sprintf("%d/%d %s", position, len(replupgrade.Plan{}.Forward()), name)
}
