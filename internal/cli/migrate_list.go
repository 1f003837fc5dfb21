package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const listHelp = `List the VMVolumeMigrations of the namespace (-n, or the context's), or of every namespace
with -A: name, VM, volume, mode, phase, the step now running, progress of the data copy, and
age. -o json and -o yaml print the objects as a VMVolumeMigrationList.

Exit codes: 0 listed (also when there are none), 1 the list cannot be read, 2 usage.`

const listExamples = `  kubectl nodewright migrate list -n apps
  kubectl nodewright migrate list -A

  # The names of the migrations that did not succeed
  kubectl nodewright migrate list -o json | jq -r '.items[] | select(.status.phase != "Succeeded") | .metadata.name'`

func newMigrateListCommand(f *Factory) *cobra.Command {
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the migrations: VM, volume, mode, phase, step, progress, age",
		Long:    listHelp,
		Example: listExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			var opts []client.ListOption
			if !all {
				namespace, _, err := f.Namespace()
				if err != nil {
					return err
				}
				opts = append(opts, client.InNamespace(namespace))
			}
			list := &nwv1.VMVolumeMigrationList{}
			if err := c.List(cmd.Context(), list, opts...); err != nil {
				return apiError(err, "vmvolumemigrations", "")
			}
			slices.SortFunc(list.Items, func(a, b nwv1.VMVolumeMigration) int {
				if n := strings.Compare(a.Namespace, b.Namespace); n != 0 {
					return n
				}
				return strings.Compare(a.Name, b.Name)
			})
			out := f.Streams().Out
			if output != outputTable {
				return printObjects(out, output, list)
			}
			if len(list.Items) == 0 {
				if all {
					fmt.Fprintln(f.Streams().ErrOut, "No VMVolumeMigrations found.")
				} else {
					namespace, _, _ := f.Namespace()
					fmt.Fprintf(f.Streams().ErrOut, "No VMVolumeMigrations found in namespace %s.\n", namespace)
				}
				return nil
			}
			return migrationTable(list.Items, all, f).write(out, palette{on: f.Color(out)})
		},
	}
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List the migrations of every namespace.")
	return cmd
}

func migrationTable(items []nwv1.VMVolumeMigration, withNamespace bool, f *Factory) *table {
	t := &table{header: []string{"NAME", "VM", "VOLUME", "MODE", "PHASE", "STEP", "PROGRESS", "AGE"}}
	if withNamespace {
		t.header = append([]string{"NAMESPACE"}, t.header...)
	}
	now := f.Now()
	for i := range items {
		m := &items[i]
		mode := string(m.Spec.Mode)
		if mode == "" {
			mode = "-"
		}
		step := runningStep(m)
		if step == "" {
			step = "-"
		}
		progress := "-"
		if p := m.Status.Progress; p != nil {
			progress = fmt.Sprintf("%d%%", p.Percent)
		}
		phase := phaseOf(m)
		row := []cell{c(m.Name), c(m.Spec.VMName), c(m.Spec.VolumeName), c(mode), cs(string(phase), phaseLineStyle(phase)),
			c(step), c(progress), c(age(&m.CreationTimestamp, now))}
		if withNamespace {
			row = append([]cell{c(m.Namespace)}, row...)
		}
		t.add(row...)
	}
	return t
}
