package agent

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/hostos"
)

// The boot-recovery operations of a Kairos node (BootRecoveryPolicy's repairs):
//
//   - BootAssessmentReset clears the stale boot-assessment flags that make the next boot fall
//     back at once (kairos#4303): boot_assessment_tentative and enable_boot_assessment, never
//     enable_boot_assessment_always, which a person sets to assess every boot. Under a
//     checkpoint: the agent records the variables it is about to clear, as they are, in its
//     StateDir; edits the block with grub2-editenv (COS_STATE remounted read-write, as the
//     stage does); reads the block back; and when the edit failed or did not hold writes the
//     recorded values back, RolledBack. Run again after the agent died, it finishes from its
//     record: a block already cleared is not edited again.
//   - SelectBootEntry makes the next boot, that one only, boot an entry: it sets next_entry in
//     the OEM partition's grubenv (/oem/grubenv) to the entry's GRUB id, as kairos-agent's
//     `bootentry --select` does on a GRUB node (selectBootEntryGrub, kairos-io/kairos-agent
//     pkg/action/bootentries.go, commit 96f93a04a554e30ad034ec9ee8bbf7b9ac242c5d; the ids are
//     the menuentry --id of Kairos's grub.cfg: cos, fallback, recovery, kairos-io/packages
//     packages/static/grub-config/files/grub.cfg, commit
//     d11c1d3b60a808fa8de963751044a77f9754c144). That grub.cfg, seeing next_entry, boots it,
//     sets selected_entry (so the boot assessment, grub_boot_assessment, is skipped for that
//     boot) and saves next_entry empty (save_env): the boot after boots the default again.
//     kairos-agent writes the file with its own code, not with a tool the agent could ask;
//     the agent runs grub2-editenv, which writes the same block. On a UKI node kairos-agent
//     writes the EFI variable LoaderEntryOneShot instead, which this agent does not:
//     Unsupported.
//   - RecoveryRestage stages again the image the node runs after a fallback, the last good
//     one: only on a node that fell back (booted from Passive with upgrade_failure, or this
//     boot is the lastFallback the agent recorded) and only the image it booted
//     (KAIROS_IMAGE_REPO, REPOSITORY:TAG). Then it is OSUpgradeStage's stage (Kairos.stage).
//     kairos-agent's upgrade, run from the passive slot, leaves the passive slot as it is
//     (UpgradeAction.Run: "Booted from passive: Upgrade active, leave passive as is",
//     pkg/action/upgrade.go, same commit): the image is written to the active slot over the
//     one that failed, the passive slot keeps the same good image, and since kairos-agent
//     v2.31.0 the upgrade sets next_entry=cos so that the next boot is the active one.

// The reasons of the boot-recovery operations' failures.
const (
	// ReasonRebootedSinceBegun: a BootAssessmentReset resumed on a node that booted since it
	// began: the flags it recorded are another boot's; nothing is edited.
	ReasonRebootedSinceBegun = "RebootedSinceBegun"
	// ReasonEntryNotSelected: next_entry does not read back as the entry after the edit.
	ReasonEntryNotSelected = "EntryNotSelected"
	// ReasonNoFallback: a RecoveryRestage on a node that did not fall back.
	ReasonNoFallback = "NoFallback"
	// ReasonNotLastGoodImage: a RecoveryRestage of an image other than the one the node
	// booted after its fallback.
	ReasonNotLastGoodImage = "NotLastGoodImage"
)

// assessmentResetFlags are the flags a BootAssessmentReset clears, in the order it clears
// them.
var assessmentResetFlags = []string{hostos.GRUBBootAssessmentTentative, hostos.GRUBEnableBootAssessment}

const assessmentResetRecordFile = "kairos-assessment-reset.json"

// assessmentResetRecord is a BootAssessmentReset's checkpoint: the variables it clears, as
// they were, and the boot it began in.
type assessmentResetRecord struct {
	Operation types.UID             `json:"operation"`
	BootID    string                `json:"bootID"`
	Boot      *nwv1.BootObservation `json:"boot,omitempty"`
	Previous  []recordedVar         `json:"previous"`
	// Done: the operation ended: Succeeded, unless RolledBack says how it was rolled back.
	Done bool `json:"done,omitempty"`
	// RolledBack is the reason and message of a rollback: a run again ends the same, RolledBack.
	RolledBack *recordedError `json:"rolledBack,omitempty"`
}

// recordedError is an OperationError as a record keeps it.
type recordedError struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type recordedVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// kairosAssessmentReset is BootAssessmentReset.
type kairosAssessmentReset struct{ k *Kairos }

func (kairosAssessmentReset) Resumable() bool { return true }

