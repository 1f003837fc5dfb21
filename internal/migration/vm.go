package migration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// AnnotationMigration on a VirtualMachine marks it as being migrated (a lock: one migration
// per VM at a time) and keeps what a rollback restores: the VM's run strategy and the volume's
// original source. See VMRecord.
const AnnotationMigration = "nodewright.spectrocloud.com/migration"

// AnnotationFailedMigration on a VirtualMachine is the record of a migration that failed and
// could not be rolled back, kept when that migration was deleted. Migrations of the VM are
// refused until a person has restored the VM and removed it.
const AnnotationFailedMigration = "nodewright.spectrocloud.com/failed-migration"

// Suffixes of the names of a migration's children (ChildName).
const (
	SuffixBefore = "before"
	SuffixAfter  = "after"
	SuffixTarget = "target"
	SuffixView   = "before-view"
	SuffixCopy   = "copy"
	SuffixVerify = "verify"
)

// ChildName is the deterministic name of m's child with the given suffix.
func ChildName(m *nwv1.VMVolumeMigration, suffix string) string { return children.Name(m.Name, suffix) }

// VMRecord is what a migration keeps on its VM (annotation AnnotationMigration): whose
// migration holds the VM, and what a rollback puts back. It is written once, in Validate,
// before anything changes.
type VMRecord struct {
	Migration string    `json:"migration"`
	UID       types.UID `json:"uid"`
	// WasRunning: the VM ran when the migration began; only then is it started again.
	WasRunning bool `json:"wasRunning"`
	// RunStrategy and Running are the VM's spec.runStrategy and spec.running as they were.
	RunStrategy *virtv1.VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
	Running     *bool                             `json:"running,omitempty"`
	// Volume is the volume's source as it was.
	Volume virtv1.VolumeSource `json:"volume"`
}

// RecordOf reads the record on vm; nil when there is none.
func RecordOf(vm *virtv1.VirtualMachine) (*VMRecord, error) {
	raw, ok := vm.Annotations[AnnotationMigration]
	if !ok {
		return nil, nil
	}
	var rec VMRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("annotation %s on VirtualMachine %s is not valid: %w", AnnotationMigration, vm.Name, err)
	}
	return &rec, nil
}

// HeldBy reports whether rec is m's.
func (rec *VMRecord) HeldBy(m *nwv1.VMVolumeMigration) bool { return rec != nil && rec.UID == m.UID }

// VolumeOf finds the named volume in the VM's template.
func VolumeOf(vm *virtv1.VirtualMachine, name string) *virtv1.Volume {
	if vm.Spec.Template == nil {
		return nil
	}
	for i := range vm.Spec.Template.Spec.Volumes {
		if vm.Spec.Template.Spec.Volumes[i].Name == name {
			return &vm.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

// ClaimOf is the PVC behind a volume source: a persistentVolumeClaim's claim, or the PVC a
// DataVolume of the same name owns.
func ClaimOf(src virtv1.VolumeSource) string {
	switch {
	case src.PersistentVolumeClaim != nil:
		return src.PersistentVolumeClaim.ClaimName
	case src.DataVolume != nil:
		return src.DataVolume.Name
	}
	return ""
}

// PVCBound reports whether the PVC is bound to a volume.
func PVCBound(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName != ""
}

// PVCSize is the PVC's capacity, or its request before it is bound.
func PVCSize(pvc *corev1.PersistentVolumeClaim) resource.Quantity {
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		return q
	}
	return pvc.Spec.Resources.Requests[corev1.ResourceStorage]
}

// Validated reports whether the migration's Validate step succeeded.
func Validated(m *nwv1.VMVolumeMigration) bool {
	return slices.ContainsFunc(m.Status.Steps, func(s nwv1.WorkflowStep) bool {
		return s.Name == string(Validate) && s.State == nwv1.StepSucceeded
	})
}

// vmDeleted is what the steps that found the migration's VM gone say of it.
const vmDeleted = "was deleted during the migration"

// VMDeleted is the message of a step that found the migration's VM deleted: a forward step
// fails with it, and a rollback step that would act on the VM is skipped with it.
func VMDeleted(vm string, step Step, rollingBack bool) string {
	if rollingBack {
		return fmt.Sprintf("VirtualMachine %s %s: there is no VM to restore", vm, vmDeleted)
	}
	return fmt.Sprintf("VirtualMachine %s %s, in step %s; the migration stops and deletes what it made", vm, vmDeleted, step)
}

// rolledBackWithoutTheVM says what holds after a rollback that found the VM deleted: the
// migration's Kind says the VM is as it was before, which it is not.
func rolledBackWithoutTheVM(st *nwv1.WorkflowStatus) string {
	for _, s := range st.Steps {
		if strings.Contains(s.Message, vmDeleted) {
			return "rolled back without the VM, which " + vmDeleted + ": what the migration made is deleted and there is no VM to restore"
		}
	}
	return ""
}
