package vmvolumemigration

import (
	"context"
	"encoding/json"
	"fmt"

	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/vmrun"
)

// vmRecord is the record a migration keeps on its VM (migration.VMRecord).
type vmRecord = migration.VMRecord

// patchVM applies change to a copy of vm and patches the difference, failing on a conflict
// with a concurrent writer rather than overwriting it.
func patchVM(ctx context.Context, c client.Client, vm *virtv1.VirtualMachine, change func(*virtv1.VirtualMachine)) error {
	base := vm.DeepCopy()
	change(vm)
	return c.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// lockVM writes rec on the VM; the optimistic lock makes two migrations racing for one VM
// meet a conflict.
func lockVM(ctx context.Context, c client.Client, vm *virtv1.VirtualMachine, rec vmRecord) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return patchVM(ctx, c, vm, func(vm *virtv1.VirtualMachine) {
		if vm.Annotations == nil {
			vm.Annotations = map[string]string{}
		}
		vm.Annotations[AnnotationMigration] = string(raw)
	})
}

// unlockVM removes m's record from the VM.
func unlockVM(ctx context.Context, c client.Client, vm *virtv1.VirtualMachine, m *nwv1.VMVolumeMigration) error {
	// A record that does not parse is no one's, and not this migration's to remove.
	if rec, err := migration.RecordOf(vm); err != nil || !rec.HeldBy(m) {
		return nil
	}
	return patchVM(ctx, c, vm, func(vm *virtv1.VirtualMachine) { delete(vm.Annotations, AnnotationMigration) })
}

// wantsRunning reports whether the VM's spec asks for it to run.
func wantsRunning(vm *virtv1.VirtualMachine) bool {
	if vm.Spec.RunStrategy != nil {
		switch *vm.Spec.RunStrategy {
		case virtv1.RunStrategyAlways, virtv1.RunStrategyRerunOnFailure, virtv1.RunStrategyOnce:
			return true
		}
		return false
	}
	return vm.Spec.Running != nil && *vm.Spec.Running
}

// stopVM asks KubeVirt to stop the VM, in the field the VM's owner uses.
func stopVM(ctx context.Context, c client.Client, vm *virtv1.VirtualMachine) error {
	if !wantsRunning(vm) {
		return nil
	}
	return patchVM(ctx, c, vm, func(vm *virtv1.VirtualMachine) { vmrun.Stop(vm) })
}

// restoreRunStrategy gives the VM back the run strategy the record has, in the field the VM's
// owner uses (stopVM kept it).
func restoreRunStrategy(ctx context.Context, c client.Client, vm *virtv1.VirtualMachine, rec *vmRecord) error {
	was := &virtv1.VirtualMachine{Spec: virtv1.VirtualMachineSpec{RunStrategy: rec.RunStrategy, Running: rec.Running}}
	strategy, err := was.RunStrategy()
	if err != nil {
		return fmt.Errorf("the migration's record on VirtualMachine %s: %w", vm.Name, err)
	}
	if !vmrun.GiveBack(vm.DeepCopy(), strategy) {
		return nil
	}
	return patchVM(ctx, c, vm, func(vm *virtv1.VirtualMachine) { vmrun.GiveBack(vm, strategy) })
}

// pointVolume sets the named volume's source.
func pointVolume(ctx context.Context, c client.Client, vm *virtv1.VirtualMachine, name string, src virtv1.VolumeSource) error {
	if v := migration.VolumeOf(vm, name); v == nil {
		return fmt.Errorf("VirtualMachine %s no longer has a volume %q", vm.Name, name)
	} else if migration.ClaimOf(v.VolumeSource) == migration.ClaimOf(src) && (v.PersistentVolumeClaim != nil) == (src.PersistentVolumeClaim != nil) {
		return nil
	}
	return patchVM(ctx, c, vm, func(vm *virtv1.VirtualMachine) { migration.VolumeOf(vm, name).VolumeSource = src })
}

// targetSource is the volume's original source pointed at the target PVC: a PVC source keeps
// its options (hotplug); a DataVolume's becomes a PVC source, as the target is a plain PVC.
func targetSource(orig virtv1.VolumeSource, claim string) virtv1.VolumeSource {
	src := virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corePVCSource(claim)}
	switch {
	case orig.PersistentVolumeClaim != nil:
		src.Hotpluggable = orig.PersistentVolumeClaim.Hotpluggable
		src.ReadOnly = orig.PersistentVolumeClaim.ReadOnly
	case orig.DataVolume != nil:
		src.Hotpluggable = orig.DataVolume.Hotpluggable
	}
	return virtv1.VolumeSource{PersistentVolumeClaim: &src}
}

// vmiRunsOn reports whether the VMI runs with the named volume on claim.
func vmiRunsOn(vmi *virtv1.VirtualMachineInstance, volume, claim string) bool {
	if vmi == nil || vmi.DeletionTimestamp != nil || vmi.Status.Phase != virtv1.Running {
		return false
	}
	for _, v := range vmi.Spec.Volumes {
		if v.Name == volume {
			return migration.ClaimOf(v.VolumeSource) == claim
		}
	}
	return false
}

// agentConnected reports whether the VMI's guest agent is connected, so the guest can be
// frozen.
func agentConnected(vmi *virtv1.VirtualMachineInstance) bool {
	if vmi == nil {
		return false
	}
	for _, c := range vmi.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceAgentConnected && c.Status == "True" {
			return true
		}
	}
	return false
}

// keepFailedRecord moves a Failed migration's record to AnnotationFailedMigration when the
// migration is deleted: it says what the VM was like before, and until a person removes it no
// new migration starts on a VM a rollback could not restore.
func keepFailedRecord(ctx context.Context, c client.Client, vm *virtv1.VirtualMachine, m *nwv1.VMVolumeMigration) error {
	if rec, err := migration.RecordOf(vm); err != nil || !rec.HeldBy(m) {
		return nil
	}
	return patchVM(ctx, c, vm, func(vm *virtv1.VirtualMachine) {
		vm.Annotations[AnnotationFailedMigration] = vm.Annotations[AnnotationMigration]
		delete(vm.Annotations, AnnotationMigration)
	})
}
