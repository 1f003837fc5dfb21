package osupgrade

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/text"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// ReasonNodeFellBack is the Held reason of a policy whose next node's step waits because a node
// fell back and the BootRecoveryPolicy holds the upgrades until a person acknowledges it.
const ReasonNodeFellBack = "NodeFellBack"

// Pinned are the nodes the BootRecoveryPolicy pins to the image they booted (its
// spec.onFallback.holdUpgrades, while their fallback is not acknowledged), by name; none
// without a BootRecoveryPolicy.
func Pinned(ctx context.Context, c client.Reader) (map[string]nwv1.NodeBootRecord, error) {
	p := &nwv1.BootRecoveryPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: nwv1.BootRecoveryPolicyName}, p); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading the BootRecoveryPolicy: %w", err)
	}
	out := map[string]nwv1.NodeBootRecord{}
	if !p.HoldsUpgrades() {
		return out, nil
	}
	for _, n := range p.Status.Nodes {
		if n.Unacknowledged() != nil {
			out[n.Name] = n
		}
	}
	return out, nil
}

// PinnedReason says why node n is held: pinned to the image it booted after a fallback.
func PinnedReason(n nwv1.NodeBootRecord) string {
	fb := n.Unacknowledged()
	return fmt.Sprintf("the BootRecoveryPolicy pins it to the image it booted, %s: it fell back from %s at boot %s, not acknowledged (annotation %s=%s@%s on the BootRecoveryPolicy)",
		n.PinnedImage, fb.FromImage, fb.BootID, nwv1.AnnotationAcknowledgeFallback, n.Name, fb.BootID)
}

// HoldReason is PinnedReason within an OSNodeHold's 256 bytes: the boot, and how to
// acknowledge it.
func HoldReason(n nwv1.NodeBootRecord) string {
	fb := n.Unacknowledged()
	why := fmt.Sprintf("fell back at boot %s, not acknowledged: the BootRecoveryPolicy pins it to the image it booted (acknowledge it there: %s@%s)",
		fb.BootID, n.Name, fb.BootID)
	return text.Shorten(why, 256)
}

// RepairsPin reports whether p is the repair of pinned node n's fallback (spec.repairs, kind
// Restage, names the node and the boot that fell back): the pin holds neither the node from p nor p's steps.
func RepairsPin(p *nwv1.OSVersionPolicy, n nwv1.NodeBootRecord) bool {
	rp, fb := p.Spec.Repairs, n.Unacknowledged()
	return rp.IsRestage() && fb != nil && rp.Node == n.Name && rp.BootID == fb.BootID
}

// fallbackGate holds every node's step while the BootRecoveryPolicy pins a node after a
// fallback: no node is upgraded while a node of the cluster runs an older image than it was
// given, one failure away from losing quorum.
var fallbackGate = engine.Gate{
	Name:  "NoUnacknowledgedFallback",
	Which: workflow.GateApproval,
	Check: func(ctx context.Context, env engine.GateEnv, o engine.GatedObject, step workflow.Step, _ time.Time) (engine.Verdict, error) {
		pinned, err := Pinned(ctx, env.Client)
		if err != nil {
			return engine.Verdict{}, err
		}
		if p, ok := o.(*nwv1.OSVersionPolicy); ok {
			maps.DeleteFunc(pinned, func(_ string, n nwv1.NodeBootRecord) bool { return RepairsPin(p, n) })
		}
		if len(pinned) == 0 {
			return engine.Verdict{Open: true}, nil
		}
		var why []string
		for _, name := range slices.Sorted(maps.Keys(pinned)) {
			why = append(why, name+": "+PinnedReason(pinned[name]))
		}
		return engine.Verdict{Reason: ReasonNodeFellBack, Message: fmt.Sprintf("step %s waits: a node fell back and its fallback is not acknowledged; %s",
			step, strings.Join(why, "; "))}, nil
	},
}

