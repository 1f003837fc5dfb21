package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
)

const bootResetHelp = `Create the repair that clears NODE's stale boot-assessment flags: an OSVersionPolicy with
spec.repairs {node: NODE, bootID: its boot, kind: AssessmentReset} and spec.approval Manual,
named NODE-reset-<boot>. Nothing changes on the node until a person approves its step Node1
(kubectl nodewright approve osvp/NAME); then, in the maintenance window if it has one and
holding the cluster-wide claim, it cordons NODE, protects its VMs, drains it, has its agent
clear boot_assessment_tentative and enable_boot_assessment (a BootAssessmentReset, under the
agent's checkpoint; never enable_boot_assessment_always), reboots it, proves it booted its
image from its active slot with its boot counted good, soaks it and gives it back.

A boot that never counted as good leaves the flags armed (kairos#4303): the next boot would
fall back to the passive slot at once, so the agent refuses every reboot until they are
cleared (boot status lists such nodes). Clear them once you know why that boot never counted.

The command reads NODE's boot from its agent's report (NodewrightAgentStatus): it must run
its active slot without upgrade_failure, with the flags armed. spec.image is the image it
runs, pinned by digest: --image, or as the EdgeProfile in force pins it (spec.osImages), or
as the newest OSVersionPolicy that names it. The repair is of that boot alone: a node that
boots again before it starts is not repaired (its Preflight says so).

Exit codes: 0 created, or there already; 1 the node is refused as above, or the API server
refused the policy; 2 usage.`

const bootResetExamples = `  # edge-2's last boot never counted as good; its agent refuses to reboot it
  kubectl nodewright boot reset edge-2
  kubectl nodewright approve osvp/edge-2-reset-3d64d568`

const bootSelectHelp = `Create the repair that boots NODE once into ENTRY (active or passive): an OSVersionPolicy with
spec.repairs {node: NODE, bootID: its boot, kind: SelectBootEntry, entry: ENTRY} and
spec.approval Manual, named NODE-select-<boot>. Once a person approves its step Node1, it
cordons NODE, protects its VMs, drains it, has its agent select ENTRY for the next boot only
(next_entry in /oem/grubenv, as kairos-agent bootentry --select does), reboots it, proves it
booted ENTRY with --image, soaks it and gives it back. GRUB clears the selection as it boots
it: the boot after boots the default entry again. A selected boot of the passive entry is not
a fallback (no upgrade_failure).

--image is the image ENTRY holds, REPOSITORY:TAG (pinned by digest as boot reset pins it) or
REPOSITORY:TAG@sha256:DIGEST: the agents report the image a node booted, not what its other
slot holds (after an upgrade, the passive slot holds the image the node ran before it).

A repair does not boot a node into its recovery system: there it runs none of the cluster's
work, and its step could neither soak it nor give its VMs back.

Exit codes: 0 created, or there already; 1 the node is refused, or the API server refused the
policy; 2 usage.`

const bootSelectExamples = `  # Boot edge-2 once into the image it ran before its last upgrade
  kubectl nodewright boot select edge-2 passive --image quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2
  kubectl nodewright approve osvp/edge-2-select-3d64d568`

func newBootResetCommand(f *Factory) *cobra.Command {
	var image string
	cmd := &cobra.Command{
		Use:               "reset NODE [--image IMAGE]",
		Short:             "Create the approved repair that clears a node's stale boot-assessment flags and reboots it",
		Long:              bootResetHelp,
		Example:           bootResetExamples,
		Args:              exactlyOneNode,
		ValidArgsFunction: noCompletion,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			res, err := CreateBootRepair(cmd.Context(), c, nwv1.OSNodeRepair{Node: args[0], Kind: nwv1.OSRepairAssessmentReset}, image)
			if err != nil {
				return err
			}
			return printLines(f, res.Lines())
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "the image the node runs, REPOSITORY:TAG[@sha256:DIGEST]; by default the one its agent reports, pinned by digest")
	return cmd
}

