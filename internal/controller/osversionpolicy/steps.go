package osversionpolicy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/nodecordon"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/vmprotect"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// The reasons of the policy's own Events (the engine's say the rest).
const (
	ReasonFellBack       = "FellBack"
	ReasonBootedImage    = "BootedImage"
	ReasonSoakFailed     = "SoakFailed"
	ReasonDidNotComeBack = "DidNotComeBack"
)

// Names of the operations of node k's step.
func stageName(k int) string    { return "n" + strconv.Itoa(k) + "-stage" }
func rebootName(k int) string   { return "n" + strconv.Itoa(k) + "-reboot" }
func recoveryName(k int) string { return "n" + strconv.Itoa(k) + "-recovery" }

// nodeStep is the action of node k's step, which carries out its parts in order. A node that
// already runs the image, before any part began, is skipped. The record of the parts has the
// fields of a flip's, and the flip's part runner (bondflip.RunParts) runs it.
func (r *Reconciler) nodeStep(ctx context.Context, s *scope) (engine.Outcome, error) {
	k, ok := osupgrade.ParseStep(s.State.Step)
	if !ok || k > len(s.p.Status.Nodes) {
		return engine.Failed("%s is no step of this policy", s.State.Step), nil
	}
	rec := &s.p.Status.Nodes[k-1]
	node := rec.Name
	rp := s.p.Spec.Repairs
	if len(rec.Parts) == 0 && !rp.KeepsImage() && osupgrade.Runs(s.kairos(node), s.p.Spec.Image) {
		rec.Phase, rec.Evidence = nwv1.NodeOSDone, fmt.Sprintf("already ran %s from the active slot at boot %s", rec.BootedImage, rec.BootID)
		return engine.Skipped("%s already runs %s from its active slot", node, osupgrade.Repository(s.p.Spec.Image)), nil
	}
	if len(rec.Parts) == 0 {
		// The step waited for its approval and the window since the Preflight: the boot a
		// repair is of must still be the node's (and a rollback's still unhealthy).
		if why, err := osupgrade.RepairRefused(ctx, r.Client, s.p, s.agents[node]); err != nil || why != "" {
			return engine.Failed("%s", why), err
		}
	}
	if len(rec.Parts) == 0 && rp.IsRollback() {
		red, _, err := r.health(ctx, s, node)
		if err != nil {
			return engine.Outcome{}, err
		}
		if red == "" {
			return engine.Failed("%s's health is green now, at boot %s: a rollback is of a boot whose health did not come back; not rolled back", node, s.bootID(node)), nil
		}
	}
	record := &nwv1.NodeFlip{Part: rec.Part, Parts: make([]nwv1.NodeFlipPart, len(rec.Parts))}
	for i, p := range rec.Parts {
		record.Parts[i] = nwv1.NodeFlipPart(p)
	}
	// A record begun by an operator that did not have a part yet (ProtectVMs) has a later part
	// and not that one: it did not run, and is not run now, on a node already under way.
	for i, part := range osupgrade.NodeParts {
		if bondflip.Part(record, part) == nil && slices.ContainsFunc(osupgrade.NodeParts[i+1:], func(later string) bool { return bondflip.Part(record, later) != nil }) {
			bondflip.End(record, part, nwv1.StepSkipped, "not run: the node's step began before the operator had this part", s.Now)
		}
	}
	out, err := bondflip.RunParts(record, osupgrade.NodeParts, s.Now, func(part string) (engine.Outcome, error) {
		s.part = part
		if p := bondflip.Part(record, part); p != nil && p.StartedAt != nil {
			s.partStarted = p.StartedAt.Time
		}
		return r.part(ctx, s, k, part)
	})
	rec.Part, rec.Parts = record.Part, make([]nwv1.OSUpgradePart, len(record.Parts))
	for i, p := range record.Parts {
		rec.Parts[i] = nwv1.OSUpgradePart(p)
	}
	switch out.Event {
	case workflow.StepFailed:
		if rec.Phase != nwv1.NodeOSFellBack {
			rec.Phase = nwv1.NodeOSFailed
		}
		if rec.Evidence == "" {
			rec.Evidence = out.Message
		}
	case workflow.StepSucceeded:
		rec.Phase = nwv1.NodeOSDone
	}
	return out, err
}