// RepairRefused says why p, a repair (spec.repairs) of kind Rollback, AssessmentReset or
// SelectBootEntry, may not change its node now, whose agent reports a; "" when it may, and for
// any other policy. Each is of one boot, which the node's agent must still report: a node that
// booted again since is judged by its new boot. So a policy that calls itself a repair gets no
// more than that repair's leave.
func RepairRefused(ctx context.Context, c client.Reader, p *nwv1.OSVersionPolicy, a *nwv1.NodewrightAgentStatus) (string, error) {
	rp := p.Spec.Repairs
	if !rp.IsRollback() && !rp.KeepsImage() {
		return "", nil
	}
	if a == nil || a.Status.OS == nil || a.Status.OS.Kairos == nil {
		return fmt.Sprintf("spec.repairs: %s's agent reports no Kairos boot", rp.Node), nil
	}
	if rp.IsRollback() {
		return rollbackRefused(ctx, c, p, a)
	}
	k := a.Status.OS.Kairos
	if a.Status.OS.BootID != rp.BootID {
		return fmt.Sprintf("spec.repairs: %s runs boot %s, not boot %s for which the %s was made: it booted again since; make a new one if it is still needed",
			rp.Node, a.Status.OS.BootID, rp.BootID, rp.Kind), nil
	}
	if rp.IsBootSelection() && k.BootAssessment.WouldFallBack() {
		return fmt.Sprintf("spec.repairs: %s's boot assessment is armed to fall back (boot_assessment_tentative=yes): its agent would refuse the reboot and leave the selection for whatever reboot came next; clear the flags first (an AssessmentReset: kubectl nodewright boot reset %s)",
			rp.Node, rp.Node), nil
	}
	if rp.IsAssessmentReset() {
		switch {
		case k.BootEntry != nwv1.KairosBootActive || k.UpgradeFailure:
			return fmt.Sprintf("spec.repairs: %s runs from its %s slot (upgrade_failure %t): an AssessmentReset reboots the node into the image of its active slot, which it must run",
				rp.Node, EntryOf(k), k.UpgradeFailure), nil
		case k.Image != Repository(p.Spec.Image):
			return fmt.Sprintf("spec.image: %s runs %s from its active slot, not %s: an AssessmentReset reboots the node into the image it runs",
				rp.Node, k.Image, Repository(p.Spec.Image)), nil
		case !k.BootAssessment.WouldFallBack():
			return fmt.Sprintf("spec.repairs: %s's boot assessment is not armed to fall back (its agent reports no boot_assessment_tentative=yes with enable_boot_assessment or enable_boot_assessment_always): there is nothing to reset", rp.Node), nil
		}
	}
	return "", nil
}

// EntryOf is the boot entry k reports, "unnamed" when none.
func EntryOf(k *nwv1.KairosStatus) string {
	if k == nil || k.BootEntry == "" {
		return "unnamed"
	}
	return string(k.BootEntry)
}

// rollbackRefused is RepairRefused of a rollback. A rollback is of one boot whose post-boot
// health timed out, to the image of the node's last healthy boot: the node's agent must still
// report that boot, from its active slot without upgrade_failure, and the BootRecoveryPolicy
// must record that boot's health timed out and, as the node's last healthy boot, one of p's
// image (its node's red DRBD is let through).
func rollbackRefused(ctx context.Context, c client.Reader, p *nwv1.OSVersionPolicy, a *nwv1.NodewrightAgentStatus) (string, error) {
	rp := p.Spec.Repairs
	if a.Status.OS.BootID != rp.BootID {
		return fmt.Sprintf("spec.repairs: %s runs boot %s, not boot %s whose health timed out: it booted again since; a rollback is of that boot alone",
			rp.Node, a.Status.OS.BootID, rp.BootID), nil
	}
	if k := a.Status.OS.Kairos; k.BootEntry != nwv1.KairosBootActive || k.UpgradeFailure {
		return fmt.Sprintf("spec.repairs: %s runs from its %s slot (upgrade_failure %t): a rollback replaces the image of the active slot, which the node must have booted",
			rp.Node, EntryOf(k), k.UpgradeFailure), nil
	}
	brp := &nwv1.BootRecoveryPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: nwv1.BootRecoveryPolicyName}, brp); apierrors.IsNotFound(err) {
		return "spec.repairs: there is no BootRecoveryPolicy: nothing recorded that the boot's post-boot health timed out", nil
	} else if err != nil {
		return "", fmt.Errorf("reading the BootRecoveryPolicy: %w", err)
	}
	switch rec := brp.Node(rp.Node); {
	case rec == nil || rec.PostBootHealth == nil || rec.PostBootHealth.BootID != rp.BootID || rec.PostBootHealth.TimedOutAt == nil:
		return fmt.Sprintf("spec.repairs: the BootRecoveryPolicy does not record that the post-boot health of %s's boot %s timed out", rp.Node, rp.BootID), nil
	case rec.LastHealthy == nil || rec.LastHealthy.Image != Repository(p.Spec.Image):
		last := "none"
		if rec.LastHealthy != nil {
			last = rec.LastHealthy.Image
		}
		return fmt.Sprintf("spec.repairs: %s is not the image of %s's last healthy boot as the BootRecoveryPolicy records it (%s): a rollback goes back to that image alone",
			Repository(p.Spec.Image), rp.Node, last), nil
	}
	return "", nil
}
