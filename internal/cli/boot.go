package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The boot view of the BootRecoveryPolicy singleton (docs/bootrecovery.md): "boot status"
// shows each Kairos node's boot, "boot ack" acknowledges a fallback by the boot that fell
// back, "boot reset" and "boot select" create the repairs a person approves (boot_repair.go).
// Every string of the status is written by the operator from what the nodes' agents
// report, so the table prints each through shown: a node cannot put a terminal's escapes on
// the screen of whoever reads it.

const bootKind = "bootrecoverypolicy"

const bootHelp = `Show and acknowledge the boots of the cluster's Kairos nodes, as the BootRecoveryPolicy
"nodewright" sees them (docs/bootrecovery.md): "boot status" shows each node's slot, image,
boot, last fallback, pin, post-boot health and cordon; "boot ack" acknowledges a node's
fallback, filling in the boot that fell back; "boot reset" and "boot select" create the
repairs that clear a node's stale boot-assessment flags or boot it once into an entry, which
wait for a person's approval.`

const bootExamples = `  kubectl nodewright boot status
  kubectl nodewright boot ack edge-2
  kubectl nodewright boot reset edge-2`

const bootStatusHelp = `Show the BootRecoveryPolicy "nodewright": a line of what it does, then one line per Kairos
node whose agent reports:

  NODE       the node
  SLOT       the boot entry it runs: Active, Passive (the fallback), Recovery; on a UKI node
             the tries its boot counter has left and done
  IMAGE      the image it booted (KAIROS_IMAGE_REPO of /etc/kairos-release)
  BOOT       its boot ID, the first 8 characters
  FELL BACK  its last fallback, FROM → TO at boot B, while it is not acknowledged; once it
             is, "acknowledged by" who the admission webhook stamped
  PINNED     the image OSVersionPolicies keep it on until its fallback is acknowledged
  HEALTH     this boot's post-boot health: passed, waiting: what is red (and how long is
             left), timed out: what was red
  CORDON     the policy's cordon of a node in recovery: Cordoned, WasCordoned, Uncordoned

Under the table: the nodes whose next boot would fall back at once (the agent refuses to
reboot them), the command that acknowledges each fallback not acknowledged, and the policy's
conditions (FellBack, RecoveryBoot, PostBootHealthy). Every text the nodes report is printed
quoted when it holds a character a terminal would act on.

-o json and -o yaml print the policy as the API server has it.

Exit codes: 0 shown, 1 the policy does not exist or cannot be read, 2 usage.`

const bootStatusExamples = `  kubectl nodewright boot status

  # The nodes whose fallback is not acknowledged, for a script
  kubectl nodewright boot status -o json | jq -r '.status.nodes[] | select(.lastFallback and .lastFallback.bootID != .acknowledged.bootID) | .name'`

func newBootCommand(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "boot",
		Short:   "The Kairos nodes' boots (BootRecoveryPolicy): status, ack, reset, select",
		Long:    bootHelp,
		Example: bootExamples,
		Args:    noArgs,
	}
	cmd.AddCommand(newBootStatusCommand(f), newBootAckCommand(f), newBootResetCommand(f), newBootSelectCommand(f))
	return cmd
}

func newBootStatusCommand(f *Factory) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Each Kairos node's slot, image, boot, fallback, pin, post-boot health and cordon, and the policy's conditions",
		Long:    bootStatusHelp,
		Example: bootStatusExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			p, err := getBootPolicy(cmd.Context(), c)
			if err != nil {
				return err
			}
			out := f.Streams().Out
			if output != outputTable {
				return printObject(out, output, p)
			}
			return renderBootStatus(out, p, f.Now(), palette{on: f.Color(out)})
		},
	}
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	return cmd
}

// bootPolicyCreate is how to create the policy with its defaults.
const bootPolicyCreate = `printf 'apiVersion: nodewright.spectrocloud.com/v1alpha1\nkind: BootRecoveryPolicy\nmetadata:\n  name: nodewright\n' | kubectl apply -f -`

// errNoBootPolicy says the cluster has no BootRecoveryPolicy, and how to create one.
var errNoBootPolicy = fmt.Errorf("BootRecoveryPolicy %q not found: nothing follows the Kairos nodes' boots until it exists (docs/bootrecovery.md). Create it, with its defaults: %s",
	nwv1.BootRecoveryPolicyName, bootPolicyCreate)

// getBootPolicy reads the singleton; its absence, or an API server that does not serve the
// kind, is said plainly.
func getBootPolicy(ctx context.Context, c client.Reader) (*nwv1.BootRecoveryPolicy, error) {
	p := &nwv1.BootRecoveryPolicy{}
	err := c.Get(ctx, client.ObjectKey{Name: nwv1.BootRecoveryPolicyName}, p)
	switch {
	case err == nil:
		return p, nil
	case meta.IsNoMatchError(err):
		return nil, errors.New("this API server does not serve BootRecoveryPolicy (" + nwv1.GroupVersion.String() + "): install the operator's CRDs of this version")
	case apierrors.IsNotFound(err):
		return nil, errNoBootPolicy
	}
	return nil, apiError(err, bootKind, nwv1.BootRecoveryPolicyName)
}