// part runs the action of node k's part.
func (r *Reconciler) part(ctx context.Context, s *scope, k int, part string) (engine.Outcome, error) {
	switch part {
	case osupgrade.Cordon:
		return r.cordon(ctx, s, k)
	case osupgrade.ProtectVMs:
		return r.vms(s).Protect(ctx, vmNode(s, k))
	case osupgrade.Drain:
		return r.drain(ctx, s, k)
	case osupgrade.Stage:
		return r.stage(ctx, s, k)
	case osupgrade.Reboot:
		return r.reboot(ctx, s, k)
	case osupgrade.Verify:
		return r.verify(s, k), nil
	case osupgrade.Soak:
		return r.soak(ctx, s, k)
	case osupgrade.Uncordon:
		return r.uncordon(ctx, s, k)
	case osupgrade.RestoreVMs:
		return r.vms(s).Restore(ctx, vmNode(s, k))
	}
	return engine.Failed("%s is no part of a policy's step", part), nil
}

func (r *Reconciler) event(s *scope, eventType, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(s.p, eventType, reason, msg)
	}
}

// cordon makes node k unschedulable for its upgrade, unless it is already.
func (r *Reconciler) cordon(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	rec := &s.p.Status.Nodes[k-1]
	rec.Phase = nwv1.NodeOSDraining
	res, err := nodecordon.Cordon(ctx, r.Client, r.APIReader, rec.Name, osupgrade.CordonedBy(s.p.Name), "policy")
	if err != nil {
		return engine.Outcome{}, err
	}
	return r.cordoned(s, rec, res, " for its upgrade"), nil
}

// uncordon makes node k schedulable again after its upgrade, only if it carries the policy's
// cordon.
func (r *Reconciler) uncordon(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	rec := &s.p.Status.Nodes[k-1]
	res, err := nodecordon.Uncordon(ctx, r.Client, r.APIReader, rec.Name, osupgrade.CordonedBy(s.p.Name), "policy", rec.Cordon)
	if err != nil {
		return engine.Outcome{}, err
	}
	return r.cordoned(s, rec, res, " after its upgrade"), nil
}

func (r *Reconciler) cordoned(s *scope, rec *nwv1.NodeOSUpgrade, res nodecordon.Result, why string) engine.Outcome {
	if res.Cordon != "" {
		rec.Cordon = res.Cordon
	}
	switch res.Reason {
	case "":
	case nodecordon.ReasonLeftCordoned:
		r.event(s, corev1.EventTypeNormal, res.Reason, res.Message)
	default:
		r.event(s, corev1.EventTypeNormal, res.Reason, res.Message+why)
	}
	if res.Skipped {
		return engine.Skipped("%s", res.Message)
	}
	return engine.Succeeded("%s", res.Message)
}

