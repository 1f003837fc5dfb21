package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const requestListHelp = `List the VMOperationRequests of the namespace (-n, or the context's), or of every namespace
with -A, oldest first, the order the namespace's queue runs them in: name, operation, VM,
phase, the step under way or last done, the place in the namespace's queue (1 runs next),
approval (NotRequired, Required: waiting for an administrator, Approved), the requester as the
admission webhook wrote them, and age. "request watch NAME" says what holds one that waits.

-o json and -o yaml print the objects as a VMOperationRequestList; -o name prints
vmoperationrequest.nodewright.spectrocloud.com/NAME, one a line, as kubectl get -o name does.

Exit codes: 0 listed (also when there are none), 1 the list cannot be read, 2 usage.`

const requestListExamples = `  kubectl nodewright request list -n team-a
  kubectl nodewright request list -A

  # The requests waiting for an administrator's approval
  kubectl nodewright request list -A -o json | jq -r '.items[] | select(.status.approval == "Required") | .metadata.namespace + "/" + .metadata.name'`

// requestOutputName is -o name.
const requestOutputName = "name"

func newRequestListCommand(f *Factory) *cobra.Command {
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the requests: operation, VM, phase, step, queue, approval, requester, age",
		Long:    requestListHelp,
		Example: requestListExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML, requestOutputName); err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			namespace, _, err := f.Namespace()
			if err != nil {
				return err
			}
			var opts []client.ListOption
			if !all {
				opts = append(opts, client.InNamespace(namespace))
			}
			list := &nwv1.VMOperationRequestList{}
			if err := c.List(cmd.Context(), list, opts...); err != nil {
				return apiError(err, "vmoperationrequests", "")
			}
			slices.SortFunc(list.Items, func(a, b nwv1.VMOperationRequest) int {
				return cmp.Or(strings.Compare(a.Namespace, b.Namespace), a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
			})
			out := f.Streams().Out
			switch output {
			case requestOutputName:
				for _, r := range list.Items {
					if _, err := fmt.Fprintf(out, "%s.%s/%s\n", requestKind, nwv1.GroupVersion.Group, r.Name); err != nil {
						return err
					}
				}
				return nil
			case outputJSON, outputYAML:
				return printObjects(out, output, list)
			}
			if len(list.Items) == 0 {
				if all {
					fmt.Fprintln(f.Streams().ErrOut, "No VMOperationRequests found.")
				} else {
					fmt.Fprintf(f.Streams().ErrOut, "No VMOperationRequests found in namespace %s.\n", namespace)
				}
				return nil
			}
			return requestTable(list.Items, all, f.Now()).write(out, palette{on: f.Color(out)})
		},
	}
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML, requestOutputName)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List the requests of every namespace.")
	return cmd
}

// requestTable has the columns of the CRD's printer columns (kubectl get vmopr), the
// namespace first with withNamespace.
func requestTable(items []nwv1.VMOperationRequest, withNamespace bool, now time.Time) *table {
	t := &table{header: []string{"NAME", "OPERATION", "VM", "PHASE", "STEP", "QUEUE", "APPROVAL", "REQUESTER", "AGE"}}
	if withNamespace {
		t.header = append([]string{"NAMESPACE"}, t.header...)
	}
	for i := range items {
		r := &items[i]
		st := r.Status
		queue := "-"
		if st.QueuePosition > 0 {
			queue = fmt.Sprint(st.QueuePosition)
		}
		requester := "-"
		if r.Spec.Requester != nil {
			requester = dash(shown(r.Spec.Requester.Username))
		}
		phase := requestPhase(r)
		row := []cell{c(r.Name), c(string(r.Spec.Operation)), c(shown(r.Spec.VM)), cs(string(phase), requestPhaseStyle(phase)),
			c(dash(st.Step)), c(queue), cs(dash(st.Approval), approvalStyle(st.Approval)), c(requester), c(age(&r.CreationTimestamp, now))}
		if withNamespace {
			row = append([]cell{c(r.Namespace)}, row...)
		}
		t.add(row...)
	}
	return t
}

// requestPhase is the request's phase, Pending until the controller wrote one.
func requestPhase(r *nwv1.VMOperationRequest) nwv1.VMOperationPhase {
	if r == nil || r.Status.Phase == "" {
		return nwv1.VMOperationPending
	}
	return r.Status.Phase
}

func requestPhaseStyle(p nwv1.VMOperationPhase) style {
	switch p {
	case nwv1.VMOperationSucceeded:
		return green
	case nwv1.VMOperationFailed, nwv1.VMOperationRefused:
		return red
	case nwv1.VMOperationWaiting:
		return yellow
	}
	return bold
}

func approvalStyle(approval string) style {
	if approval == nwv1.ApprovalRequired {
		return yellow
	}
	return plain
}
