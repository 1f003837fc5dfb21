// Package preflight asks the cluster whether a VMVolumeMigration can run: the questions the
// admission webhook and the controller's Validate step both ask, so that a refusal reads the
// same whichever finds it, and the controller still refuses when the webhook is not
// installed. It is a service, not a controller, so that the webhook need not import one.
package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/storage"
)

// defaultSnapshotClassAnnotation marks a driver's default VolumeSnapshotClass.
const defaultSnapshotClassAnnotation = "snapshot.storage.kubernetes.io/is-default-class"

// Checker asks the cluster whether a migration can run. The admission webhook and the
// controller's Validate step ask the same questions, so that a refusal reads the same
// whichever finds it, and the controller still refuses when the webhook is not installed.
type Checker struct {
	// Client reads VMs, PVCs, classes and migrations (a cache will do).
	Client client.Reader
	// APIReader reads what the operator does not cache: objects under the names the
	// migration's children will take.
	APIReader client.Reader
}

// Preflight is what the checks found out about a migration that can run.
type Preflight struct {
	// Volume is the VM's volume being moved, and Claim the PVC it names.
	Volume *virtv1.Volume
	Claim  string
	// Source is the source PVC, and Size its size.
	Source *corev1.PersistentVolumeClaim
	Size   resource.Quantity
	// SourceClass and TargetClass are the StorageClasses on both sides, and SourceBackend
	// and TargetBackend what their drivers can do.
	SourceClass, TargetClass     *storagev1.StorageClass
	SourceBackend, TargetBackend storage.Backend
}

// Check runs every check on migration m of VM vm (nil when it does not exist) in mode: the
// VM and its volume exist, the source is a bound block PVC, the target class's backend can
// do what the spec asks (ReadWriteMany block; a clone for Hot; snapshots on both sides), the
// target is big enough, and no other migration holds the VM. A problem, when there is one,
// names the field and the reason.
func (c Checker) Check(ctx context.Context, m *nwv1.VMVolumeMigration, vm *virtv1.VirtualMachine, mode nwv1.MigrationMode) (*Preflight, string, error) {
	if vm == nil {
		return nil, fmt.Sprintf("spec.vmName: VirtualMachine %q not found in namespace %s", m.Spec.VMName, m.Namespace), nil
	}
	if problem, err := c.checkNotHeld(ctx, m, vm); err != nil || problem != "" {
		return nil, problem, err
	}
	pf, problem, err := c.Source(ctx, m, vm)
	if err != nil || problem != "" {
		return nil, problem, err
	}
	if m.Spec.Target.VolumeMode == corev1.PersistentVolumeFilesystem {
		return nil, "spec.target.volumeMode: Filesystem is not supported; the copy is block for block, use Block", nil
	}
	target := migration.ChildName(m, migration.SuffixTarget)
	if pf.Claim == target {
		return nil, fmt.Sprintf("spec.volumeName: the volume already uses PVC %s, this migration's target name", pf.Claim), nil
	}
	if taken, err := c.takenName(ctx, m); err != nil || taken != "" {
		return nil, fmt.Sprintf("metadata.name: %s, a name this migration needs, is taken by an object it did not create; rename the migration", taken), err
	}
	dstClass, problem, err := c.class(ctx, m.Spec.Target.StorageClassName, "spec.target.storageClassName")
	if err != nil || problem != "" {
		return nil, problem, err
	}
	pf.TargetClass, pf.TargetBackend = dstClass, storage.ForProvisioner(dstClass.Provisioner)
	srcClass, srcBackend, dstBackend := pf.SourceClass, pf.SourceBackend, pf.TargetBackend
	access := m.Spec.Target.AccessMode
	switch {
	case (access == "" || access == corev1.ReadWriteMany) && !dstBackend.SupportsRWXBlock():
		return nil, fmt.Sprintf("spec.target.storageClassName: %s is %s, which cannot provide ReadWriteMany block volumes", dstClass.Name, dstBackend.Name()), nil
	case mode == nwv1.MigrationHot && !srcBackend.SupportsClone():
		return nil, fmt.Sprintf("spec.mode: Hot needs a CSI clone, which %s (the source's backend) cannot make; use Cold", srcBackend.Name()), nil
	case mode == nwv1.MigrationHot && srcClass.Provisioner != dstClass.Provisioner:
		return nil, fmt.Sprintf("spec.mode: Hot clones within one CSI driver, but the source is on %s and the target class on %s; use Cold", srcClass.Provisioner, dstClass.Provisioner), nil
	case !srcBackend.SupportsSnapshot():
		return nil, fmt.Sprintf("spec.volumeName: the source PVC %s is on %s, which cannot take the \"before\" snapshot", pf.Claim, srcBackend.Name()), nil
	case !dstBackend.SupportsSnapshot():
		return nil, fmt.Sprintf("spec.target.storageClassName: %s is %s, which cannot take the \"after\" snapshot", dstClass.Name, dstBackend.Name()), nil
	}
	if t := m.Spec.Target.Size; t != nil && t.Cmp(pf.Size) < 0 {
		return nil, fmt.Sprintf("spec.target.size: %s is smaller than the source PVC's %s", t.String(), pf.Size.String()), nil
	}
	for _, class := range []string{srcClass.Name, dstClass.Name} {
		if _, problem, err := c.SnapshotClass(ctx, m, class); err != nil || problem != "" {
			return nil, problem, err
		}
	}
	return pf, "", nil
}

