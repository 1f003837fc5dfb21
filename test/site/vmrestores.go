package site

import (
	"context"
	"errors"
	"fmt"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// KubeVirt's restore controller (virt-controller's VMRestoreController of KubeVirt v1.6), for
// a VirtualMachineRestore of an existing, stopped VM from a snapshot of it, with new claims
// (volumeRestorePolicy RandomizeNames, the default): the VM gets the spec it had in the
// snapshot, its run strategy kept, its volumes on the new claims. Names, labels, annotations,
// conditions, Events and messages are KubeVirt's; its restore finalizer and the VM's
// status.restoreInProgress are not played.
const (
	restoreNameAnnotation       = "restore.kubevirt.io/name"
	lastRestoreAnnotation       = "restore.kubevirt.io/lastRestoreUID"
	restoreSourceNameLabel      = "restore.kubevirt.io/source-vm-name"
	restoreSourceNamespaceLabel = "restore.kubevirt.io/source-vm-namespace"

	waitGracePeriodMessage = "Waiting for target VM to be powered off. Please stop the restore target to proceed with restore, or the operation will fail after 5m0s"
	waitEventuallyMessage  = "Waiting for target VM to be powered off. Please stop the restore target to proceed with restore"
	gracePeriodExceeded    = "Restore target failed to be ready within 5m0s. Please power off the target VM before attempting restore"
	targetNotReadyFailure  = "Restore target VMI must be powered off before restore operation"
	vmiExistsEventMessage  = "Restore target VMI still exists, please stop the restore target to proceed with restore"

	// restoreRetry is how soon a restore that met an error is tried again.
	restoreRetry = 5 * time.Second
)

func (s *Site) setupVMRestores() error {
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool { return s.inScope(o.GetNamespace()) })
	byTarget := func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &snapv1.VirtualMachineRestoreList{}
		if err := s.client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var names []string
		for _, r := range list.Items {
			if r.Spec.Target.Name == o.GetName() {
				names = append(names, r.Name)
			}
		}
		return requests(o.GetNamespace(), names)
	}
	byClaim := func(ctx context.Context, o client.Object) []reconcile.Request {
		if name := o.GetAnnotations()[restoreNameAnnotation]; name != "" {
			return requests(o.GetNamespace(), []string{name})
		}
		return nil
	}
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-vmrestores").
		For(&snapv1.VirtualMachineRestore{}, builder.WithPredicates(inScope)).
		// A target that stops lets its restore go on; a restored claim that binds, too.
		Watches(&virtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(byTarget), builder.WithPredicates(inScope)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(byClaim), builder.WithPredicates(inScope)).
		Complete(reconcile.Func(s.reconcileVMRestore))
}

func (s *Site) reconcileVMRestore(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r := &snapv1.VirtualMachineRestore{}
	if err := s.client.Get(ctx, req.NamespacedName, r); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.Status == nil {
		next := r.DeepCopy()
		next.Status = &snapv1.VirtualMachineRestoreStatus{Complete: ptr.To(false)}
		setRestoreCondition(next, snapv1.ConditionProgressing, corev1.ConditionTrue, "Initializing VirtualMachineRestore")
		setRestoreCondition(next, snapv1.ConditionReady, corev1.ConditionFalse, "Initializing VirtualMachineRestore")
		return ctrl.Result{}, s.writeRestoreStatus(ctx, r, next)
	}
	if r.DeletionTimestamp != nil || ptr.Deref(r.Status.Complete, false) || hasRestoreCondition(r, snapv1.ConditionFailure) {
		return ctrl.Result{}, nil
	}
	next := r.DeepCopy()
	retry, err := s.restore(ctx, r, next)
	var failed restoreError
	if errors.As(err, &failed) {
		setRestoreCondition(next, snapv1.ConditionProgressing, corev1.ConditionFalse, failed.message)
		setRestoreCondition(next, snapv1.ConditionReady, corev1.ConditionFalse, failed.message)
		if failed.fail {
			setRestoreCondition(next, snapv1.ConditionFailure, corev1.ConditionTrue, failed.message)
			s.recorder.Eventf(r, corev1.EventTypeWarning, "VirtualMachineRestoreError", "VirtualMachineRestore failed %s", failed.message)
		} else {
			// Retried, as KubeVirt retries an error, with its backoff.
			s.recorder.Eventf(r, corev1.EventTypeWarning, "VirtualMachineRestoreError", "VirtualMachineRestore encountered error %s", failed.message)
			retry = restoreRetry
		}
		err = nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: retry}, s.writeRestoreStatus(ctx, r, next)
}

