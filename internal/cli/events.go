package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bridge"
)

// operatorEventSource is the component of the operator's Events (operator.EventSource; a test
// keeps them equal without linking the operator into the plugin).
const operatorEventSource = "nodewright-operator"

const eventsHelp = `Show the Events of the legacy DaemonSet and of Nodewright together, newest last: time, type,
source, object, reason and message.

The legacy DaemonSet's Events are those whose source component (or reportingController) is
the NodewrightCluster's legacy eventComponent: the one of the EdgeProfile in force when
status.profile says a profile is applied, else spec.legacy.eventComponent (--legacy-component
overrides both). Nodewright's are those of the component "nodewright-operator".

As kubectl does, the Events are those of the namespace of -n/--namespace, else of the
kubeconfig context's namespace ("default" when it names none); -A/--all-namespaces shows every
namespace's, with a NAMESPACE column. Events about cluster-scoped objects (Nodes, the
NodewrightCluster) are in "default".

Exit codes: 0 shown (also when there are none), 1 the Events cannot be read, 2 usage.`

const eventsExamples = `  # Those of the current namespace, newest last
  kubectl nodewright events

  # Every namespace's: the legacy DaemonSet's namespace, the migrations', and default's
  kubectl nodewright events -A

  # Only the warnings, as JSON
  kubectl nodewright events -A --warnings-only -o json

  # Only those in the legacy DaemonSet's namespace
  kubectl nodewright events -n kube-system`

func newEventsCommand(f *Factory) *cobra.Command {
	var output, legacyComponent string
	var warningsOnly, all bool
	cmd := &cobra.Command{
		Use:     "events",
		Short:   "Show the legacy DaemonSet's Events and Nodewright's, merged, newest last",
		Long:    eventsHelp,
		Example: eventsExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			namespace := "" // every namespace
			if !all {
				var err error
				if namespace, _, err = f.Namespace(); err != nil {
					return err
				}
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if legacyComponent == "" {
				if legacyComponent, err = effectiveEventComponent(ctx, c); err != nil {
					return err
				}
				if legacyComponent == "" {
					fmt.Fprintf(f.Streams().ErrOut, "Warning: NodewrightCluster %q not found: showing Nodewright's Events only (--legacy-component names the legacy DaemonSet's)\n", nwv1.NodewrightClusterName)
				}
			}
			events, err := listEvents(ctx, c, namespace, warningsOnly, legacyComponent, operatorEventSource)
			if err != nil {
				return err
			}
			out := f.Streams().Out
			if output != outputTable {
				return printObjects(out, output, &corev1.EventList{Items: events})
			}
			if len(events) == 0 {
				if all {
					fmt.Fprintln(f.Streams().ErrOut, "No Events found.")
				} else {
					fmt.Fprintf(f.Streams().ErrOut, "No Events found in namespace %s.\n", namespace)
				}
				return nil
			}
			return eventTable(events, all).write(out, palette{on: f.Color(out)})
		},
	}
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Show the Events of every namespace.")
	cmd.Flags().BoolVar(&warningsOnly, "warnings-only", false, "Show only Events of type Warning.")
	cmd.Flags().StringVar(&legacyComponent, "legacy-component", "", "The legacy DaemonSet's Event component. Default: the NodewrightCluster's effective legacy eventComponent.")
	return cmd
}

// effectiveEventComponent is the legacy eventComponent the NodewrightCluster observes: its
// profile's when one is applied, else its own; "" when there is no NodewrightCluster.
func effectiveEventComponent(ctx context.Context, c client.Reader) (string, error) {
	nwc := &nwv1.NodewrightCluster{}
	if err := c.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", apiError(err, "nodewrightcluster", nwv1.NodewrightClusterName)
	}
	return bridge.Effective(ctx, c, nwc).Spec.Legacy.EventComponent, nil
}

// listEvents lists the Events whose source component or reportingController is one of
// components ("" ones skipped), once each, oldest first.
func listEvents(ctx context.Context, c client.Reader, namespace string, warningsOnly bool, components ...string) ([]corev1.Event, error) {
	seen := map[string]bool{}
	var out []corev1.Event
	for _, component := range components {
		if component == "" {
			continue
		}
		// The API server selects on source (source.component) and reportingComponent, one
		// field per list.
		for _, field := range []string{"source", "reportingComponent"} {
			match := client.MatchingFields{field: component}
			if warningsOnly {
				match["type"] = corev1.EventTypeWarning
			}
			var list corev1.EventList
			if err := c.List(ctx, &list, client.InNamespace(namespace), match); err != nil {
				return nil, apiError(err, "events", "")
			}
			for _, e := range list.Items {
				if key := string(e.UID); !seen[key] {
					seen[key] = true
					out = append(out, e)
				}
			}
		}
	}
	sortEvents(out)
	return out, nil
}

// eventTime is when an Event last happened, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// sortEvents orders Events oldest first (newest last), ties by namespace and name.
func sortEvents(events []corev1.Event) {
	slices.SortStableFunc(events, func(a, b corev1.Event) int {
		if n := eventTime(&a).Compare(eventTime(&b)); n != 0 {
			return n
		}
		if n := strings.Compare(a.Namespace, b.Namespace); n != 0 {
			return n
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// eventSource is the component that emitted an Event.
func eventSource(e *corev1.Event) string {
	if e.Source.Component != "" {
		return e.Source.Component
	}
	return e.ReportingController
}

func eventTable(events []corev1.Event, withNamespace bool) *table {
	t := &table{header: []string{"TIME", "TYPE", "SOURCE", "OBJECT", "REASON", "MESSAGE"}}
	if withNamespace {
		t.header = []string{"TIME", "TYPE", "SOURCE", "NAMESPACE", "OBJECT", "REASON", "MESSAGE"}
	}
	for i := range events {
		e := &events[i]
		typ := c(e.Type)
		if e.Type == corev1.EventTypeWarning {
			typ.style = yellow
		}
		message := oneLine(e.Message)
		if e.Count > 1 {
			message += fmt.Sprintf(" (x%d)", e.Count)
		}
		row := []cell{c(timestamp(eventTime(e))), typ, c(eventSource(e))}
		if withNamespace {
			ns := e.InvolvedObject.Namespace
			if ns == "" {
				ns = "-"
			}
			row = append(row, c(ns))
		}
		row = append(row, c(strings.ToLower(e.InvolvedObject.Kind)+"/"+e.InvolvedObject.Name), c(e.Reason), c(message))
		t.add(row...)
	}
	return t
}