func newBootSelectCommand(f *Factory) *cobra.Command {
	var image string
	cmd := &cobra.Command{
		Use:     "select NODE ENTRY --image IMAGE",
		Short:   "Create the approved repair that boots a node once into its active or passive entry",
		Long:    bootSelectHelp,
		Example: bootSelectExamples,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageErrorf("%s wants NODE and ENTRY (active or passive), got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		ValidArgsFunction: noCompletion,
		RunE: func(cmd *cobra.Command, args []string) error {
			entry, err := bootEntryArg(args[1])
			if err != nil {
				return err
			}
			if image == "" {
				return usageErrorf("--image is required: the image %s's %s entry holds (its agent reports only the image it booted)", args[0], strings.ToLower(string(entry)))
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			res, err := CreateBootRepair(cmd.Context(), c, nwv1.OSNodeRepair{Node: args[0], Kind: nwv1.OSRepairSelectBootEntry, Entry: entry}, image)
			if err != nil {
				return err
			}
			return printLines(f, res.Lines())
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "the image ENTRY holds, REPOSITORY:TAG[@sha256:DIGEST]")
	return cmd
}

func exactlyOneNode(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageErrorf("%s wants one NODE, got %d", cmd.CommandPath(), len(args))
	}
	return nil
}

func noCompletion(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// bootEntryArg is ENTRY: active or passive, in any case; recovery is refused with the reason.
func bootEntryArg(arg string) (nwv1.KairosBootEntry, error) {
	switch strings.ToLower(arg) {
	case "active":
		return nwv1.KairosBootActive, nil
	case "passive":
		return nwv1.KairosBootPassive, nil
	case "recovery":
		return "", usageErrorf("ENTRY recovery: a repair does not boot a node into its recovery system (it runs none of the cluster's work there, and its step could neither soak it nor give its VMs back)")
	}
	return "", usageErrorf("ENTRY %q: must be active or passive", arg)
}

// BootRepair is what boot reset or boot select made: the repair policy, and whether this run
// created it (else it was there, made for the same boot).
type BootRepair struct {
	Policy  *nwv1.OSVersionPolicy
	Created bool
}

// CreateBootRepair creates the repair rp (kind AssessmentReset or SelectBootEntry) of its
// node's current boot, as its agent reports it, with image: the one the node runs (by default)
// or the one its entry holds, pinned by digest. It refuses a node whose report does not allow
// the repair, naming why, before anything is written.
func CreateBootRepair(ctx context.Context, c client.Client, rp nwv1.OSNodeRepair, image string) (BootRepair, error) {
	if _, err := nodeNames("NODE", []string{rp.Node}, 1); err != nil {
		return BootRepair{}, err
	}
	as := &nwv1.NodewrightAgentStatus{}
	if err := c.Get(ctx, client.ObjectKey{Name: rp.Node}, as); apierrors.IsNotFound(err) {
		return BootRepair{}, fmt.Errorf("%s: no NodewrightAgentStatus: no agent reports its boot", rp.Node)
	} else if err != nil {
		return BootRepair{}, apiError(err, "nodewrightagentstatus", rp.Node)
	}
	os := as.Status.OS
	if os == nil || os.Kind != nwv1.HostOSKairos || os.Kairos == nil || os.BootID == "" {
		return BootRepair{}, fmt.Errorf("%s: its agent reports no Kairos boot with a boot ID: a boot repair is of a Kairos node's boot", rp.Node)
	}
	k := os.Kairos
	rp.BootID = os.BootID
	if rp.IsAssessmentReset() {
		if k.Image == "" {
			return BootRepair{}, fmt.Errorf("%s: its agent reports no image (its /etc/kairos-release names no KAIROS_IMAGE_REPO): the reset's reboot could not be proven", rp.Node)
		}
		if image == "" {
			image = k.Image
		}
		if osupgrade.Repository(image) != k.Image {
			return BootRepair{}, usageErrorf("--image %s: %s runs %s from its active slot; a reset reboots it into the image it runs", image, rp.Node, shown(k.Image))
		}
	}
	what := "reset"
	if rp.IsBootSelection() {
		what = "select"
	}
	// The rules the operator's Preflight applies, applied before anything is written.
	want := osupgrade.NewRepair(what, image, rp)
	if why, err := osupgrade.RepairRefused(ctx, c, want, as); err != nil {
		return BootRepair{}, err
	} else if why != "" {
		return BootRepair{}, errors.New(why)
	}
	if !strings.Contains(image, "@sha256:") {
		pinned, why, err := osupgrade.PinnedImage(ctx, c, image)
		if err != nil {
			return BootRepair{}, err
		}
		if pinned == "" {
			return BootRepair{}, fmt.Errorf("%s: %s; give it pinned: --image %s@sha256:<its digest>", rp.Node, shown(why), shown(image))
		}
		image = pinned
		want.Spec.Image = pinned
	}
	p, created, err := osupgrade.CreateRepair(ctx, c, want)
	switch {
	case errors.Is(err, osupgrade.ErrNotTheRepair):
		return BootRepair{}, fmt.Errorf("%s: %w; delete it, or repair by hand (docs/bootrecovery.md)", rp.Node, err)
	case err != nil:
		return BootRepair{}, apiError(err, osKind, osupgrade.RepairName(rp.Node, what, rp.BootID))
	case created:
		return BootRepair{Policy: p, Created: true}, nil
	}
	// Made before, for the same boot: it is this repair only if it is still to be approved,
	// with this image.
	switch {
	case p.Spec.Image != image:
		return BootRepair{}, fmt.Errorf("%s/%s is there for the same boot with spec.image %s, not %s: delete it to make this one", osKind, p.Name, p.Spec.Image, image)
	case p.Status.Phase.Finished():
		return BootRepair{}, fmt.Errorf("%s/%s is there for the same boot and ended %s (kubectl describe osvp %s says why): delete it to make it again", osKind, p.Name, p.Status.Phase, p.Name)
	}
	return BootRepair{Policy: p}, nil
}

// Lines say what the repair does, and what it waits for.
func (r BootRepair) Lines() []string {
	p := r.Policy
	rp := p.Spec.Repairs
	made := "created"
	if !r.Created {
		made = "already there, made for the same boot"
	}
	what := fmt.Sprintf("clears %s's stale boot-assessment flags, then reboots it into %s from its active slot", rp.Node, p.Spec.Image)
	if rp.IsBootSelection() {
		what = fmt.Sprintf("boots %s once into its %s entry, %s; the boot after boots its default entry again", rp.Node, strings.ToLower(string(rp.Entry)), p.Spec.Image)
	}
	return []string{
		fmt.Sprintf("%s/%s %s: it %s (boot %s)", osKind, p.Name, made, what, shown(rp.BootID)),
		fmt.Sprintf("Next: approve its step Node1 (kubectl nodewright approve osvp/%s); it waits for its maintenance window, if any, and the cluster-wide claim, then cordons, drains and reboots %s.", p.Name, rp.Node),
	}
}