// stage asks node k's agent to write the image to its active slot, and records the boot it
// ran then: the reboot must change it.
func (r *Reconciler) stage(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	rec := &s.p.Status.Nodes[k-1]
	rp := s.p.Spec.Repairs
	spec := nwv1.NodeOperationSpec{Type: nwv1.OperationOSUpgradeStage, OSUpgradeStage: &nwv1.OSImageOperation{Image: s.p.Spec.Image}}
	staged := "staged " + s.p.Spec.Image
	switch {
	case rp.IsRestage():
		// A fallback's repair stages the image the node booted again: RecoveryRestage, which the
		// agent refuses unless the node fell back and the image is the one it booted. A rollback
		// stages the image of its last healthy boot as an upgrade does.
		spec = nwv1.NodeOperationSpec{Type: nwv1.OperationRecoveryRestage, RecoveryRestage: &nwv1.OSImageOperation{Image: s.p.Spec.Image}}
	case rp.IsAssessmentReset():
		// No image is staged: the flags that would make the reboot fall back are cleared, under
		// the agent's checkpoint.
		spec = nwv1.NodeOperationSpec{Type: nwv1.OperationBootAssessmentReset, BootAssessmentReset: &nwv1.BootAssessmentResetOperation{}}
		staged = "cleared its stale boot-assessment flags"
	case rp.IsBootSelection():
		spec = nwv1.NodeOperationSpec{Type: nwv1.OperationSelectBootEntry, SelectBootEntry: &nwv1.SelectBootEntryOperation{Entry: rp.Entry}}
		staged = fmt.Sprintf("selected its %s entry for its next boot, that one only", rp.Entry)
	}
	op, err := r.ensureOp(ctx, s, stageName(k), rec.Name, osupgrade.PartName(k, osupgrade.Stage), stageTimeout, spec)
	if err != nil {
		return engine.Outcome{}, err
	}
	switch end, ok := op.Ended(); {
	case end && ok:
		msg := rec.Name + " " + staged
		if res := op.Status.Result; res != nil && res.Boot != nil {
			rec.PreviousBootID, rec.PreviousImage = res.Boot.BootID, res.Boot.Image
			msg += fmt.Sprintf(" while running %s at boot %s", res.Boot.Image, res.Boot.BootID)
		}
		if res := op.Status.Result; res != nil && len(res.ClearedAssessment) > 0 {
			msg += "; cleared the stale boot-assessment flags " + strings.Join(res.ClearedAssessment, ", ")
		}
		if rec.PreviousBootID == "" {
			rec.PreviousBootID = s.bootID(rec.Name)
		}
		if rec.PreviousBootID == "" {
			return engine.Failed("%s: its agent reported no boot ID: its reboot could not be told from no reboot", s.describe(k)), nil
		}
		rec.Phase = nwv1.NodeOSStaged
		return engine.Succeeded("%s", msg), nil
	case end:
		return engine.Failed("%s: its agent's %s failed (%s)", s.describe(k), op.Spec.Type, op.Outcome()), nil
	}
	until := op.Spec.Deadline.Add(opGrace)
	if s.Now.After(until) {
		return engine.Failed("%s: its agent did not end its %s by %s (operation %s %s)", s.describe(k), op.Spec.Type,
			op.Spec.Deadline.UTC().Format(time.RFC3339), op.Name, op.PhaseText()), nil
	}
	return engine.Waiting(until.Sub(s.Now.Time)+time.Second, "waiting for %s's agent's %s (operation %s %s)", rec.Name, op.Spec.Type, op.Name, op.PhaseText()), nil
}

// reboot asks node k's agent to reboot it, and waits for its agent to report a boot other
// than the one the image was staged in, within spec.rebootTimeout.
func (r *Reconciler) reboot(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	rec := &s.p.Status.Nodes[k-1]
	limit := rebootTimeout(s.p)
	if rec.Phase != nwv1.NodeOSRebooting {
		rec.Phase = nwv1.NodeOSStaged
	}
	// A node that booted again since its stage (its own reboot, or this part's before a
	// restart) is not asked to reboot again.
	if now := s.bootID(rec.Name); now != "" && now != rec.PreviousBootID {
		rec.Phase = nwv1.NodeOSVerifying
		return engine.Succeeded("%s is back: boot %s, after %s", rec.Name, now, rec.PreviousBootID), nil
	}
	op, err := r.ensureOp(ctx, s, rebootName(k), rec.Name, osupgrade.PartName(k, osupgrade.Reboot), limit+opGrace,
		nwv1.NodeOperationSpec{Type: nwv1.OperationReboot, Reboot: &nwv1.RebootOperation{Reason: "OSVersionPolicy " + s.p.Name + ": boot " + osupgrade.Repository(s.p.Spec.Image)}})
	if err != nil {
		return engine.Outcome{}, err
	}
	if op.Status.Phase != "" && op.Status.Phase != nwv1.OperationPending {
		rec.Phase = nwv1.NodeOSRebooting
	}
	if end, ok := op.Ended(); end && !ok {
		return engine.Failed("%s: its agent did not reboot it (%s)", s.describe(k), op.Outcome()), nil
	}
	if passed, left := s.Deadline(limit); passed {
		msg := fmt.Sprintf("%s did not come back within %s of its reboot: its agent last reported boot %s", s.describe(k), limit, s.bootID(rec.Name))
		if silent := s.silent(rec.Name); silent != "" {
			msg += "; " + silent
		}
		rec.Evidence = msg
		r.event(s, corev1.EventTypeWarning, ReasonDidNotComeBack, msg)
		return engine.Failed("%s", msg), nil
	} else {
		return engine.Waiting(left+time.Second, "waiting for %s to boot again (operation %s %s; its last boot %s)", rec.Name, op.Name, op.PhaseText(), rec.PreviousBootID), nil
	}
}

