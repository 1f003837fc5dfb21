package cli

import (
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const flipHelp = `Create a BondModeFlipPlan: change the storage bond's mode to MODE on every node, one node at
a time, with the node's VMs protected and the node brought back to its previous mode if it
loses its peers (docs/api.md). MODE is a Linux bonding mode: balance-rr, active-backup,
balance-xor, broadcast, 802.3ad (LACP), balance-tlb or balance-alb.

What is not given is left to the cluster: the API server fills in the VM protection
(LiveMigrate), the connectivity timeout (60s) and the approval (Automatic); the operator
takes the bond the site's EdgeProfile names and changes the secondaries and tiebreakers first
and the primary last. The created line says what was filled in.

The admission webhook refuses a flip while another cluster-wide workflow (a flip or a
replication upgrade) has not finished, when a node of --order does not exist, and unless
the cluster is in the Managed mode; the refusal is printed as the webhook wrote it, naming
the field.

With --approval Manual each node waits before it is changed until a person approves it
(kubectl nodewright approve bondflip/NAME); "flip watch" says when, and the command to type.
With --wait the command follows the flip to its end, as "flip watch --wait" does, and its exit
code says how it ended.

Exit codes: 0 created (with --wait: Succeeded); 1 refused or failed (with --wait: ended Failed
or RolledBack, or was deleted); 2 usage; 3 --wait ended before the flip did (--timeout, or
interrupted).`

const flipExamples = `  # Every node to LACP, the operator choosing the order (the primary last)
  kubectl nodewright flip --to 802.3ad

  # In this order, stopping each node's VMs rather than migrating them, each node approved by a person
  kubectl nodewright flip --to active-backup --order edge-2,edge-3,edge-1 --vm-protection Stop --approval Manual

  # Only at night on weekends, Berlin time
  kubectl nodewright flip --to 802.3ad --maintenance-window "Sat,Sun 22:00-04:00 Europe/Berlin"

  # In a script: wait for the result, exit 0 only if it Succeeded
  kubectl nodewright flip --to 802.3ad --name to-lacp --wait --timeout 2h

  # Follow it later, or list them
  kubectl nodewright flip watch to-lacp
  kubectl nodewright flip list`

// bondModes are the modes --to takes, in the API's order (the BondMode enum).
var bondModes = []nwv1.BondMode{
	nwv1.BondModeBalanceRR, nwv1.BondModeActiveBackup, nwv1.BondModeBalanceXOR, nwv1.BondModeBroadcast,
	nwv1.BondMode8023AD, nwv1.BondModeBalanceTLB, nwv1.BondModeBalanceALB,
}

var (
	vmProtections = []nwv1.VMProtection{nwv1.VMProtectionLiveMigrate, nwv1.VMProtectionStop, nwv1.VMProtectionNone}
)

// The bounds of spec.connectivityTimeout, as the API's validation has them.
const (
	minConnectivityTimeout = 10 * time.Second
	maxConnectivityTimeout = 10 * time.Minute
	maxFlipNodes           = 3
)

// bondInterfacePattern is spec.bondInterface's pattern: a Linux interface name.
var bondInterfacePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`)

// flipOptions are the flags of flip.
type flipOptions struct {
	to, bond, vmProtection, name, output string
	order                                []string
	connectivityTimeout                  time.Duration
	gates                                gateOptions
	wait                                 waitOptions
}

func newFlipCommand(f *Factory) *cobra.Command {
	o := &flipOptions{}
	cmd := &cobra.Command{
		Use:     "flip --to MODE",
		Short:   "Change the storage bond's mode on every node, one at a time (creates a BondModeFlipPlan); list and watch flips",
		Long:    flipHelp,
		Example: flipExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFlip(cmd, f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.to, "to", "", "The bond mode every node ends with (required): "+joinModes(bondModes)+".")
	fl.StringSliceVar(&o.order, "order", nil, "The nodes in the order they are changed, comma-separated (at most 3). Default: the secondaries and tiebreakers first, the primary last.")
	fl.StringVar(&o.vmProtection, "vm-protection", "", "What happens to a node's VMs while it is changed: LiveMigrate (the default), Stop or None.")
	fl.DurationVar(&o.connectivityTimeout, "connectivity-timeout", 0, "How long a node may take to reach its peers again before it is rolled back, 10s to 10m. Default: 60s.")
	fl.StringVar(&o.bond, "bond", "", "The bond to change (spec.bondInterface). Default: the one the site's EdgeProfile names.")
	o.gates.addFlags(cmd, "each node waits", "a node may start being changed")
	fl.StringVar(&o.name, "name", "", "Name of the BondModeFlipPlan. Default: flip-to-MODE- and five random characters (a dot in MODE becomes a dash).")
	outputFlag(cmd, &o.output, outputTable, outputJSON, outputYAML)
	o.wait.addFlags(cmd, "flip")
	_ = cmd.RegisterFlagCompletionFunc("to", completeWords(bondModes))
	_ = cmd.RegisterFlagCompletionFunc("vm-protection", completeWords(vmProtections))
	_ = cmd.RegisterFlagCompletionFunc("order", completeNodeOrder(f))

	cmd.AddCommand(newFlipListCommand(f), newFlipWatchCommand(f))
	return cmd
}

func joinModes[T ~string](values []T) string {
	return strings.Join(mapSlice(values, func(v T) string { return string(v) }), ", ")
}

// oneOf is the value among values that s names, in any case.
func oneOf[T ~string](s string, values []T) (T, bool) {
	for _, v := range values {
		if strings.EqualFold(s, string(v)) {
			return v, true
		}
	}
	return "", false
}

// buildFlip turns the flags into the object to create; mistakes in them are usage errors that
// name the flag.
func buildFlip(cmd *cobra.Command, o *flipOptions) (*nwv1.BondModeFlipPlan, error) {
	if o.to == "" {
		return nil, usageErrorf("--to MODE is required: the bond mode every node ends with (%s)", joinModes(bondModes))
	}
	mode, ok := oneOf(o.to, bondModes)
	if !ok {
		hint := ""
		if strings.EqualFold(o.to, "lacp") {
			hint = " (LACP is 802.3ad)"
		}
		return nil, usageErrorf("--to %q: not a bond mode%s: want one of %s", o.to, hint, joinModes(bondModes))
	}
	flip := &nwv1.BondModeFlipPlan{Spec: nwv1.BondModeFlipPlanSpec{TargetMode: mode}}
	s := &flip.Spec

	var err error
	if s.NodeOrder, err = nodeNames("--order", o.order, maxFlipNodes); err != nil {
		return nil, err
	}
	if o.vmProtection != "" {
		if s.VMProtection, ok = oneOf(o.vmProtection, vmProtections); !ok {
			return nil, usageErrorf("--vm-protection %q: want one of %s", o.vmProtection, joinModes(vmProtections))
		}
	}
	if cmd.Flags().Changed("connectivity-timeout") {
		d := o.connectivityTimeout
		if d < minConnectivityTimeout || d > maxConnectivityTimeout {
			return nil, usageErrorf("--connectivity-timeout %s: must be between 10s and 10m", d)
		}
		s.ConnectivityTimeout = metav1.Duration{Duration: d}
	}
	if o.bond != "" {
		if !bondInterfacePattern.MatchString(o.bond) {
			return nil, usageErrorf("--bond %q: not an interface name (letters, digits, '.', '_' and '-', at most 15 characters, starting with a letter or digit)", o.bond)
		}
		s.BondInterface = o.bond
	}
	if s.Approval, s.MaintenanceWindow, err = o.gates.build(); err != nil {
		return nil, err
	}
	flip.Name = o.name
	if flip.Name == "" {
		flip.Name = defaultFlipName(mode)
	}
	if errs := validation.IsDNS1123Subdomain(flip.Name); len(errs) > 0 {
		return nil, usageErrorf("--name %q: %s", flip.Name, strings.Join(errs, "; "))
	}
	return flip, nil
}

// defaultFlipName is flip-to-MODE- and five random characters; 802.3ad's dot becomes a dash,
// so that the name is one DNS label like the others.
func defaultFlipName(mode nwv1.BondMode) string {
	return "flip-to-" + strings.ReplaceAll(string(mode), ".", "-") + "-" + utilrand.String(5)
}

func runFlip(cmd *cobra.Command, f *Factory, o *flipOptions) error {
	if err := checkOutput(&o.output, outputTable, outputJSON, outputYAML); err != nil {
		return err
	}
	flip, err := buildFlip(cmd, o)
	if err != nil {
		return err
	}
	return createAndFollow(cmd.Context(), f, flip, flipKind, "flip", o.output, o.wait, func() string { return describeFlip(flip) },
		func(ctx context.Context, c client.WithWatch) error { return flips.follow(ctx, f, c, flip.Name, o.wait) })
}

// flipKind is the kind as the messages name it.
const flipKind = "bondmodeflipplan"

// describeFlip is one line saying what a flip does, with what the API server filled in.
func describeFlip(flip *nwv1.BondModeFlipPlan) string {
	s := flip.Spec
	what := "to " + string(s.TargetMode)
	if s.BondInterface != "" {
		what += " on " + s.BondInterface
	} else {
		what += " on the profile's bond"
	}
	parts := []string{what}
	if len(s.NodeOrder) > 0 {
		parts = append(parts, "nodes "+strings.Join(s.NodeOrder, ", ")+" in that order")
	} else {
		parts = append(parts, "nodes in the default order (the primary last)")
	}
	if s.VMProtection != "" {
		parts = append(parts, "VM protection "+string(s.VMProtection))
	}
	if s.ConnectivityTimeout.Duration > 0 {
		parts = append(parts, "connectivity timeout "+shortDuration(s.ConnectivityTimeout.Duration))
	}
	return strings.Join(append(parts, describeGates(s.Approval, s.MaintenanceWindow)...), ", ")
}
