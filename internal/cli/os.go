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
	"github.com/spectrocloud/nodewright/internal/osupgrade"
)

const osHelp = `Move Kairos nodes to one OS image, one node at a time, each proven booted from the node
(OSVersionPolicy, docs/osversion.md): "os plan" creates a policy, "os watch" follows one node by
node, "os list" lists them, "os ack" acknowledges a node's fallback from a policy's image.`

const osExamples = `  kubectl nodewright os plan --image quay.io/kairos/ubuntu:24.04-v3.6.0@sha256:<64 hex> --name to-v3-6
  kubectl nodewright os watch to-v3-6
  kubectl nodewright os list
  kubectl nodewright os ack to-v3-6 edge-2`

const osPlanHelp = `Create an OSVersionPolicy: move the selected Kairos nodes to the image --image, one node at a
time. Each node is cordoned, its VMs moved off (or stopped, --vm-protection), drained, the image
staged by its agent, the node rebooted, proven from its agent's report to have booted the image
(a new boot ID, the image in /etc/kairos-release, the active slot with no upgrade_failure, the
boot assessment cleared), then soaked with its storage healthy for --soak before the next node
starts, uncordoned if the policy cordoned it, and its VMs brought back. A node that falls back to its previous image stops the policy (FellBack),
and one that does not come back within --reboot-timeout fails it; the policy never undoes a node.

--image is REPOSITORY:TAG@sha256:DIGEST: pinned by its digest, which the node stages, and named
with its tag, which the booted node's /etc/kairos-release must name.

What is not given is left to the cluster: the API server fills in the soak (10m), the reboot
timeout (15m), the VM protection (LiveMigrate), the recovery upgrade (Never) and the approval
(Automatic); the operator takes
every node (or those --selector selects) and orders those --order does not name as a flip
does: tiebreakers, secondaries, the primary last. The created line says what was filled in.

A node that fell back from this image before is held by the policy unless --ack names it: the
admission webhook stamps you as the one who acknowledged it. The admission webhook refuses a
policy while another cluster-wide workflow has not finished, a node of --order or --hold the
cluster lacks, a selector that cannot select, and unless the cluster is in the Managed mode;
the refusal is printed as the webhook wrote it, naming the field.

With --approval Manual each node waits before it is changed until a person approves it
(kubectl nodewright approve osvp/NAME); "os watch" says when, and the command to type. With
--wait the command follows the policy to its end, as "os watch --wait" does, and its exit code
says how it ended.

Exit codes: 0 created (with --wait: Succeeded); 1 refused or failed (with --wait: ended Failed,
or was deleted); 2 usage; 3 --wait ended before the policy did (--timeout, or interrupted).`

const osPlanExamples = `  # Every node to the image, the operator choosing the order (the primary last)
  kubectl nodewright os plan --image quay.io/kairos/ubuntu:24.04-v3.6.0@sha256:<64 hex> --name to-v3-6

  # These nodes in this order, edge-3 left alone, half an hour of soak, each node approved by a person
  kubectl nodewright os plan --image REF --order edge-2,edge-1 --hold "edge-3=RMA pending" --soak 30m --approval Manual

  # Only the nodes labelled for the canary, at night, the recovery systems too once all soaked
  kubectl nodewright os plan --image REF --selector ring=canary --maintenance-window "22:00-04:00 Europe/Berlin" --upgrade-recovery

  # Try the image again on a node that fell back from it, after a person looked at it
  kubectl nodewright os plan --image REF --ack edge-2

  # In a script: wait for the result, exit 0 only if it Succeeded
  kubectl nodewright os plan --image REF --name to-v3-6 --wait --timeout 6h`

// The bounds the API puts on a policy's spec.
const (
	minSoak          = 10 * time.Second
	maxSoak          = 24 * time.Hour
	minRebootTimeout = 30 * time.Second
	maxRebootTimeout = 2 * time.Hour
	maxHoldReason    = 256
	maxImageLength   = 512
	osKind           = "osversionpolicy"
)