// restoreError is an error KubeVirt writes into the restore's conditions; fail ends it.
type restoreError struct {
	message string
	fail    bool
}

func (e restoreError) Error() string { return e.message }

// restore moves the restore on by one step, in next's status: it waits for the target to be
// stopped, creates the new claims from the volumes' snapshots, waits for them to be bound,
// points the VM's volumes at them, and completes.
func (s *Site) restore(ctx context.Context, r, next *snapv1.VirtualMachineRestore) (time.Duration, error) {
	if r.Spec.Target.Kind != "VirtualMachine" {
		return 0, restoreError{message: fmt.Sprintf("unknown source %+v", r.Spec.Target)}
	}
	vm := &virtv1.VirtualMachine{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Spec.Target.Name}, vm); apierrors.IsNotFound(err) {
		// KubeVirt makes a new VM from the snapshot; the site does not play that.
		return 0, restoreError{message: fmt.Sprintf("the site plays restores to an existing VM only: VirtualMachine %s not found", r.Spec.Target.Name)}
	} else if err != nil {
		return 0, err
	}
	if len(next.OwnerReferences) == 0 {
		next.OwnerReferences = []metav1.OwnerReference{{APIVersion: virtv1.GroupVersion.String(), Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		before := r.DeepCopy()
		if err := s.client.Patch(ctx, next, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return 0, err
		}
		r.ObjectMeta = next.ObjectMeta
	}
	vmi, err := s.getVMI(ctx, client.ObjectKeyFromObject(vm))
	if err != nil {
		return 0, err
	}
	if vmi != nil {
		return s.targetNotReady(r, next)
	}
	vms := &snapv1.VirtualMachineSnapshot{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Spec.VirtualMachineSnapshotName}, vms); apierrors.IsNotFound(err) {
		return 0, restoreError{message: fmt.Sprintf("VMSnapshot %s/%s does not exist", r.Namespace, r.Spec.VirtualMachineSnapshotName)}
	} else if err != nil {
		return 0, err
	}
	if vms.Status == nil || vms.Status.Phase != snapv1.Succeeded || !ptr.Deref(vms.Status.ReadyToUse, false) {
		if vms.Status != nil && vms.Status.Phase == snapv1.Failed {
			return 0, restoreError{message: fmt.Sprintf("VMSnapshot %s/%s failed and is invalid to use", vms.Namespace, vms.Name)}
		}
		return 0, restoreError{message: fmt.Sprintf("VMSnapshot %s/%s not ready", vms.Namespace, vms.Name)}
	}
	if vms.Status.SourceUID != nil && *vms.Status.SourceUID != vm.UID {
		return 0, restoreError{message: "restore source and restore target are different but restore target already exists"}
	}
	if ptr.Deref(r.Spec.VolumeRestorePolicy, snapv1.VolumeRestorePolicyRandomizeNames) != snapv1.VolumeRestorePolicyRandomizeNames || len(r.Spec.VolumeRestoreOverrides) > 0 || len(r.Spec.Patches) > 0 {
		return 0, restoreError{message: "the site plays volumeRestorePolicy RandomizeNames only, without overrides or patches"}
	}
	content := &snapv1.VirtualMachineSnapshotContent{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: vms.Namespace, Name: vmSnapshotContentName(vms)}, content); err != nil {
		return 0, restoreError{message: fmt.Sprintf("VirtualMachineSnapshotContent %s: %v", vmSnapshotContentName(vms), err)}
	}
	waiting, err := s.restoreClaims(ctx, r, next, content)
	if err != nil || waiting {
		if waiting {
			setRestoreCondition(next, snapv1.ConditionProgressing, corev1.ConditionTrue, "Creating new PVCs")
			setRestoreCondition(next, snapv1.ConditionReady, corev1.ConditionFalse, "Waiting for new PVCs")
		}
		return 0, err
	}
	updated, err := s.restoreTarget(ctx, vm, content, next)
	if err != nil || updated {
		if updated {
			setRestoreCondition(next, snapv1.ConditionProgressing, corev1.ConditionTrue, "Updating target spec")
			setRestoreCondition(next, snapv1.ConditionReady, corev1.ConditionFalse, "Waiting for target update")
		}
		return 0, err
	}
	s.recorder.Eventf(r, corev1.EventTypeNormal, "VirtualMachineRestoreComplete", "Successfully completed VirtualMachineRestore %s", r.Name)
	next.Status.Complete = ptr.To(true)
	next.Status.RestoreTime = ptr.To(metav1.Now())
	setRestoreCondition(next, snapv1.ConditionProgressing, corev1.ConditionFalse, "Operation complete")
	setRestoreCondition(next, snapv1.ConditionReady, corev1.ConditionTrue, "Operation complete")
	return 0, nil
}