// Source finds the volume being moved, its PVC and that PVC's class: what defaulting needs
// (the size, and whether a clone can move it) and the first half of Check.
func (c Checker) Source(ctx context.Context, m *nwv1.VMVolumeMigration, vm *virtv1.VirtualMachine) (*Preflight, string, error) {
	vol := migration.VolumeOf(vm, m.Spec.VolumeName)
	if vol == nil {
		return nil, fmt.Sprintf("spec.volumeName: VirtualMachine %s has no volume %q (it has %s)", vm.Name, m.Spec.VolumeName, volumeNames(vm)), nil
	}
	claim := migration.ClaimOf(vol.VolumeSource)
	if claim == "" {
		return nil, fmt.Sprintf("spec.volumeName: volume %q is not backed by a PVC or a DataVolume", vol.Name), nil
	}
	if vol.DataVolume != nil && slices.ContainsFunc(vm.Spec.DataVolumeTemplates, func(t virtv1.DataVolumeTemplateSpec) bool { return t.Name == vol.DataVolume.Name }) {
		return nil, fmt.Sprintf("spec.volumeName: volume %q comes from the VM's dataVolumeTemplates, which KubeVirt requires a volume to keep naming; it cannot be repointed", vol.Name), nil
	}
	if vol.DataVolume != nil && !ptr.Deref(m.Spec.RetainSource, true) {
		return nil, fmt.Sprintf("spec.retainSource: the source PVC %s belongs to DataVolume %s; it can only be retained", claim, vol.DataVolume.Name), nil
	}
	if vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == virtv1.RunStrategyManual {
		return nil, fmt.Sprintf("spec.vmName: VirtualMachine %s has runStrategy Manual; Nodewright stops and starts VMs through their run strategy", vm.Name), nil
	}
	src := &corev1.PersistentVolumeClaim{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: claim}, src); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("spec.volumeName: volume %q names PVC %s, which does not exist", vol.Name, claim), nil
		}
		return nil, "", err
	}
	if !migration.PVCBound(src) {
		return nil, fmt.Sprintf("spec.volumeName: the source PVC %s is not bound", claim), nil
	}
	if ptr.Deref(src.Spec.VolumeMode, corev1.PersistentVolumeFilesystem) != corev1.PersistentVolumeBlock {
		return nil, fmt.Sprintf("spec.volumeName: the source PVC %s has volumeMode Filesystem; only Block volumes are copied", claim), nil
	}
	srcClass, problem, err := c.class(ctx, ptr.Deref(src.Spec.StorageClassName, ""), "spec.volumeName: the source PVC "+claim+"'s storageClassName")
	if err != nil || problem != "" {
		return nil, problem, err
	}
	return &Preflight{Volume: vol, Claim: claim, Source: src, Size: migration.PVCSize(src),
		SourceClass: srcClass, SourceBackend: storage.ForProvisioner(srcClass.Provisioner)}, "", nil
}