// osImagePattern is spec.image as the CRD's validation wants it: REPOSITORY:TAG@sha256:DIGEST.
var osImagePattern = regexp.MustCompile(`^([a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*):([A-Za-z0-9_][A-Za-z0-9_.+-]{0,127})@sha256:[a-f0-9]{64}$`)

// osDigestPattern is a reference pinned by digest, whatever comes before.
var osDigestPattern = regexp.MustCompile(`@sha256:[a-f0-9]{64}$`)

// osPlanOptions are the flags of os plan.
type osPlanOptions struct {
	image, name, output string
	vmProtection        string
	order, acks, holds  []string
	selector            string
	soak, rebootTimeout time.Duration
	upgradeRecovery     bool
	gates               gateOptions
	wait                waitOptions
}

func newOSCommand(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "os",
		Short:   "Move Kairos nodes to an OS image node by node, proven booted (OSVersionPolicy): plan, watch, list, ack",
		Long:    osHelp,
		Example: osExamples,
		Args:    noArgs,
	}
	cmd.AddCommand(newOSPlanCommand(f), newOSWatchCommand(f), newOSListCommand(f), newOSAckCommand(f))
	return cmd
}

func newOSPlanCommand(f *Factory) *cobra.Command {
	o := &osPlanOptions{}
	cmd := &cobra.Command{
		Use:     "plan --image REPOSITORY:TAG@sha256:DIGEST",
		Short:   "Create an OSVersionPolicy: the nodes to the image one at a time, each proven booted and soaked",
		Long:    osPlanHelp,
		Example: osPlanExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOSPlan(cmd, f, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.image, "image", "", "The Kairos image every selected node runs (required): REPOSITORY:TAG@sha256:DIGEST.")
	fl.StringSliceVar(&o.order, "order", nil, "The nodes upgraded first, in this order, comma-separated (at most 16). The others follow in the default order: tiebreakers, secondaries, the primary last.")
	fl.StringVar(&o.selector, "selector", "", "The nodes the policy upgrades, by label (k=v,k2 in (a,b),!k3). Default: every node.")
	fl.StringArrayVar(&o.holds, "hold", nil, "A node the policy leaves alone, and why: NODE=REASON (repeat it, at most 16).")
	fl.DurationVar(&o.soak, "soak", 0, "How long a node's health gates must stay green after it booted the image before the next node starts, 10s to 24h. Default: 10m.")
	fl.DurationVar(&o.rebootTimeout, "reboot-timeout", 0, "How long a node may take from its reboot to its agent reporting the new boot, 30s to 2h. Default: 15m.")
	fl.StringVar(&o.vmProtection, "vm-protection", "", "What happens to a node's VMs while it is upgraded: LiveMigrate (the default: moved off and back), Stop (stopped and started again) or None (left to the drain and the reboot).")
	fl.BoolVar(&o.upgradeRecovery, "upgrade-recovery", false, "Upgrade each node's recovery system to the image too, once every node booted it and soaked (spec.upgradeRecovery AfterSoak). Default: Never.")
	fl.StringSliceVar(&o.acks, "ack", nil, "A node whose earlier fallback from this image you acknowledge: the policy may try the image on it again (comma-separated or repeated).")
	o.gates.addFlags(cmd, "each node waits", "a node may start being upgraded")
	fl.StringVar(&o.name, "name", "", "Name of the OSVersionPolicy. Default: os- and the image's tag, and five random characters.")
	outputFlag(cmd, &o.output, outputTable, outputJSON, outputYAML)
	o.wait.addFlags(cmd, "policy")
	_ = cmd.RegisterFlagCompletionFunc("order", completeNodeOrder(f))
	_ = cmd.RegisterFlagCompletionFunc("ack", completeNodeOrder(f))
	_ = cmd.RegisterFlagCompletionFunc("vm-protection", completeWords(vmProtections))
	return cmd
}

// checkOSImage says what is wrong with an image reference, naming --image; nil when the API
// server would take it.
func checkOSImage(image string) error {
	switch {
	case image == "":
		return usageErrorf("--image REPOSITORY:TAG@sha256:DIGEST is required: the Kairos image every selected node runs")
	case len(image) > maxImageLength:
		return usageErrorf("--image: %d characters, at most %d", len(image), maxImageLength)
	case !osDigestPattern.MatchString(image):
		return usageErrorf("--image %q: not pinned by digest: want REPOSITORY:TAG@sha256:<64 hex digits> (the node stages the image by its digest)", image)
	case !osImagePattern.MatchString(image):
		return usageErrorf("--image %q: want REPOSITORY:TAG before the digest, the repository in lower case (the booted node's /etc/kairos-release names the image by them)", image)
	}
	return nil
}

// buildOSPolicy turns the flags into the object to create; mistakes in them are usage errors
// that name the flag.
func buildOSPolicy(cmd *cobra.Command, o *osPlanOptions) (*nwv1.OSVersionPolicy, error) {
	if err := checkOSImage(o.image); err != nil {
		return nil, err
	}
	p := &nwv1.OSVersionPolicy{Spec: nwv1.OSVersionPolicySpec{Image: o.image}}
	s := &p.Spec
	var err error
	if s.NodeOrder, err = nodeNames("--order", o.order, osupgrade.MaxNodes); err != nil {
		return nil, err
	}
	if o.selector != "" {
		sel, err := metav1.ParseToLabelSelector(o.selector)
		if err != nil {
			return nil, usageErrorf("--selector %q: %v", o.selector, err)
		}
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			return nil, usageErrorf("--selector %q: %v", o.selector, err)
		}
		s.NodeSelector = sel
	}
	if len(o.holds) > osupgrade.MaxNodes {
		return nil, usageErrorf("--hold: at most %d nodes, got %d", osupgrade.MaxNodes, len(o.holds))
	}
	for _, h := range o.holds {
		node, reason, ok := strings.Cut(h, "=")
		node, reason = strings.TrimSpace(node), strings.TrimSpace(reason)
		switch {
		case !ok || node == "" || reason == "":
			return nil, usageErrorf("--hold %q: want NODE=REASON, e.g. \"edge-3=RMA pending\"", h)
		case len(validation.IsDNS1123Subdomain(node)) > 0:
			return nil, usageErrorf("--hold: %q is not a node name: %s", node, strings.Join(validation.IsDNS1123Subdomain(node), "; "))
		case len(reason) > maxHoldReason:
			return nil, usageErrorf("--hold %s: the reason has %d characters, at most %d", node, len(reason), maxHoldReason)
		}
		for _, had := range s.Hold {
			if had.Node == node {
				return nil, usageErrorf("--hold: node %s is named twice", node)
			}
		}
		for _, ordered := range s.NodeOrder {
			if ordered == node {
				return nil, usageErrorf("--hold %s: the node is in --order too: a node is upgraded or held, not both", node)
			}
		}
		s.Hold = append(s.Hold, nwv1.OSNodeHold{Node: node, Reason: reason})
	}
	if cmd.Flags().Changed("soak") {
		if d := o.soak; d < minSoak || d > maxSoak {
			return nil, usageErrorf("--soak %s: must be between 10s and 24h", d)
		}
		s.Soak = metav1.Duration{Duration: o.soak}
	}
	if cmd.Flags().Changed("reboot-timeout") {
		if d := o.rebootTimeout; d < minRebootTimeout || d > maxRebootTimeout {
			return nil, usageErrorf("--reboot-timeout %s: must be between 30s and 2h", d)
		}
		s.RebootTimeout = metav1.Duration{Duration: o.rebootTimeout}
	}
	if o.vmProtection != "" {
		var ok bool
		if s.VMProtection, ok = oneOf(o.vmProtection, vmProtections); !ok {
			return nil, usageErrorf("--vm-protection %q: want one of %s", o.vmProtection, joinModes(vmProtections))
		}
	}
	if o.upgradeRecovery {
		s.UpgradeRecovery = nwv1.RecoveryUpgradeAfterSoak
	}
	acks, err := nodeNames("--ack", o.acks, osupgrade.MaxNodes)
	if err != nil {
		return nil, err
	}
	if len(acks) > 0 {
		p.Annotations = map[string]string{nwv1.AnnotationAcknowledgeFallback: strings.Join(acks, ",")}
	}
	if s.Approval, s.MaintenanceWindow, err = o.gates.build(); err != nil {
		return nil, err
	}
	p.Name = o.name
	if p.Name == "" {
		p.Name = defaultOSPolicyName(o.image)
	}
	if errs := validation.IsDNS1123Subdomain(p.Name); len(errs) > 0 {
		return nil, usageErrorf("--name %q: %s", p.Name, strings.Join(errs, "; "))
	}
	return p, nil
}