func (e kairosAssessmentReset) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	k := e.k
	if op.Spec.BootAssessmentReset == nil {
		return nil, errMissing(op)
	}
	var rec assessmentResetRecord
	found, err := k.load(assessmentResetRecordFile, &rec)
	if err != nil {
		return nil, &OperationError{Reason: ReasonRecordFailed, Message: fmt.Sprintf("reading the checkpoint: %v", err)}
	}
	if found && rec.Operation == op.UID {
		return e.finish(ctx, &rec, true)
	}
	boot, err := k.readBoot()
	if err != nil {
		return nil, err
	}
	rec = assessmentResetRecord{Operation: op.UID, BootID: boot.BootID, Boot: bootObservation(boot)}
	for _, name := range assessmentResetFlags {
		if v, _ := boot.Assessment.Get(name); v != "" {
			rec.Previous = append(rec.Previous, recordedVar{Name: name, Value: v})
		}
	}
	if len(rec.Previous) == 0 {
		return &nwv1.NodeOperationResult{Boot: rec.Boot}, nil
	}
	if err := k.save(assessmentResetRecordFile, rec); err != nil {
		return &nwv1.NodeOperationResult{Boot: rec.Boot}, &OperationError{Reason: ReasonRecordFailed, Message: fmt.Sprintf("writing the checkpoint: %v", err)}
	}
	return e.finish(ctx, &rec, false)
}

// finish clears the recorded flags (unless resumed and already cleared), reads the block back,
// and rolls back to the recorded values when the edit failed or did not hold.
func (e kairosAssessmentReset) finish(ctx context.Context, rec *assessmentResetRecord, resumed bool) (*nwv1.NodeOperationResult, error) {
	k := e.k
	log := klog.FromContext(ctx)
	result := &nwv1.NodeOperationResult{Boot: rec.Boot}
	for _, v := range rec.Previous {
		if len(result.ClearedAssessment) == 8 {
			break
		}
		result.ClearedAssessment = append(result.ClearedAssessment, clip(v.Name+"="+v.Value, 128))
	}
	if rec.Done {
		if rb := rec.RolledBack; rb != nil {
			return result, &OperationError{Reason: rb.Reason, RolledBack: true, Message: rb.Message}
		}
		return result, nil
	}
	boot, err := k.readBoot()
	if err != nil {
		return result, err
	}
	if resumed && boot.BootID != rec.BootID {
		return result, &OperationError{Reason: ReasonRebootedSinceBegun, Message: fmt.Sprintf(
			"the node booted again (boot %s) since this operation began at boot %s: the flags it recorded are that boot's; they may have been edited before it", boot.BootID, rec.BootID)}
	}
	if !resumed || stillSet(boot, rec.Previous) != "" {
		args := []string{"set"}
		for _, v := range rec.Previous {
			args = append(args, v.Name+"=")
		}
		if err := k.editAssessment(ctx, args...); err != nil {
			return result, e.rollBack(ctx, rec, err.Error(), ReasonCommandFailed)
		}
		if boot, err = k.readBoot(); err != nil {
			return result, e.rollBack(ctx, rec, err.Error(), ReasonAssessmentNotCleared)
		}
	} else {
		log.Info("BootAssessmentReset resumed: the flags are cleared already, not edited again", "operation", rec.Operation)
	}
	if why := stillSet(boot, rec.Previous); why != "" {
		return result, e.rollBack(ctx, rec, why+" after grub2-editenv cleared it", ReasonAssessmentNotCleared)
	}
	rec.Done = true
	if err := k.save(assessmentResetRecordFile, rec); err != nil {
		// The edit held: run again, the operation finds the block cleared and ends the same.
		log.Error(err, "Writing the checkpoint's end")
	}
	return result, nil
}