// targetNotReady waits for a running target as the restore's targetReadinessPolicy says
// (StopTarget, which stops the VM through its subresource, is not played: it waits).
func (s *Site) targetNotReady(r, next *snapv1.VirtualMachineRestore) (time.Duration, error) {
	message := waitGracePeriodMessage
	switch ptr.Deref(r.Spec.TargetReadinessPolicy, snapv1.VirtualMachineRestoreWaitGracePeriodAndFail) {
	case snapv1.VirtualMachineRestoreFailImmediate:
		return 0, restoreError{message: targetNotReadyFailure, fail: true}
	case snapv1.VirtualMachineRestoreWaitGracePeriodAndFail:
		if time.Now().After(r.CreationTimestamp.Add(snapv1.DefaultGracePeriod)) {
			return 0, restoreError{message: gracePeriodExceeded, fail: true}
		}
	default:
		message = waitEventuallyMessage
	}
	s.recorder.Event(r, corev1.EventTypeWarning, "RestoreTargetNotReady", vmiExistsEventMessage)
	setRestoreCondition(next, snapv1.ConditionProgressing, corev1.ConditionFalse, message)
	setRestoreCondition(next, snapv1.ConditionReady, corev1.ConditionFalse, message)
	return max(time.Until(r.CreationTimestamp.Add(snapv1.DefaultGracePeriod)), time.Second), nil
}

// restoreClaims creates a claim from each volume's snapshot, named restore-<restore's UID>-<volume>,
// and says whether it still waits for one to be bound (a WaitForFirstConsumer one is bound
// when the VM starts).
func (s *Site) restoreClaims(ctx context.Context, r, next *snapv1.VirtualMachineRestore, content *snapv1.VirtualMachineSnapshotContent) (bool, error) {
	waiting := false
	var restores []snapv1.VolumeRestore
	for _, b := range content.Spec.VolumeBackups {
		if b.VolumeSnapshotName == nil {
			continue
		}
		name := fmt.Sprintf("restore-%s-%s", r.UID, b.VolumeName)
		restores = append(restores, snapv1.VolumeRestore{VolumeName: b.VolumeName, PersistentVolumeClaimName: name, VolumeSnapshotName: *b.VolumeSnapshotName})
		pvc := &corev1.PersistentVolumeClaim{}
		err := s.client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: name}, pvc)
		if apierrors.IsNotFound(err) {
			if err := s.createRestoreClaim(ctx, r, name, content, b); err != nil {
				return false, err
			}
			waiting = true
			continue
		}
		if err != nil {
			return false, err
		}
		switch pvc.Status.Phase {
		case corev1.ClaimBound:
		case corev1.ClaimPending:
			immediate, err := s.bindsAtOnce(ctx, pvc)
			if err != nil {
				return false, err
			}
			waiting = waiting || immediate
		default:
			return false, restoreError{message: fmt.Sprintf("PVC %s/%s in status %q", pvc.Namespace, pvc.Name, pvc.Status.Phase)}
		}
	}
	next.Status.Restores = restores
	return waiting, nil
}