// nonLabel are the characters a tag may have that a name may not.
var nonLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// defaultOSPolicyName is os-, the image's tag made a DNS label (at most 40 characters), and
// five random characters: os-24-04-v3-6-0-x7k2p.
func defaultOSPolicyName(image string) string {
	m := osImagePattern.FindStringSubmatch(image)
	tag := ""
	if m != nil {
		tag = strings.Trim(nonLabel.ReplaceAllString(strings.ToLower(m[6]), "-"), "-")
	}
	if len(tag) > 40 {
		tag = strings.Trim(tag[:40], "-")
	}
	if tag == "" {
		return "os-" + utilrand.String(5)
	}
	return "os-" + tag + "-" + utilrand.String(5)
}

func runOSPlan(cmd *cobra.Command, f *Factory, o *osPlanOptions) error {
	if err := checkOutput(&o.output, outputTable, outputJSON, outputYAML); err != nil {
		return err
	}
	p, err := buildOSPolicy(cmd, o)
	if err != nil {
		return err
	}
	return createAndFollow(cmd.Context(), f, p, osKind, "policy", o.output, o.wait, func() string { return describeOSPolicy(p) },
		func(ctx context.Context, c client.WithWatch) error {
			return osPolicies.follow(ctx, f, c, p.Name, o.wait)
		})
}