// verify proves from node k's agent's report after its boot that it runs the image: the boot
// ID changed, the boot entry is the active slot, with no upgrade_failure, /etc/kairos-release
// names the image, and the boot assessment is cleared (Kairos clears it early in a good boot).
// A node that booted its passive slot, or with upgrade_failure, fell back: the step fails with
// the node FellBack.
func (r *Reconciler) verify(s *scope, k int) engine.Outcome {
	rec := &s.p.Status.Nodes[k-1]
	rec.Phase = nwv1.NodeOSVerifying
	node, want := rec.Name, osupgrade.Repository(s.p.Spec.Image)
	boot := s.bootID(node)
	kairos := s.kairos(node)
	if boot == "" || boot == rec.PreviousBootID || kairos == nil {
		limit := rebootTimeout(s.p)
		passed, left := s.Deadline(limit)
		if passed {
			rec.Evidence = fmt.Sprintf("its agent reports boot %q, Kairos %t", boot, kairos != nil)
			return engine.Failed("%s: its agent did not report its new boot, with its Kairos image, within %s (%s)", s.describe(k), limit, rec.Evidence)
		}
		return engine.Waiting(left+time.Second, "waiting for %s's agent to report its new boot", node)
	}
	evidence := fmt.Sprintf("boot %s → %s; /etc/kairos-release KAIROS_IMAGE_REPO=%q, KAIROS_VERSION=%q; entry %s; upgrade_failure %t",
		rec.PreviousBootID, boot, kairos.Image, kairos.Version, osupgrade.EntryOf(kairos), kairos.UpgradeFailure)
	entry := s.p.Spec.Repairs.BootEntry()
	if kairos.UpgradeFailure || (kairos.BootEntry == nwv1.KairosBootPassive && entry != nwv1.KairosBootPassive) {
		rec.Phase, rec.Evidence = nwv1.NodeOSFellBack, evidence
		msg := fmt.Sprintf("%s fell back from %s to %s at boot %s (%s): the policy stops here; the image is not tried on %s again until a person acknowledges it (annotation %s)",
			s.describe(k), s.p.Spec.Image, kairos.Image, boot, evidence, node, nwv1.AnnotationAcknowledgeFallback)
		r.event(s, corev1.EventTypeWarning, ReasonFellBack, msg)
		return engine.Failed("%s", msg)
	}
	switch {
	case kairos.BootEntry != entry:
		rec.Evidence = evidence
		return engine.Failed("%s booted its %s entry, not its %s entry: %s", s.describe(k), osupgrade.EntryOf(kairos), entry, evidence)
	case kairos.Image != want:
		rec.Evidence = evidence
		return engine.Failed("%s booted %s from its %s entry, not %s: %s", s.describe(k), kairos.Image, entry, want, evidence)
	}
	if a := kairos.BootAssessment; a != nil && (a.Enabled || a.Tentative) {
		limit := rebootTimeout(s.p)
		passed, left := s.Deadline(limit)
		if passed {
			rec.Evidence = evidence
			return engine.Failed("%s booted %s, but its boot assessment is still pending after %s (enable_boot_assessment %t, boot_assessment_tentative %t): its next boot would fall back",
				s.describe(k), want, limit, a.Enabled, a.Tentative)
		}
		return engine.Waiting(left+time.Second, "%s booted %s; waiting for its boot assessment to count the boot good (enable_boot_assessment %t, boot_assessment_tentative %t)",
			node, want, a.Enabled, a.Tentative)
	}
	rec.Evidence = evidence + "; boot assessment cleared"
	if s.p.Spec.Repairs.IsBootSelection() {
		rec.Evidence += "; for this boot only: its next boot boots its default entry again"
	}
	rec.VerifiedAt = ptr.To(s.Now)
	rec.Phase = nwv1.NodeOSSoaking
	r.event(s, corev1.EventTypeNormal, ReasonBootedImage, fmt.Sprintf("%s booted %s: %s", node, want, rec.Evidence))
	return engine.Succeeded("%s booted %s: %s", node, want, rec.Evidence)
}

