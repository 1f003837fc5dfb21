package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"
)

// The output formats of -o. Every command that lists or shows something takes the three.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// outputAliases are other names -o accepts for a format: text, for the output for people
// (migrate and audit tail called it that).
var outputAliases = map[string]string{"text": outputTable}

// outputFlag registers -o/--output on cmd, limited to formats, with shell completion of them.
func outputFlag(cmd *cobra.Command, into *string, formats ...string) {
	*into = formats[0]
	cmd.Flags().StringVarP(into, "output", "o", formats[0], "Output format: "+strings.Join(formats, ", ")+".")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return formats, cobra.ShellCompDirectiveNoFileComp
	})
}

// checkOutput turns an alias in *format into the format it names, and refuses a format not in
// formats, as a usage error.
func checkOutput(format *string, formats ...string) error {
	if f, ok := outputAliases[*format]; ok {
		*format = f
	}
	if !slices.Contains(formats, *format) {
		return usageErrorf("--output %q: want one of %s", *format, strings.Join(formats, ", "))
	}
	return nil
}

// printData writes v as indented JSON or as YAML.
func printData(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fmt.Errorf("encoding the output: %w", err)
	}
	if format == outputYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encoding the output: %w", err)
		}
		_, err = w.Write(data)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// terminalWidth is the width of the terminal w, or 0 when it is not one.
func terminalWidth(w any) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}

// style is how a piece of text is coloured.
type style int

const (
	plain style = iota
	bold
	dim
	green
	yellow
	red
	cyan
)

var ansi = map[style]string{bold: "1", dim: "2", green: "32", yellow: "33", red: "31", cyan: "36"}

// palette colours text, or leaves it plain when colour is off.
type palette struct{ on bool }

func (p palette) paint(s style, text string) string {
	if !p.on || s == plain || text == "" {
		return text
	}
	return "\x1b[" + ansi[s] + "m" + text + "\x1b[0m"
}

// cell is one table cell: its text and colour.
type cell struct {
	text  string
	style style
}

func c(text string) cell           { return cell{text: text} }
func cs(text string, s style) cell { return cell{text: text, style: s} }
func width(s string) int           { return utf8.RuneCountInString(s) }

// table lays out rows in columns separated by three spaces, padding by the visible width so
// that colour does not break the alignment. The last column is not padded.
type table struct {
	header []string
	rows   [][]cell
}

func (t *table) add(cells ...cell) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer, p palette) error {
	n := len(t.header)
	for _, r := range t.rows {
		n = max(n, len(r))
	}
	widths := make([]int, n)
	all := t.rows
	if len(t.header) > 0 {
		header := mapSlice(t.header, func(h string) cell { return cs(h, bold) })
		all = append([][]cell{header}, t.rows...)
	}
	for _, r := range all {
		for i, cl := range r {
			widths[i] = max(widths[i], width(cl.text))
		}
	}
	for _, r := range all {
		var b strings.Builder
		for i, cl := range r {
			b.WriteString(p.paint(cl.style, cl.text))
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-width(cl.text)+3))
			}
		}
		if _, err := fmt.Fprintln(w, strings.TrimRight(b.String(), " ")); err != nil {
			return err
		}
	}
	return nil
}

func mapSlice[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// printObject writes obj as data (json, yaml) as the API server returned it, with its kind and
// without its managedFields.
func printObject(w io.Writer, format string, obj client.Object) error {
	obj.SetManagedFields(nil)
	if err := setKind(obj); err != nil {
		return err
	}
	return printData(w, format, obj)
}

// printObjects writes list as data (json, yaml): the list and each item with its kind, the
// items without their managedFields, the list without its resourceVersion.
func printObjects(w io.Writer, format string, list client.ObjectList) error {
	err := meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok {
			obj.SetManagedFields(nil)
		}
		return setKind(o)
	})
	if err == nil {
		err = setKind(list)
	}
	if err != nil {
		return err
	}
	list.SetResourceVersion("")
	return printData(w, format, list)
}

// setKind fills in o's apiVersion and kind, which a typed client leaves empty.
func setKind(o runtime.Object) error {
	gvk, err := apiutil.GVKForObject(o, scheme)
	if err != nil {
		return fmt.Errorf("encoding the output: %w", err)
	}
	o.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// printCreated says what a command created: with -o json or yaml the object (printObject),
// else the line "kind/name created: what".
func printCreated(w io.Writer, format, kind string, obj client.Object, what string) error {
	if format != outputTable {
		return printObject(w, format, obj)
	}
	_, err := fmt.Fprintf(w, "%s/%s created: %s\n", kind, obj.GetName(), what)
	return err
}