// checkNotHeld refuses a VM another unfinished migration holds, or is about to.
func (c Checker) checkNotHeld(ctx context.Context, m *nwv1.VMVolumeMigration, vm *virtv1.VirtualMachine) (string, error) {
	var list nwv1.VMVolumeMigrationList
	if err := c.Client.List(ctx, &list, client.InNamespace(m.Namespace)); err != nil {
		return "", err
	}
	for _, other := range list.Items {
		if other.UID == m.UID || other.Spec.VMName != m.Spec.VMName {
			continue
		}
		// Another migration holds the VM once its Validate succeeded; two that validate at once
		// meet at the VM's annotation, which only one can write.
		if p := other.Status.Phase; (p.Active() || p == nwv1.WorkflowFailed) && migration.Validated(&other) {
			return fmt.Sprintf("spec.vmName: VirtualMachine %s is held by migration %s (%s); one migration per VM at a time", m.Spec.VMName, other.Name, p), nil
		}
	}
	if raw, ok := vm.Annotations[migration.AnnotationFailedMigration]; ok {
		return fmt.Sprintf("spec.vmName: a failed migration left VirtualMachine %s as its annotation %s says (%s); restore the VM and remove the annotation first",
			m.Spec.VMName, migration.AnnotationFailedMigration, audit.Shorten(raw, 300)), nil
	}
	rec, err := migration.RecordOf(vm)
	if err != nil {
		return fmt.Sprintf("spec.vmName: %v", err), nil
	}
	if rec != nil && !rec.HeldBy(m) {
		holder := &nwv1.VMVolumeMigration{}
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: rec.Migration}, holder)
		if err == nil && holder.UID == rec.UID {
			return fmt.Sprintf("spec.vmName: VirtualMachine %s is held by migration %s; one migration per VM at a time", m.Spec.VMName, rec.Migration), nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return "", err
		}
		// The holder is gone: its record is stale and is replaced when this migration takes
		// the VM.
	}
	return "", nil
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
func (c Checker) class(ctx context.Context, name, field string) (*storagev1.StorageClass, string, error) {
	if name == "" {
		return nil, field + " is empty: the backend, and what it can do, is unknown", nil
	}
	sc := &storagev1.StorageClass{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, sc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("%s: StorageClass %q not found", field, name), nil
		}
		return nil, "", err
	}
	return sc, "", nil
}

// SnapshotClass is the VolumeSnapshotClass for volumes of the named StorageClass:
// spec.snapshotClassName when its driver is the class's provisioner, or else the driver's
// default class.
func (c Checker) SnapshotClass(ctx context.Context, m *nwv1.VMVolumeMigration, storageClassName string) (string, string, error) {
	sc, problem, err := c.class(ctx, storageClassName, "spec.snapshotClassName: the StorageClass")
	if err != nil || problem != "" {
		return "", problem, err
	}
	var classes snapshotv1.VolumeSnapshotClassList
	if err := c.Client.List(ctx, &classes); err != nil {
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

// takenName names the first of the migration's children whose name an object it did not
// create already has, reading the API server (the operator caches only its own children).
func (c Checker) takenName(ctx context.Context, m *nwv1.VMVolumeMigration) (string, error) {
	key := func(suffix string) client.ObjectKey {
		return client.ObjectKey{Namespace: m.Namespace, Name: migration.ChildName(m, suffix)}
	}
	children := []struct {
		kind string
		obj  client.Object
		key  client.ObjectKey
	}{
		{"PersistentVolumeClaim", &corev1.PersistentVolumeClaim{}, key(migration.SuffixTarget)},
		{"PersistentVolumeClaim", &corev1.PersistentVolumeClaim{}, key(migration.SuffixView)},
		{"VolumeSnapshot", &snapshotv1.VolumeSnapshot{}, key(migration.SuffixBefore)},
		{"VolumeSnapshot", &snapshotv1.VolumeSnapshot{}, key(migration.SuffixAfter)},
		{"Job", &batchv1.Job{}, key(migration.SuffixCopy)},
		{"Job", &batchv1.Job{}, key(migration.SuffixVerify)},
	}
	for _, child := range children {
		err := c.APIReader.Get(ctx, child.key, child.obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		if !migration.Owner(m).Owns(child.obj) {
			return child.kind + " " + child.key.Name, nil
		}
	}
	return "", nil
}
