package cli

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// approvals are the values --approval takes, in the API's order (the Approval enum).
var approvals = []nwv1.Approval{nwv1.ApprovalAutomatic, nwv1.ApprovalManual}

// gateOptions are the flags of the gates a person sets on a cluster-wide workflow:
// --approval and --maintenance-window.
type gateOptions struct {
	approval, window string
}

// addFlags registers --approval and --maintenance-window; waits says what waits for a person
// with Manual ("each node waits"), starts what the window lets start ("a node may start
// being changed").
func (o *gateOptions) addFlags(cmd *cobra.Command, waits, starts string) {
	fl := cmd.Flags()
	fl.StringVar(&o.approval, "approval", "", "Automatic (the default), or Manual: "+waits+" until a person approves it (kubectl nodewright approve).")
	fl.StringVar(&o.window, "maintenance-window", "", "When "+starts+`: "[DAYS ]HH:MM-HH:MM[ TIMEZONE]", e.g. "Sat,Sun 22:00-04:00 Europe/Berlin" (days comma-separated, every day when none; the time zone IANA, UTC when none; an end not after the start is on the next day).`)
	_ = cmd.RegisterFlagCompletionFunc("approval", completeWords(approvals))
}

// build is spec.approval ("" when not given: the API server's default) and
// spec.maintenanceWindow (nil when not given); a mistake is a usage error that names the flag.
func (o *gateOptions) build() (nwv1.Approval, *nwv1.MaintenanceWindow, error) {
	var approval nwv1.Approval
	if o.approval != "" {
		var ok bool
		if approval, ok = oneOf(o.approval, approvals); !ok {
			return "", nil, usageErrorf("--approval %q: want one of %s", o.approval, joinModes(approvals))
		}
	}
	if o.window == "" {
		return approval, nil, nil
	}
	w, err := parseMaintenanceWindow(o.window)
	if err != nil {
		return "", nil, usageErrorf("--maintenance-window %q: %w", o.window, err)
	}
	return approval, w, nil
}

// describeGates are the parts of a workflow's description that say its approval and
// maintenance window, when set.
func describeGates(approval nwv1.Approval, window *nwv1.MaintenanceWindow) []string {
	var parts []string
	if approval != "" {
		parts = append(parts, "approval "+string(approval))
	}
	if window != nil {
		parts = append(parts, "maintenance window "+describeWindow(window))
	}
	return parts
}

// nodeNames are the nodes a flag names (flag: "--order"): at most most, each a node name, each
// once; a mistake is a usage error that names the flag.
func nodeNames(flag string, nodes []string, most int) ([]string, error) {
	if len(nodes) > most {
		return nil, usageErrorf("%s %s: at most %d nodes, got %d", flag, strings.Join(nodes, ","), most, len(nodes))
	}
	var out []string
	for _, node := range nodes {
		if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
			return nil, usageErrorf("%s: %q is not a node name: %s", flag, node, strings.Join(errs, "; "))
		}
		if slices.Contains(out, node) {
			return nil, usageErrorf("%s: node %s is named twice", flag, node)
		}
		out = append(out, node)
	}
	return out, nil
}

// windowTimes is the HH:MM-HH:MM of --maintenance-window.
var windowTimes = regexp.MustCompile(`^(\d\d:\d\d)-(\d\d:\d\d)$`)

// windowForm is what --maintenance-window looks like, for its errors.
const windowForm = `want "[DAYS ]HH:MM-HH:MM[ TIMEZONE]", e.g. "Sat,Sun 22:00-04:00 Europe/Berlin"`

// parseMaintenanceWindow reads "[DAYS ]HH:MM-HH:MM[ TIMEZONE]" into spec.maintenanceWindow:
// DAYS comma-separated day names or their first three letters, in any case; the window is
// then checked as the admission webhook checks it (workflow.ParseWindow).
func parseMaintenanceWindow(text string) (*nwv1.MaintenanceWindow, error) {
	fields := strings.Fields(text)
	at := slices.IndexFunc(fields, windowTimes.MatchString)
	if at < 0 || len(fields)-at > 2 {
		return nil, errors.New(windowForm)
	}
	times := windowTimes.FindStringSubmatch(fields[at])
	w := &nwv1.MaintenanceWindow{Start: times[1], End: times[2]}
	if at > 0 {
		// "Sat,Sun" or "Sat, Sun"
		for _, d := range strings.Split(strings.Join(fields[:at], ""), ",") {
			if d == "" {
				continue
			}
			day, ok := weekday(d)
			if !ok {
				return nil, fmt.Errorf("%q is not a day of the week (Monday or Mon, ...); %s", d, windowForm)
			}
			if !slices.Contains(w.Days, day) {
				w.Days = append(w.Days, day)
			}
		}
	}
	if at+1 < len(fields) {
		w.TimeZone = fields[at+1]
	}
	if _, err := workflow.ParseWindow(w, "spec.maintenanceWindow"); err != nil {
		return nil, err
	}
	return w, nil
}

var weekdays = []nwv1.Weekday{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}

// weekday is the day s names: its name or its first three letters, in any case.
func weekday(s string) (nwv1.Weekday, bool) {
	for _, d := range weekdays {
		if strings.EqualFold(s, string(d)) || strings.EqualFold(s, string(d)[:3]) {
			return d, true
		}
	}
	return "", false
}

// describeWindow writes a maintenance window as --maintenance-window takes it, the days in full.
func describeWindow(w *nwv1.MaintenanceWindow) string {
	days := "every day"
	if len(w.Days) > 0 {
		days = strings.Join(mapSlice(w.Days, func(d nwv1.Weekday) string { return string(d) }), ",")
	}
	zone := w.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	return fmt.Sprintf("%s %s-%s %s", days, w.Start, w.End, zone)
}
