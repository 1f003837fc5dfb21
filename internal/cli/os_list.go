package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
)

const osListHelp = `List the OSVersionPolicies (they are cluster-scoped: -n does not apply): name, image (its
digest cut to 12 hex digits), phase, the node now being upgraded with its phase (or "waiting"
while a gate holds it), the nodes Done of all, the nodes that fell back, the gate that holds it
(the Held condition's reason), and age. -o json and -o yaml print the objects, in full, as an
OSVersionPolicyList.

Exit codes: 0 listed (also when there are none), 1 the list cannot be read, 2 usage.`

const osListExamples = `  kubectl nodewright os list

  # The policies that stopped on a fallback, and the nodes
  kubectl nodewright os list -o json | jq -r '.items[] | select(.status.nodes[]? | .phase == "FellBack") | .metadata.name'`

func newOSListCommand(f *Factory) *cobra.Command {
	return clusterListCommand{
		short: "List the OS version policies: image, phase, current node, done, fell back, what holds it, age", long: osListHelp, example: osListExamples,
		kind:    "OSVersionPolicy",
		newList: func() client.ObjectList { return &nwv1.OSVersionPolicyList{} },
		table: func(list client.ObjectList, now time.Time) *table {
			return osTable(list.(*nwv1.OSVersionPolicyList).Items, now)
		},
	}.build(f)
}

// shortImage is an image with its digest cut to 12 hex digits, for a table.
func shortImage(image string) string {
	ref, digest, ok := strings.Cut(image, "@sha256:")
	if !ok || len(digest) <= 12 {
		return image
	}
	return ref + "@sha256:" + digest[:12]
}

func osTable(items []nwv1.OSVersionPolicy, now time.Time) *table {
	t := &table{header: []string{"NAME", "IMAGE", "PHASE", "NODE", "DONE", "FELL BACK", "HELD BY", "AGE"}}
	for i := range items {
		p := &items[i]
		pr := osupgrade.ProgressOf(p)
		phase := statusPhase(&p.Status.WorkflowStatus)
		node, done, fellBack, heldBy := "-", "-", "-", "-"
		if pr.CurrentPosition > 0 {
			if n, ok := pr.NodeAt(pr.CurrentPosition); ok {
				node = n.Name + " " + string(n.Phase)
				if pr.Current.State == nwv1.StepWaiting {
					node = n.Name + " (waiting)"
				}
			}
		}
		if pr.Total > 0 {
			done = fmt.Sprintf("%d/%d", pr.Done, pr.Total)
		}
		if len(pr.FellBack) > 0 {
			fellBack = strings.Join(pr.FellBack, ",")
		}
		if pr.Held != nil {
			heldBy = pr.Held.Reason
		}
		t.add(c(p.Name), c(shortImage(p.Spec.Image)), cs(string(phase), phaseLineStyle(phase)),
			c(node), c(done), c(fellBack), c(heldBy), c(age(&p.CreationTimestamp, now)))
	}
	return t
}