// recovery writes the image to each node's recovery system, once every node booted it and
// soaked (spec.upgradeRecovery AfterSoak), every node's at once: the recovery systems are not
// booted.
func (r *Reconciler) recovery(ctx context.Context, s *scope) (engine.Outcome, error) {
	var waiting, done []string
	for k := 1; k <= len(s.p.Status.Nodes); k++ {
		node := s.node(k)
		op, err := r.ensureOp(ctx, s, recoveryName(k), node, string(osupgrade.Recovery), stageTimeout,
			nwv1.NodeOperationSpec{Type: nwv1.OperationOSUpgradeRecovery, OSUpgradeRecovery: &nwv1.OSImageOperation{Image: s.p.Spec.Image}})
		if err != nil {
			return engine.Outcome{}, err
		}
		switch end, ok := op.Ended(); {
		case end && ok:
			done = append(done, node)
		case end:
			return engine.Failed("%s: its agent could not write %s to its recovery system (%s)", s.describe(k), s.p.Spec.Image, op.Outcome()), nil
		case s.Now.After(op.Spec.Deadline.Add(opGrace)):
			return engine.Failed("%s: its agent did not write its recovery system by %s (operation %s %s)", s.describe(k),
				op.Spec.Deadline.UTC().Format(time.RFC3339), op.Name, op.PhaseText()), nil
		default:
			waiting = append(waiting, node)
		}
	}
	if len(waiting) > 0 {
		return engine.Waiting(0, "waiting for %s to write %s to their recovery systems", strings.Join(waiting, ", "), s.p.Spec.Image), nil
	}
	return engine.Succeeded("the recovery systems of %s run %s", strings.Join(done, ", "), s.p.Spec.Image), nil
}

// AnnotationStopped is on a VM a policy stopped (vmProtection Stop): the policy's UID, the
// node's position and the VM's run strategy before, "<uid>/<position>/<strategy>"; the VM's
// restore sets the strategy back and ends it "/restored" until its VMI runs again.
const AnnotationStopped = "nodewright.spectrocloud.com/stopped-by-osversionpolicy"

// vms is the policy's VM protection (internal/vmprotect, shared with the flip).
func (r *Reconciler) vms(s *scope) *vmprotect.Workflow {
	return &vmprotect.Workflow{Client: r.Client, Reader: r.APIReader, Mode: s.p.Spec.VMProtection,
		Owner: osupgrade.Descriptor.Owner(s.p), Kind: osupgrade.Kind.Name, Stopped: AnnotationStopped, Poll: poll,
		None: "vmProtection None: the VMs on %s are left to the drain, which evicts their launcher pods (their evictionStrategy decides), and to its reboot"}
}

// vmNode is node k's VM step in the part under way.
func vmNode(s *scope, k int) vmprotect.Node {
	return vmprotect.Node{Name: s.node(k), Position: k, Describe: s.describe(k),
		Labels:   map[string]string{osupgrade.LabelStep: osupgrade.PartName(k, s.part)},
		Cordoned: s.p.Status.Nodes[k-1].Cordon == nwv1.NodeWasCordoned, Deadline: s.Deadline}
}