// describeOSPolicy is one line saying what a policy does, with what the API server filled in.
func describeOSPolicy(p *nwv1.OSVersionPolicy) string {
	s := p.Spec
	parts := []string{"to " + s.Image}
	nodes := "every node"
	if s.NodeSelector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(s.NodeSelector); err == nil {
			nodes = "the nodes " + sel.String() + " selects"
		}
	}
	if len(s.NodeOrder) > 0 {
		nodes += ", " + strings.Join(s.NodeOrder, ", ") + " first in that order"
	} else {
		nodes += " in the default order (the primary last)"
	}
	parts = append(parts, nodes)
	if len(s.Hold) > 0 {
		parts = append(parts, "holding "+strings.Join(mapSlice(s.Hold, func(h nwv1.OSNodeHold) string { return h.Node + " (" + h.Reason + ")" }), ", "))
	}
	if s.Soak.Duration > 0 {
		parts = append(parts, "soak "+shortDuration(s.Soak.Duration))
	}
	if s.RebootTimeout.Duration > 0 {
		parts = append(parts, "reboot timeout "+shortDuration(s.RebootTimeout.Duration))
	}
	if s.VMProtection != "" {
		parts = append(parts, "VM protection "+string(s.VMProtection))
	}
	if s.UpgradeRecovery != "" {
		parts = append(parts, "recovery upgrade "+string(s.UpgradeRecovery))
	}
	if acked := osupgrade.Acknowledged(p); len(acked) > 0 {
		parts = append(parts, "fallback acknowledged on "+strings.Join(acked, ", "))
	}
	return strings.Join(append(parts, describeGates(s.Approval, s.MaintenanceWindow)...), ", ")
}