func (s *Site) createRestoreClaim(ctx context.Context, r *snapv1.VirtualMachineRestore, name string, content *snapv1.VirtualMachineSnapshotContent,
	b snapv1.VolumeBackup) error {
	vs := &snapshotv1.VolumeSnapshot{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: *b.VolumeSnapshotName}, vs); err != nil {
		return restoreError{message: fmt.Sprintf("VolumeSnapshot %s: %v", *b.VolumeSnapshotName, err)}
	}
	spec := *b.PersistentVolumeClaim.Spec.DeepCopy()
	spec.VolumeName = ""
	spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: vs.Name}
	spec.DataSourceRef = nil
	if vs.Status != nil && vs.Status.RestoreSize != nil && !vs.Status.RestoreSize.IsZero() {
		if spec.Resources.Requests == nil {
			spec.Resources.Requests = corev1.ResourceList{}
		}
		if req := spec.Resources.Requests[corev1.ResourceStorage]; req.Cmp(*vs.Status.RestoreSize) < 0 {
			spec.Resources.Requests[corev1.ResourceStorage] = *vs.Status.RestoreSize
		}
	}
	vm := content.Spec.Source.VirtualMachine
	labels := map[string]string{restoreSourceNameLabel: vm.Name, restoreSourceNamespaceLabel: vm.Namespace}
	for k, v := range b.PersistentVolumeClaim.Labels {
		labels[k] = v
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace, Labels: labels,
			Annotations:     map[string]string{restoreNameAnnotation: r.Name, lastRestoreAnnotation: fmt.Sprintf("%s-%s", r.Name, r.UID)},
			OwnerReferences: r.OwnerReferences},
		Spec: spec,
	}
	if err := s.client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PersistentVolumeClaim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// bindsAtOnce says whether a pending claim's class binds it without a consumer.
func (s *Site) bindsAtOnce(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	if pvc.Spec.StorageClassName == nil {
		return true, nil
	}
	sc := &storagev1.StorageClass{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: *pvc.Spec.StorageClassName}, sc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return ptr.Deref(sc.VolumeBindingMode, storagev1.VolumeBindingImmediate) == storagev1.VolumeBindingImmediate, nil
}

// restoreTarget gives the VM the spec it had in the snapshot, its run strategy kept, with its
// volumes on the restored claims, as KubeVirt does; it says whether it changed the VM.
func (s *Site) restoreTarget(ctx context.Context, vm *virtv1.VirtualMachine, content *snapv1.VirtualMachineSnapshotContent,
	next *snapv1.VirtualMachineRestore) (bool, error) {
	changed := vm.DeepCopy()
	mark := fmt.Sprintf("%s-%s", next.Name, next.UID)
	if vm.Annotations[lastRestoreAnnotation] == mark {
		return false, nil // restored already: the spec is the snapshot's
	}
	if from := content.Spec.Source.VirtualMachine; from != nil {
		changed.Spec = *from.Spec.DeepCopy()
		changed.Spec.RunStrategy, changed.Spec.Running = vm.Spec.RunStrategy, vm.Spec.Running
	}
	if changed.Spec.Template != nil {
		for i := range changed.Spec.Template.Spec.Volumes {
			v := &changed.Spec.Template.Spec.Volumes[i]
			for _, restored := range next.Status.Restores {
				if restored.VolumeName != v.Name {
					continue
				}
				v.VolumeSource = virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: restored.PersistentVolumeClaimName},
				}}
			}
		}
	}
	if changed.Annotations == nil {
		changed.Annotations = map[string]string{}
	}
	changed.Annotations[lastRestoreAnnotation] = mark
	if err := s.client.Patch(ctx, changed, client.MergeFromWithOptions(vm, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("updating VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return true, nil
}

func setRestoreCondition(r *snapv1.VirtualMachineRestore, t snapv1.ConditionType, status corev1.ConditionStatus, reason string) {
	r.Status.Conditions = setKubeVirtCondition(r.Status.Conditions, t, status, reason)
}

func hasRestoreCondition(r *snapv1.VirtualMachineRestore, t snapv1.ConditionType) bool {
	for _, c := range r.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (s *Site) writeRestoreStatus(ctx context.Context, r, next *snapv1.VirtualMachineRestore) error {
	if equality.Semantic.DeepEqual(r.Status, next.Status) {
		return nil
	}
	if err := ignoreGone(s.client.Status().Patch(ctx, next, client.MergeFromWithOptions(r, client.MergeFromWithOptimisticLock{}))); err != nil {
		return fmt.Errorf("writing the status of VirtualMachineRestore %s/%s: %w", r.Namespace, r.Name, err)
	}
	return nil
}
