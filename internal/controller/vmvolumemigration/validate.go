package vmvolumemigration

import (
	"context"
	"fmt"
	"slices"
	"strings"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/storage"
)

type storageClass struct{ storagev1.StorageClass }

// defaultSnapshotClassAnnotation marks a driver's default VolumeSnapshotClass.
const defaultSnapshotClassAnnotation = "snapshot.storage.kubernetes.io/is-default-class"

// validate checks everything the migration needs before it changes anything, then takes the
// VM: the VM and its volume exist, the source is a bound block PVC, the target class's backend
// can do what the spec asks (ReadWriteMany block; a clone for Hot; snapshots on both sides),
// the target is big enough, and no other migration holds the VM. A refusal names the field.
func (r *Reconciler) validate(ctx context.Context, s *scope) (outcome, error) {
	m, vm := s.m, s.vm
	if vm == nil {
		return failed("spec.vmName: VirtualMachine %q not found in namespace %s", m.Spec.VMName, m.Namespace), nil
	}
	if out, err := r.checkNotHeld(ctx, s); err != nil || out.event != "" {
		return out, err
	}
	vol := volumeOf(vm, m.Spec.VolumeName)
	if vol == nil {
		return failed("spec.volumeName: VirtualMachine %s has no volume %q (it has %s)", vm.Name, m.Spec.VolumeName, volumeNames(vm)), nil
	}
	claim := claimOf(vol.VolumeSource)
	if claim == "" {
		return failed("spec.volumeName: volume %q is not backed by a PVC or a DataVolume", vol.Name), nil
	}
	if vol.DataVolume != nil && !s.plan.RetainSource {
		return failed("spec.retainSource: the source PVC %s belongs to DataVolume %s; it can only be retained", claim, vol.DataVolume.Name), nil
	}
	if vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == virtv1.RunStrategyManual {
		return failed("spec.vmName: VirtualMachine %s has runStrategy Manual; Nodewright stops and starts VMs through their run strategy", vm.Name), nil
	}
	if m.Spec.Target.VolumeMode == corev1.PersistentVolumeFilesystem {
		return failed("spec.target.volumeMode: Filesystem is not supported; the copy is block for block, use Block"), nil
	}

	src := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: claim}, src); err != nil {
		if apierrors.IsNotFound(err) {
			return failed("spec.volumeName: volume %q names PVC %s, which does not exist", vol.Name, claim), nil
		}
		return outcome{}, err
	}
	if !pvcBound(src) {
		return failed("spec.volumeName: the source PVC %s is not bound", claim), nil
	}
	if ptr.Deref(src.Spec.VolumeMode, corev1.PersistentVolumeFilesystem) != corev1.PersistentVolumeBlock {
		return failed("spec.volumeName: the source PVC %s has volumeMode Filesystem; only Block volumes are copied", claim), nil
	}
	target := childName(m, suffixTarget)
	if claim == target {
		return failed("spec.volumeName: the volume already uses PVC %s, this migration's target name", claim), nil
	}
	existing := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: target}, existing); err == nil {
		if existing.Labels[LabelMigrationUID] != string(m.UID) {
			return failed("metadata.name: the target's name, PVC %s, is taken by a PVC this migration did not create", target), nil
		}
	} else if !apierrors.IsNotFound(err) {
		return outcome{}, err
	}

	srcClass, problem, err := r.class(ctx, ptr.Deref(src.Spec.StorageClassName, ""), "the source PVC's storageClassName")
	if err != nil || problem != "" {
		return failed("%s", problem), err
	}
	dstClass, problem, err := r.class(ctx, m.Spec.Target.StorageClassName, "spec.target.storageClassName")
	if err != nil || problem != "" {
		return failed("%s", problem), err
	}
	srcBackend, dstBackend := storage.ForProvisioner(srcClass.Provisioner), storage.ForProvisioner(dstClass.Provisioner)
	access := m.Spec.Target.AccessMode
	switch {
	case (access == "" || access == corev1.ReadWriteMany) && !dstBackend.SupportsRWXBlock():
		return failed("spec.target.storageClassName: %s is %s, which cannot provide ReadWriteMany block volumes", dstClass.Name, dstBackend.Name()), nil
	case s.plan.Mode == nwv1.MigrationHot && !srcBackend.SupportsClone():
		return failed("spec.mode: Hot needs a CSI clone, which %s (the source's backend) cannot make; use Cold", srcBackend.Name()), nil
	case s.plan.Mode == nwv1.MigrationHot && srcClass.Provisioner != dstClass.Provisioner:
		return failed("spec.mode: Hot clones within one CSI driver, but the source is on %s and the target class on %s; use Cold", srcClass.Provisioner, dstClass.Provisioner), nil
	case !srcBackend.SupportsSnapshot():
		return failed("the source PVC %s is on %s, which cannot take the \"before\" snapshot", claim, srcBackend.Name()), nil
	case !dstBackend.SupportsSnapshot():
		return failed("spec.target.storageClassName: %s is %s, which cannot take the \"after\" snapshot", dstClass.Name, dstBackend.Name()), nil
	}
	size := pvcSize(src)
	if t := m.Spec.Target.Size; t != nil && t.Cmp(size) < 0 {
		return failed("spec.target.size: %s is smaller than the source PVC's %s", t.String(), size.String()), nil
	}
	for _, class := range []string{srcClass.Name, dstClass.Name} {
		if _, problem, err := r.snapshotClass(ctx, m, class); err != nil || problem != "" {
			return failed("%s", problem), err
		}
	}

	if s.rec == nil {
		rec := vmRecord{
			Migration: m.Name, UID: m.UID,
			WasRunning:  wantsRunning(vm) || (s.vmi != nil && !s.vmi.IsFinal()),
			RunStrategy: vm.Spec.RunStrategy, Running: vm.Spec.Running,
			Volume: *vol.VolumeSource.DeepCopy(),
		}
		if err := lockVM(ctx, r.Client, vm, rec); err != nil {
			return outcome{}, fmt.Errorf("taking VirtualMachine %s for the migration: %w", vm.Name, err)
		}
		s.rec = &rec
	}
	m.Status.SourcePVCName = claim
	m.Status.TargetPVCName = target
	m.Status.Checksum = &nwv1.MigrationChecksum{Algorithm: algorithmOf(m)}
	if q, ok := size.AsInt64(); ok {
		setProgress(m, 0, q)
	}
	mode := string(s.plan.Mode)
	if m.Spec.Mode == "" {
		mode += " (spec.mode unset)"
	}
	return succeeded("volume %s is PVC %s (%s on %s); target class %s on %s; mode %s",
		vol.Name, claim, size.String(), srcBackend.Name(), dstClass.Name, dstBackend.Name(), mode), nil
}