// stillSet names the recorded flags the block still sets; empty when none.
func stillSet(boot hostos.KairosBoot, vars []recordedVar) string {
	var set []string
	for _, v := range vars {
		if now, _ := boot.Assessment.Get(v.Name); now != "" {
			set = append(set, v.Name+"="+now)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return fmt.Sprintf("%s still set in %s", strings.Join(set, ", "), hostos.KairosAssessmentFile)
}

// rollBack writes the recorded values back, and fails the operation RolledBack with reason
// and why; a rollback that fails is RestoreFailed, Failed.
func (e kairosAssessmentReset) rollBack(ctx context.Context, rec *assessmentResetRecord, why, reason string) error {
	args := []string{"set"}
	for _, v := range rec.Previous {
		args = append(args, v.Name+"="+v.Value)
	}
	if err := e.k.editAssessment(context.WithoutCancel(ctx), args...); err != nil {
		return &OperationError{Reason: ReasonRestoreFailed, Message: fmt.Sprintf("%s; writing the previous values back failed too: %v", why, err)}
	}
	failure := &OperationError{Reason: reason, RolledBack: true, Message: why + "; the previous values are written back: " + strings.Join(recordedText(rec.Previous), " ")}
	// Ended: a run again (the agent died before it reported this) reports the same rollback; it
	// neither edits again nor says Succeeded.
	rec.Done, rec.RolledBack = true, &recordedError{Reason: failure.Reason, Message: failure.Message}
	_ = e.k.save(assessmentResetRecordFile, rec)
	return failure
}

func recordedText(vars []recordedVar) []string {
	var out []string
	for _, v := range vars {
		out = append(out, v.Name+"="+v.Value)
	}
	return out
}

// grubEntryIDs are the GRUB menu entries' ids of Kairos's grub.cfg (menuentry --id).
var grubEntryIDs = map[nwv1.KairosBootEntry]string{
	nwv1.KairosBootActive:   "cos",
	nwv1.KairosBootPassive:  "fallback",
	nwv1.KairosBootRecovery: "recovery",
}

// grubNextEntry is the variable of the OEM grubenv that Kairos's grub.cfg boots once.
const grubNextEntry = "next_entry"

// kairosSelectEntry is SelectBootEntry.
type kairosSelectEntry struct{ k *Kairos }

func (kairosSelectEntry) Resumable() bool { return true }

func (e kairosSelectEntry) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	k := e.k
	spec := op.Spec.SelectBootEntry
	if spec == nil {
		return nil, errMissing(op)
	}
	id, ok := grubEntryIDs[spec.Entry]
	if !ok {
		return nil, &OperationError{Reason: ReasonInvalidOperation, Message: fmt.Sprintf("spec.selectBootEntry.entry: %q is not Active, Passive or Recovery", clip(string(spec.Entry), 64))}
	}
	boot, err := k.readBoot()
	if err != nil {
		return nil, err
	}
	result := &nwv1.NodeOperationResult{Boot: bootObservation(boot)}
	if uki, err := k.Host.KairosUKI(); err != nil {
		return result, &OperationError{Reason: ReasonHostUnreadable, Message: err.Error()}
	} else if uki {
		return result, &OperationError{Reason: ReasonUnsupported, Message: "the node boots a UKI with systemd-boot, whose one-boot entry is the EFI variable LoaderEntryOneShot: this agent selects an entry on GRUB nodes only"}
	}
	file := k.oemEnvFile()
	if _, err := k.Runner.Run(ctx, append(append([]string{}, k.GRUBEditenv...), file, "set", grubNextEntry+"="+id)); err != nil {
		return result, commandFailed(err)
	}
	out, err := k.Runner.Run(ctx, append(append([]string{}, k.GRUBEditenv...), file, "list"))
	if err != nil {
		return result, commandFailed(err)
	}
	if got := listedValue(string(out.Stdout), grubNextEntry); got != id {
		return result, &OperationError{Reason: ReasonEntryNotSelected, Message: fmt.Sprintf("%s lists %s=%q after grub2-editenv set it to %s", file, grubNextEntry, clip(got, 64), id)}
	}
	result.NextBootOnly = spec.Entry
	return result, nil
}

// listedValue is the value of name in grub-editenv's list output (NAME=VALUE lines; the last
// one wins, as load_env sets each in turn).
func listedValue(out, name string) string {
	value := ""
	for line := range strings.SplitSeq(out, "\n") {
		if n, v, ok := strings.Cut(line, "="); ok && n == name {
			value = v
		}
	}
	return value
}

// oemEnvFile is the OEM partition's grubenv as GRUBEditenv names it.
func (k *Kairos) oemEnvFile() string {
	if k.OEMEnvFile != "" {
		return k.OEMEnvFile
	}
	return strings.TrimSuffix(k.Host.Root, "/") + hostos.KairosOEMEnvFile
}

// kairosRestage is RecoveryRestage.
type kairosRestage struct{ k *Kairos }

func (kairosRestage) Resumable() bool { return true }

func (e kairosRestage) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	k := e.k
	img, err := image(op, op.Spec.RecoveryRestage)
	if err != nil {
		return nil, err
	}
	if err := k.allowed(ctx, "spec.recoveryRestage.image", img); err != nil {
		return nil, err
	}
	boot, err := k.readBoot()
	if err != nil {
		return nil, err
	}
	obs := &nwv1.NodeOperationResult{Boot: bootObservation(boot)}
	fellBack := boot.Entry == nwv1.KairosBootPassive && boot.UpgradeFailure
	if !fellBack {
		var last nwv1.KairosFallback
		k.mu.Lock()
		found, err := k.load(fallbackRecordFile, &last)
		k.mu.Unlock()
		if err != nil {
			return obs, &OperationError{Reason: ReasonRecordFailed, Message: fmt.Sprintf("reading the last fallback: %v", err)}
		}
		fellBack = found && last.BootID == boot.BootID
	}
	if !fellBack {
		return obs, &OperationError{Reason: ReasonNoFallback, Message: fmt.Sprintf(
			"the node did not fall back: boot %s is from the %s entry, upgrade_failure %t, and the last fallback recorded is not this boot; a RecoveryRestage stages again only the image a node booted after a fallback",
			boot.BootID, entryText(boot.Entry), boot.UpgradeFailure)}
	}
	repoTag, _, _ := strings.Cut(img, "@")
	if boot.Image == "" || repoTag != boot.Image {
		return obs, &OperationError{Reason: ReasonNotLastGoodImage, Message: fmt.Sprintf(
			"spec.recoveryRestage.image: %s is not the image the node booted after its fallback, %q (KAIROS_IMAGE_REPO): only what runs and works now is staged again", repoTag, clip(boot.Image, 512))}
	}
	return k.stage(ctx, op, img, boot)
}

func entryText(e nwv1.KairosBootEntry) string {
	if e == "" {
		return "unknown"
	}
	return string(e)
}
