package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// clusterListCommand is the `list` subcommand of a cluster-scoped workflow kind: its objects
// by name, as a table, or as data (-o json|yaml).
type clusterListCommand struct {
	short, long, example string
	// kind is the kind as the API names it: BondModeFlipPlan.
	kind    string
	newList func() client.ObjectList
	// table lays out the objects of list, sorted by name, at now.
	table func(list client.ObjectList, now time.Time) *table
}

func (l clusterListCommand) build(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   l.short,
		Long:    l.long,
		Example: l.example,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			list := l.newList()
			if err := c.List(cmd.Context(), list); err != nil {
				return apiError(err, strings.ToLower(l.kind)+"s", "")
			}
			if err := sortByName(list); err != nil {
				return err
			}
			out := f.Streams().Out
			if output != outputTable {
				return printObjects(out, output, list)
			}
			if meta.LenList(list) == 0 {
				fmt.Fprintf(f.Streams().ErrOut, "No %s found.\n", plural(l.kind))
				return nil
			}
			return l.table(list, f.Now()).write(out, palette{on: f.Color(out)})
		},
	}
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	return cmd
}

// sortByName sorts the items of a list of cluster-scoped objects by name.
func sortByName(list client.ObjectList) error {
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	name := func(o runtime.Object) string { return o.(client.Object).GetName() }
	slices.SortFunc(items, func(a, b runtime.Object) int { return strings.Compare(name(a), name(b)) })
	return meta.SetList(list, items)
}

// plural is a kind's plural as the API names it: OSVersionPolicies, BondModeFlipPlans.
func plural(kind string) string {
	if strings.HasSuffix(kind, "y") {
		return strings.TrimSuffix(kind, "y") + "ies"
	}
	return kind + "s"
}