// checkNotHeld refuses a VM another unfinished migration holds, or is about to.
func (r *Reconciler) checkNotHeld(ctx context.Context, s *scope) (outcome, error) {
	var list nwv1.VMVolumeMigrationList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.m.Namespace)); err != nil {
		return outcome{}, err
	}
	for _, other := range list.Items {
		if other.UID == s.m.UID || other.Spec.VMName != s.m.Spec.VMName {
			continue
		}
		if p := other.Status.Phase; p == nwv1.WorkflowRunning || p == nwv1.WorkflowRollingBack || p == nwv1.WorkflowFailed {
			return failed("spec.vmName: VirtualMachine %s is held by migration %s (%s); one migration per VM at a time", s.m.Spec.VMName, other.Name, p), nil
		}
	}
	rec, err := recordOf(s.vm)
	if err != nil {
		return failed("spec.vmName: %v", err), nil
	}
	if rec != nil && !rec.heldBy(s.m) {
		holder := &nwv1.VMVolumeMigration{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.m.Namespace, Name: rec.Migration}, holder)
		if err == nil && holder.UID == rec.UID {
			return failed("spec.vmName: VirtualMachine %s is held by migration %s; one migration per VM at a time", s.m.Spec.VMName, rec.Migration), nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return outcome{}, err
		}
		// The holder is gone: its record is stale and is replaced when this one takes the VM.
		s.rec = nil
	}
	return outcome{}, nil
}

func volumeNames(vm *virtv1.VirtualMachine) string {
	var names []string
	for _, v := range vm.Spec.Template.Spec.Volumes {
		names = append(names, fmt.Sprintf("%q", v.Name))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// class reads a StorageClass, or says what is wrong with the reference.
func (r *Reconciler) class(ctx context.Context, name, field string) (*storagev1.StorageClass, string, error) {
	if name == "" {
		return nil, field + " is empty: the backend, and what it can do, is unknown", nil
	}
	sc := &storagev1.StorageClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, sc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("%s: StorageClass %q not found", field, name), nil
		}
		return nil, "", err
	}
	return sc, "", nil
}

// snapshotClass is the VolumeSnapshotClass for volumes of the named StorageClass:
// spec.snapshotClassName when its driver is the class's provisioner, or else the driver's
// default class.
func (r *Reconciler) snapshotClass(ctx context.Context, m *nwv1.VMVolumeMigration, storageClassName string) (string, string, error) {
	sc, problem, err := r.class(ctx, storageClassName, "storageClassName")
	if err != nil || problem != "" {
		return "", problem, err
	}
	var classes snapshotv1.VolumeSnapshotClassList
	if err := r.Client.List(ctx, &classes); err != nil {
		return "", "", err
	}
	if name := m.Spec.SnapshotClassName; name != "" {
		i := slices.IndexFunc(classes.Items, func(c snapshotv1.VolumeSnapshotClass) bool { return c.Name == name })
		if i < 0 {
			return "", fmt.Sprintf("spec.snapshotClassName: VolumeSnapshotClass %q not found", name), nil
		}
		if classes.Items[i].Driver == sc.Provisioner {
			return name, "", nil
		}
	}
	for _, c := range classes.Items {
		if c.Driver == sc.Provisioner && c.Annotations[defaultSnapshotClassAnnotation] == "true" {
			return c.Name, "", nil
		}
	}
	return "", fmt.Sprintf("spec.snapshotClassName: no VolumeSnapshotClass for driver %s (StorageClass %s); name one or mark one with %s=true",
		sc.Provisioner, sc.Name, defaultSnapshotClassAnnotation), nil
}