// bootNodes are the policy's node records by name.
func bootNodes(p *nwv1.BootRecoveryPolicy) []nwv1.NodeBootRecord {
	nodes := slices.Clone(p.Status.Nodes)
	slices.SortFunc(nodes, func(a, b nwv1.NodeBootRecord) int { return strings.Compare(a.Name, b.Name) })
	return nodes
}

// renderBootStatus writes the policy for a person: a function of the policy and the clock.
func renderBootStatus(w io.Writer, p *nwv1.BootRecoveryPolicy, now time.Time, pal palette) error {
	if _, err := fmt.Fprintf(w, "%s %s: %s\n\n", "BootRecoveryPolicy", shown(p.Name), describeBootPolicy(p)); err != nil {
		return err
	}
	nodes := bootNodes(p)
	if len(nodes) == 0 {
		if _, err := fmt.Fprintln(w, "No Kairos node has reported its boot yet."); err != nil {
			return err
		}
	} else if err := bootTable(nodes, now).write(w, pal); err != nil {
		return err
	}
	var notes []string
	for _, n := range nodes {
		if n.NextBootFallsBack != "" {
			notes = append(notes, pal.paint(red, fmt.Sprintf("  %s: its next boot would fall back at once (%s); the agent refuses to reboot it; once you know why, clear its flags: kubectl nodewright boot reset %s",
				shown(n.Name), shown(oneLine(n.NextBootFallsBack)), shown(n.Name))))
		}
	}
	if len(notes) > 0 {
		if _, err := fmt.Fprintf(w, "\n%s\n%s\n", pal.paint(bold, "Next boot falls back:"), strings.Join(notes, "\n")); err != nil {
			return err
		}
	}
	var acks []string
	for _, n := range nodes {
		if fb := n.Unacknowledged(); fb != nil {
			acks = append(acks, fmt.Sprintf("  kubectl nodewright boot ack %s   # fell back at boot %s", shown(n.Name), shown(fb.BootID)))
		}
	}
	if len(acks) > 0 {
		head := "Not acknowledged: once you know why a node fell back, acknowledge its boot:"
		if p.HoldsUpgrades() {
			head = "Not acknowledged: no OSVersionPolicy starts a node's step until each is; once you know why a node fell back, acknowledge its boot:"
		}
		if _, err := fmt.Fprintf(w, "\n%s\n%s\n", pal.paint(yellow, head), strings.Join(acks, "\n")); err != nil {
			return err
		}
	}
	if repairs := bootRepairs(nodes, pal); len(repairs) > 0 {
		if _, err := fmt.Fprintf(w, "\n%s\n%s\n", pal.paint(bold, "Repairs and rollbacks (OSVersionPolicies on one node, run once a person approves their step Node1):"), strings.Join(repairs, "\n")); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	conds := table{header: []string{"CONDITION", "STATUS", "REASON", "MESSAGE"}}
	for _, cond := range conditionsFalseFirst(p.Status.Conditions) {
		conds.add(c(shown(cond.Type)), cs(shown(string(cond.Status)), conditionStyle(cond.Status)), c(shown(cond.Reason)), c(shown(oneLine(cond.Message))))
	}
	if len(p.Status.Conditions) == 0 {
		conds.add(c("(none yet)"))
	}
	return conds.write(w, pal)
}

// bootHealthDefaultTimeout is spec.postBootHealth.timeout's default, for a policy stored
// without a spec (the CRD's defaults apply inside one).
const bootHealthDefaultTimeout = 15 * time.Minute

// describeBootPolicy says what the policy does, from its spec (the API server's defaults
// filled in).
func describeBootPolicy(p *nwv1.BootRecoveryPolicy) string {
	s := p.Spec
	on := func(b *bool) bool { return b == nil || *b }
	var fallback []string
	if p.HoldsUpgrades() {
		fallback = append(fallback, "hold upgrades")
	}
	if on(s.OnFallback.Alert) {
		fallback = append(fallback, "alert")
	}
	if s.OnFallback.Repair != "" && s.OnFallback.Repair != nwv1.FallbackRepairNone {
		fallback = append(fallback, "repair "+shown(string(s.OnFallback.Repair)))
	}
	var recovery []string
	if on(s.OnRecoveryBoot.Cordon) {
		recovery = append(recovery, "cordon")
	}
	if on(s.OnRecoveryBoot.Alert) {
		recovery = append(recovery, "alert")
	}
	orNothing := func(parts []string) string {
		if len(parts) == 0 {
			return "nothing"
		}
		return strings.Join(parts, ", ")
	}
	timeout, then := bootHealthDefaultTimeout, nwv1.PostBootHealthAlert
	if d := s.PostBootHealth.Timeout.Duration; d > 0 {
		timeout = d
	}
	if s.OnPostBootHealthTimeout != "" {
		then = s.OnPostBootHealthTimeout
	}
	health := "post-boot health within " + shortDuration(timeout) + ", then " + shown(string(then))
	return fmt.Sprintf("on a fallback %s; on a recovery boot %s; %s", orNothing(fallback), orNothing(recovery), health)
}

func bootTable(nodes []nwv1.NodeBootRecord, now time.Time) *table {
	t := &table{header: []string{"NODE", "SLOT", "IMAGE", "BOOT", "FELL BACK", "PINNED", "HEALTH", "CORDON"}}
	for _, n := range nodes {
		slot := cs(bootSlot(n), slotStyle(n.BootEntry))
		fell, fellStyle := bootFellBack(n)
		pinned := cs(dash(shown(n.PinnedImage)), yellow)
		health, healthStyle := bootHealth(n.PostBootHealth, now)
		cordon := c(dash(shown(string(n.Cordon))))
		if n.Cordon == nwv1.NodeCordoned {
			cordon.style = yellow
		}
		t.add(c(shown(n.Name)), slot, c(dash(shown(n.Image))), c(dash(shortBootID(n.BootID))), cs(fell, fellStyle), pinned, cs(health, healthStyle), cordon)
	}
	return t
}

// bootSlot is the boot entry and, on a UKI node, its boot counter: "Active (tries 2 left, 1
// done)".
func bootSlot(n nwv1.NodeBootRecord) string {
	slot := dash(shown(string(n.BootEntry)))
	if bc := n.BootCounting; bc != nil {
		slot += fmt.Sprintf(" (tries %d left, %d done)", bc.TriesLeft, bc.TriesDone)
	}
	return slot
}

func slotStyle(e nwv1.KairosBootEntry) style {
	switch e {
	case nwv1.KairosBootActive:
		return plain
	case nwv1.KairosBootPassive:
		return yellow
	}
	return red
}

// shortBootID is a boot ID's first 8 characters, as a person tells boots apart.
func shortBootID(id string) string {
	if r := []rune(id); len(r) > 8 {
		id = string(r[:8])
	}
	return shown(id)
}

// bootFellBack is the FELL BACK cell: "FROM → TO at boot B" while the last fallback is not
// acknowledged, "acknowledged by X" once it is.
func bootFellBack(n nwv1.NodeBootRecord) (string, style) {
	fb := n.LastFallback
	switch {
	case fb == nil:
		return "-", plain
	case n.Unacknowledged() == nil:
		if n.Acknowledged.By == "" {
			return "acknowledged", dim
		}
		return "acknowledged by " + shown(n.Acknowledged.By), dim
	}
	return fmt.Sprintf("%s → %s at boot %s", shown(shortImage(fb.FromImage)), dash(shown(fb.ToImage)), shortBootID(fb.BootID)), red
}

// bootHealth is the HEALTH cell: passed, waiting: what is red (how long is left), timed out:
// what was red.
func bootHealth(h *nwv1.PostBootHealthStatus, now time.Time) (string, style) {
	switch {
	case h == nil:
		return "-", plain
	case h.PassedAt != nil:
		return "passed", green
	case h.TimedOutAt != nil:
		if h.Failing == "" {
			return "timed out", red
		}
		return "timed out: " + shown(oneLine(h.Failing)), red
	}
	left := shortDuration(h.Deadline.Sub(now)) + " left"
	if h.Failing == "" {
		return "waiting (" + left + ")", yellow
	}
	return "waiting: " + shown(oneLine(h.Failing)) + " (" + left + ")", yellow
}

// dash is s, or "-" when it is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// bootRepairs says, per node, where the repair of its fallback and the rollback of its
// unhealthy boot stand: the policy and how to approve it while it waits, or why none was made.
func bootRepairs(nodes []nwv1.NodeBootRecord, pal palette) []string {
	var out []string
	for _, n := range nodes {
		for _, r := range []struct {
			what string
			st   *nwv1.BootRepairStatus
		}{{"repair of the fallback", n.Repair}, {"rollback of the unhealthy boot", n.Rollback}} {
			st := r.st
			if st == nil {
				continue
			}
			head := fmt.Sprintf("  %s: %s %s", shown(n.Name), r.what, shown(st.BootID))
			switch phase := nwv1.WorkflowPhase(st.Phase); {
			case st.Policy == "":
				out = append(out, pal.paint(yellow, head+": none made: "+shown(oneLine(st.Message))))
			case phase == nwv1.WorkflowPending && r.st == n.Rollback && st.BootID != n.BootID:
				out = append(out, fmt.Sprintf("%s: OSVersionPolicy %s (%s), Pending: the node booted again since (boot %s); the rollback's step refuses it",
					head, shown(st.Policy), shown(st.Image), shown(n.BootID)))
			case phase == nwv1.WorkflowPending:
				out = append(out, fmt.Sprintf("%s: OSVersionPolicy %s (%s), %s\n      kubectl nodewright approve %s Node1",
					head, shown(st.Policy), shown(st.Image), shown(string(phase)), shown(st.Policy)))
			default:
				out = append(out, fmt.Sprintf("%s: OSVersionPolicy %s (%s), %s", head, shown(st.Policy), shown(st.Image), shown(st.Phase)))
			}
		}
	}
	return out
}
