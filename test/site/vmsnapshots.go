package site

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// KubeVirt's snapshot controller (virt-controller's VMSnapshotController of KubeVirt v1.6,
// pkg/storage/snapshot), and virt-handler's freeze and thaw of the played guest agent. Names,
// finalizers, labels, messages and the order of the status fields are KubeVirt's.
const (
	vmSnapshotFinalizer        = "snapshot.kubevirt.io/vmsnapshot-protection"
	vmSnapshotContentFinalizer = "snapshot.kubevirt.io/vmsnapshotcontent-protection"
	snapshotSourceNameLabel    = "snapshot.kubevirt.io/source-vm-name"
	snapshotSourceNSLabel      = "snapshot.kubevirt.io/source-vm-namespace"
	// failedFreezeMsg starts the error of a failed freeze; KubeVirt marks a snapshot whose
	// error says it QuiesceFailed.
	failedFreezeMsg = "Failed freezing vm"
	// frozen is a VMI's status.fsFreezeStatus while its guest's file systems are frozen.
	frozen = "frozen"
	// freezeRetry is how soon KubeVirt tries a failed freeze again.
	freezeRetry = 5 * time.Second
)

// vmSnapshotContentName is KubeVirt's name of a snapshot's content.
func vmSnapshotContentName(vms *snapv1.VirtualMachineSnapshot) string {
	if vms.Status != nil && vms.Status.VirtualMachineSnapshotContentName != nil {
		return *vms.Status.VirtualMachineSnapshotContentName
	}
	return "vmsnapshot-content-" + string(vms.UID)
}

func (s *Site) setupVMSnapshots() error {
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool { return s.inScope(o.GetNamespace()) })
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-vmsnapshots").
		For(&snapv1.VirtualMachineSnapshot{}, builder.WithPredicates(inScope)).
		// A volume's snapshot becoming ready moves its VM's snapshot on.
		Watches(&snapshotv1.VolumeSnapshot{}, handler.EnqueueRequestsFromMapFunc(s.vmSnapshotOfVolumeSnapshot), builder.WithPredicates(inScope)).
		Watches(&snapv1.VirtualMachineSnapshotContent{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name := ptr.Deref(o.(*snapv1.VirtualMachineSnapshotContent).Spec.VirtualMachineSnapshotName, "")
			return requests(o.GetNamespace(), []string{name})
		}), builder.WithPredicates(inScope)).
		Complete(reconcile.Func(s.reconcileVMSnapshot))
}

// vmSnapshotOfVolumeSnapshot maps a VolumeSnapshot KubeVirt made to its VM's snapshot, through
// the content that controls it.
func (s *Site) vmSnapshotOfVolumeSnapshot(ctx context.Context, o client.Object) []reconcile.Request {
	owner := metav1.GetControllerOf(o)
	if owner == nil || owner.Kind != "VirtualMachineSnapshotContent" {
		return nil
	}
	content := &snapv1.VirtualMachineSnapshotContent{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: owner.Name}, content); err != nil {
		return nil
	}
	return requests(o.GetNamespace(), []string{ptr.Deref(content.Spec.VirtualMachineSnapshotName, "")})
}

func (s *Site) reconcileVMSnapshot(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vms := &snapv1.VirtualMachineSnapshot{}
	if err := s.client.Get(ctx, req.NamespacedName, vms); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vms.Spec.Source.Kind != "VirtualMachine" {
		return ctrl.Result{}, nil
	}
	content := &snapv1.VirtualMachineSnapshotContent{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: vms.Namespace, Name: vmSnapshotContentName(vms)}, content); apierrors.IsNotFound(err) {
		content = nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if vms.DeletionTimestamp != nil {
		return ctrl.Result{}, s.deleteVMSnapshot(ctx, vms, content)
	}
	if !controllerutil.ContainsFinalizer(vms, vmSnapshotFinalizer) {
		before := vms.DeepCopy()
		controllerutil.AddFinalizer(vms, vmSnapshotFinalizer)
		if err := s.client.Patch(ctx, vms, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, ignoreGone(err)
		}
	}
	vm, vmi, err := s.snapshotSource(ctx, vms)
	if err != nil {
		return ctrl.Result{}, err
	}
	if progressing(vms) && deadlinePassed(vms) {
		// KubeVirt fails it, thaws the guest (a thaw that fails is only logged) and deletes its
		// content, never ready, with the volumes' snapshots.
		_ = s.thaw(ctx, vmi)
		if content != nil && !ptr.Deref(ptr.Deref(content.Status, snapv1.VirtualMachineSnapshotContentStatus{}).ReadyToUse, false) {
			if err := s.deleteVMSnapshotContent(ctx, content); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, s.writeVMSnapshotStatus(ctx, vms, nil, vm, vmi)
	}
	var retry time.Duration
	if progressing(vms) && vm != nil {
		if content == nil {
			if content, err = s.createVMSnapshotContent(ctx, vms, vm); err != nil {
				return ctrl.Result{}, err
			}
		}
		if s.opts.HoldSnapshot == nil || !s.opts.HoldSnapshot(vms) {
			if retry, err = s.progressContent(ctx, vms, content, vmi); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if err := s.writeVMSnapshotStatus(ctx, vms, content, vm, vmi); err != nil {
		return ctrl.Result{}, err
	}
	if d := failureDeadline(vms); retry == 0 && progressing(vms) && d > 0 {
		// Woken at the failure deadline, as KubeVirt is.
		retry = max(time.Until(vms.CreationTimestamp.Add(d)), time.Second)
	}
	return ctrl.Result{RequeueAfter: retry}, nil
}

// deadlinePassed says whether the snapshot's failure deadline has passed; 0 means none.
func deadlinePassed(vms *snapv1.VirtualMachineSnapshot) bool {
	d := failureDeadline(vms)
	return d > 0 && time.Now().After(vms.CreationTimestamp.Add(d))
}

// progressing says whether the snapshot is not over: neither Succeeded nor Failed.
func progressing(vms *snapv1.VirtualMachineSnapshot) bool {
	return vms.Status == nil || (vms.Status.Phase != snapv1.Succeeded && vms.Status.Phase != snapv1.Failed)
}

func failureDeadline(vms *snapv1.VirtualMachineSnapshot) time.Duration {
	if vms.Spec.FailureDeadline != nil {
		return vms.Spec.FailureDeadline.Duration
	}
	return snapv1.DefaultFailureDeadline
}

// snapshotSource reads the snapshot's VM and its VMI; each is nil when there is none.
func (s *Site) snapshotSource(ctx context.Context, vms *snapv1.VirtualMachineSnapshot) (*virtv1.VirtualMachine, *virtv1.VirtualMachineInstance, error) {
	key := types.NamespacedName{Namespace: vms.Namespace, Name: vms.Spec.Source.Name}
	vm := &virtv1.VirtualMachine{}
	if err := s.client.Get(ctx, key, vm); apierrors.IsNotFound(err) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, err
	}
	vmi, err := s.getVMI(ctx, key)
	return vm, vmi, err
}

// createVMSnapshotContent makes the snapshot's content: the VM as it is, and a volume backup
// of each bound claim whose storage class has a VolumeSnapshotClass. The other volumes are
// left out, and show as excluded once the snapshot succeeds.
func (s *Site) createVMSnapshotContent(ctx context.Context, vms *snapv1.VirtualMachineSnapshot, vm *virtv1.VirtualMachine) (*snapv1.VirtualMachineSnapshotContent, error) {
	var backups []snapv1.VolumeBackup
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			claim := volumeClaim(v)
			if claim == "" {
				continue
			}
			pvc := &corev1.PersistentVolumeClaim{}
			if err := s.client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: claim}, pvc); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return nil, err
			}
			if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.StorageClassName == nil {
				continue
			}
			class, err := s.volumeSnapshotClassOf(ctx, *pvc.Spec.StorageClassName)
			if err != nil {
				return nil, err
			}
			if class == "" {
				continue // "No VolumeSnapshotClass for <storage class>"
			}
			backups = append(backups, snapv1.VolumeBackup{
				VolumeName: v.Name,
				PersistentVolumeClaim: snapv1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Name: pvc.Name, Namespace: pvc.Namespace, Labels: pvc.Labels, Annotations: pvc.Annotations},
					Spec:       *pvc.Spec.DeepCopy(),
				},
				VolumeSnapshotName: ptr.To(fmt.Sprintf("vmsnapshot-%s-volume-%s", vms.UID, v.Name)),
			})
		}
	}
	content := &snapv1.VirtualMachineSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: vmSnapshotContentName(vms), Namespace: vms.Namespace, Finalizers: []string{vmSnapshotContentFinalizer}},
		Spec: snapv1.VirtualMachineSnapshotContentSpec{
			VirtualMachineSnapshotName: ptr.To(vms.Name),
			Source: snapv1.SourceSpec{VirtualMachine: &snapv1.VirtualMachine{
				ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: vm.Namespace, Labels: vm.Labels, Annotations: vm.Annotations, UID: vm.UID},
				Spec:       *vm.Spec.DeepCopy(),
			}},
			VolumeBackups: backups,
		},
	}
	err := s.client.Create(ctx, content)
	if apierrors.IsAlreadyExists(err) {
		err = s.client.Get(ctx, client.ObjectKeyFromObject(content), content)
	}
	if err != nil {
		return nil, fmt.Errorf("VirtualMachineSnapshotContent %s/%s: %w", content.Namespace, content.Name, err)
	}
	s.recorder.Eventf(vms, corev1.EventTypeNormal, "SuccessfulVirtualMachineSnapshotContentCreate",
		"Successfully created VirtualMachineSnapshotContent %s", content.Name)
	return content, nil
}

// volumeClaim is the claim behind a volume; a dataVolume's is the claim of its name.
func volumeClaim(v virtv1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.DataVolume != nil:
		return v.DataVolume.Name
	}
	return ""
}

// volumeSnapshotClassOf is KubeVirt's choice of the VolumeSnapshotClass for a storage class:
// the one class of its provisioner's driver, or the default among several; "" when there is
// none (the volume is not snapshotted).
func (s *Site) volumeSnapshotClassOf(ctx context.Context, storageClass string) (string, error) {
	sc := &storagev1.StorageClass{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: storageClass}, sc); apierrors.IsNotFound(err) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	list := &snapshotv1.VolumeSnapshotClassList{}
	if err := s.client.List(ctx, list); err != nil {
		return "", err
	}
	var matches []snapshotv1.VolumeSnapshotClass
	for _, c := range list.Items {
		if c.Driver == sc.Provisioner {
			matches = append(matches, c)
		}
	}
	if len(matches) == 1 {
		return matches[0].Name, nil
	}
	for _, c := range matches {
		if c.Annotations[annDefaultSnapshotClass] == "true" {
			return c.Name, nil
		}
	}
	if len(matches) > 1 {
		return "", fmt.Errorf("%d matching VolumeSnapshotClasses for %s", len(matches), storageClass)
	}
	return "", nil
}

// progressContent is KubeVirt's content controller: it freezes the guest once, before the
// first volume snapshot is created, creates the volumes' snapshots, follows them, and thaws
// the guest once every one has its creation time. It returns when to look again.
func (s *Site) progressContent(ctx context.Context, vms *snapv1.VirtualMachineSnapshot, content *snapv1.VirtualMachineSnapshotContent,
	vmi *virtv1.VirtualMachineInstance) (time.Duration, error) {
	next := content.DeepCopy()
	if next.Status == nil {
		next.Status = &snapv1.VirtualMachineSnapshotContentStatus{}
	}
	created := next.Status.CreationTime != nil
	var statuses []snapv1.VolumeSnapshotStatus
	var missing []string
	froze := false
	for _, b := range content.Spec.VolumeBackups {
		name := ptr.Deref(b.VolumeSnapshotName, "")
		if name == "" {
			continue
		}
		vs := &snapshotv1.VolumeSnapshot{}
		err := s.client.Get(ctx, types.NamespacedName{Namespace: content.Namespace, Name: name}, vs)
		switch {
		case apierrors.IsNotFound(err) && created:
			s.recorder.Eventf(content, corev1.EventTypeWarning, "VolumeSnapshotMissing", "VolumeSnapshot %s no longer exists", name)
			missing = append(missing, name)
			continue
		case apierrors.IsNotFound(err):
			if !froze {
				failed, err := s.freeze(ctx, vmi)
				if err != nil {
					return 0, err
				}
				if failed != nil {
					next.Status.Error = &snapv1.Error{Time: ptr.To(metav1.Now()), Message: ptr.To(failed.Error())}
					next.Status.ReadyToUse = ptr.To(false)
					return freezeRetry, s.writeContentStatus(ctx, content, next)
				}
				froze = true
			}
			if vs, err = s.createVolumeSnapshot(ctx, content, b); err != nil {
				return 0, err
			}
		case err != nil:
			return 0, err
		}
		st := snapv1.VolumeSnapshotStatus{VolumeSnapshotName: vs.Name}
		if vs.Status != nil {
			st.ReadyToUse, st.CreationTime = vs.Status.ReadyToUse, vs.Status.CreationTime
			if e := vs.Status.Error; e != nil {
				st.Error = &snapv1.Error{Message: e.Message, Time: e.Time}
			}
		}
		statuses = append(statuses, st)
	}
	allCreated, ready, message := true, true, ""
	if len(missing) > 0 {
		allCreated, ready = false, false
		message = fmt.Sprintf("VolumeSnapshots (%s) missing", strings.Join(missing, ","))
	}
	for _, st := range statuses {
		if st.CreationTime == nil {
			allCreated = false
		}
		if !ptr.Deref(st.ReadyToUse, false) {
			ready = false
		}
		if message == "" && st.Error != nil && st.Error.Message != nil {
			message = fmt.Sprintf("VolumeSnapshot %s error: %s", st.VolumeSnapshotName, *st.Error.Message)
		}
	}
	if allCreated && next.Status.CreationTime == nil {
		// A thaw that fails is retried before the content records its creation: the snapshot
		// stays InProgress until it is thawed, or until its failure deadline.
		if err := s.thaw(ctx, vmi); err != nil {
			return 0, err
		}
		next.Status.CreationTime = ptr.To(metav1.Now())
	}
	switch {
	case message != "" && !ready:
		if next.Status.Error == nil || ptr.Deref(next.Status.Error.Message, "") != message {
			next.Status.Error = &snapv1.Error{Time: ptr.To(metav1.Now()), Message: ptr.To(message)}
		}
	case message == "":
		next.Status.Error = nil
	}
	next.Status.ReadyToUse = ptr.To(ready)
	next.Status.VolumeSnapshotStatus = statuses
	return 0, s.writeContentStatus(ctx, content, next)
}

func (s *Site) writeContentStatus(ctx context.Context, content, next *snapv1.VirtualMachineSnapshotContent) error {
	if equality.Semantic.DeepEqual(content.Status, next.Status) {
		return nil
	}
	if err := s.client.Status().Patch(ctx, next, client.MergeFromWithOptions(content, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("writing the status of VirtualMachineSnapshotContent %s/%s: %w", content.Namespace, content.Name, ignoreGone(err))
	}
	*content = *next
	return nil
}

// createVolumeSnapshot is KubeVirt's VolumeSnapshot of one volume, controlled by the content;
// the site's snapshot controller then copies the claim's file.
func (s *Site) createVolumeSnapshot(ctx context.Context, content *snapv1.VirtualMachineSnapshotContent, b snapv1.VolumeBackup) (*snapshotv1.VolumeSnapshot, error) {
	class, err := s.volumeSnapshotClassOf(ctx, ptr.Deref(b.PersistentVolumeClaim.Spec.StorageClassName, ""))
	if err != nil {
		return nil, err
	}
	if class == "" {
		return nil, fmt.Errorf("no VolumeSnapshotClass for the claim %s of volume %s", b.PersistentVolumeClaim.Name, b.VolumeName)
	}
	vm := content.Spec.Source.VirtualMachine
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Name: *b.VolumeSnapshotName, Namespace: content.Namespace,
			Labels: map[string]string{snapshotSourceNameLabel: vm.Name, snapshotSourceNSLabel: vm.Namespace},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: snapv1.SchemeGroupVersion.String(), Kind: "VirtualMachineSnapshotContent",
				Name: content.Name, UID: content.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: snapshotv1.VolumeSnapshotSpec{
			Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(b.PersistentVolumeClaim.Name)},
			VolumeSnapshotClassName: ptr.To(class),
		},
	}
	if err := s.client.Create(ctx, vs); err != nil {
		return nil, fmt.Errorf("creating VolumeSnapshot %s/%s: %w", vs.Namespace, vs.Name, err)
	}
	s.recorder.Eventf(content, corev1.EventTypeNormal, "SuccessfulVolumeSnapshotCreate", "Successfully created VolumeSnapshot %s", vs.Name)
	return vs, nil
}

// agentConnected says whether the VMI runs with a guest agent connected.
func agentConnected(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi != nil && vmi.IsRunning() && slices.ContainsFunc(vmi.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool {
		return c.Type == virtv1.VirtualMachineInstanceAgentConnected && c.Status == corev1.ConditionTrue
	})
}

// freeze is virt-handler's freeze through the guest agent; without an agent (or a running
// VMI) there is nothing to freeze, as in KubeVirt, and a guest already frozen is not frozen
// again (KubeVirt's Frozen, from the VMI's fsFreezeStatus). failed is the freeze call's
// failure, which KubeVirt records and retries; err is the site's own trouble writing the VMI.
func (s *Site) freeze(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (failed, err error) {
	if !agentConnected(vmi) || vmi.Status.FSFreezeStatus == frozen {
		return nil, nil
	}
	if err := s.setFreezeStatus(ctx, vmi, frozen); err != nil {
		return nil, err
	}
	if s.opts.FailFreeze != nil && s.opts.FailFreeze(vmi) {
		return fmt.Errorf("%s %s: the site's FailFreeze fault: the guest agent did not answer the freeze in time", failedFreezeMsg, vmi.Name), nil
	}
	return nil, nil
}

// thaw is virt-handler's thaw through the guest agent, which fails, leaving the guest frozen,
// when Options.FailThaw says so.
func (s *Site) thaw(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	if !agentConnected(vmi) || vmi.Status.FSFreezeStatus != frozen {
		return nil
	}
	if s.opts.FailThaw != nil && s.opts.FailThaw(vmi) {
		return fmt.Errorf("unfreezing VirtualMachineInstance %s: the site's FailThaw fault: the guest agent did not thaw the guest", vmi.Name)
	}
	return s.setFreezeStatus(ctx, vmi, "")
}

// setFreezeStatus writes the VMI's fsFreezeStatus on its newest version: the site's VMI
// controller writes the VMI too.
func (s *Site) setFreezeStatus(ctx context.Context, vmi *virtv1.VirtualMachineInstance, status string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live := &virtv1.VirtualMachineInstance{}
		if err := s.mgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(vmi), live); err != nil {
			return ignoreGone(err)
		}
		if err := ignoreGone(s.updateVMI(ctx, live, func(v *virtv1.VirtualMachineInstance) { v.Status.FSFreezeStatus = status })); err != nil {
			return err
		}
		vmi.Status.FSFreezeStatus = status
		return nil
	})
}

// writeVMSnapshotStatus is KubeVirt's status of the snapshot: the content's creation time,
// readiness and error copied; Failed past the failure deadline; Succeeded once created, with
// its included and excluded volumes; InProgress before, with the source's indications.
func (s *Site) writeVMSnapshotStatus(ctx context.Context, vms *snapv1.VirtualMachineSnapshot, content *snapv1.VirtualMachineSnapshotContent,
	vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) error {
	next := vms.DeepCopy()
	st := next.Status
	if st == nil {
		st = &snapv1.VirtualMachineSnapshotStatus{Phase: snapv1.InProgress, ReadyToUse: ptr.To(false)}
		setSnapshotCondition(st, snapv1.ConditionProgressing, corev1.ConditionTrue, "Initializing VirtualMachineSnapshot")
		setSnapshotCondition(st, snapv1.ConditionReady, corev1.ConditionFalse, "Not ready")
		next.Status = st
	}
	if vm != nil && st.SourceUID == nil {
		st.SourceUID = ptr.To(vm.UID)
	}
	if content != nil && content.Status != nil {
		st.VirtualMachineSnapshotContentName = ptr.To(content.Name)
		st.CreationTime, st.ReadyToUse, st.Error = content.Status.CreationTime, content.Status.ReadyToUse, content.Status.Error
	}
	switch {
	case st.Phase == snapv1.Failed || (progressing(vms) && deadlinePassed(vms)):
		st.Phase = snapv1.Failed
		setSnapshotCondition(st, snapv1.ConditionFailure, corev1.ConditionTrue, "snapshot deadline exceeded")
		setSnapshotCondition(st, snapv1.ConditionProgressing, corev1.ConditionFalse, "Operation failed")
	case st.Phase == snapv1.Succeeded || st.CreationTime != nil:
		st.Phase = snapv1.Succeeded
		setSnapshotCondition(st, snapv1.ConditionProgressing, corev1.ConditionFalse, "Operation complete")
		if content != nil {
			st.SnapshotVolumes = snapshotVolumes(content)
		}
	default:
		st.Phase = snapv1.InProgress
		if vm == nil {
			setSnapshotCondition(st, snapv1.ConditionProgressing, corev1.ConditionFalse, "Source does not exist")
			break
		}
		setSnapshotCondition(st, snapv1.ConditionProgressing, corev1.ConditionTrue, "Source locked and operation in progress")
		if vmi != nil && vmi.IsRunning() {
			st.Indications = indications(st, vmi)
		}
	}
	if st.Phase == snapv1.Succeeded && ptr.Deref(st.ReadyToUse, false) {
		setSnapshotCondition(st, snapv1.ConditionReady, corev1.ConditionTrue, "Ready")
	} else {
		setSnapshotCondition(st, snapv1.ConditionReady, corev1.ConditionFalse, "Not ready")
	}
	if st.Error != nil {
		setSnapshotCondition(st, snapv1.ConditionProgressing, corev1.ConditionFalse, "In error state")
	}
	if equality.Semantic.DeepEqual(vms.Status, next.Status) {
		return nil
	}
	if err := ignoreGone(s.client.Status().Patch(ctx, next, client.MergeFromWithOptions(vms, client.MergeFromWithOptimisticLock{}))); err != nil {
		return fmt.Errorf("writing the status of VirtualMachineSnapshot %s/%s: %w", vms.Namespace, vms.Name, err)
	}
	*vms = *next
	return nil
}

// indications are KubeVirt's of a snapshot of a running VM, added to those it has: Online,
// and GuestAgent (with QuiesceFailed once a freeze failed) or NoGuestAgent.
func indications(st *snapv1.VirtualMachineSnapshotStatus, vmi *virtv1.VirtualMachineInstance) []snapv1.Indication {
	out := slices.Clone(st.Indications)
	add := func(i snapv1.Indication) {
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	add(snapv1.VMSnapshotOnlineSnapshotIndication)
	if agentConnected(vmi) {
		add(snapv1.VMSnapshotGuestAgentIndication)
		if st.Error != nil && strings.Contains(ptr.Deref(st.Error.Message, ""), failedFreezeMsg) {
			add(snapv1.VMSnapshotQuiesceFailedIndication)
		}
	} else {
		add(snapv1.VMSnapshotNoGuestAgentIndication)
	}
	slices.Sort(out) // a set, listed in order as KubeVirt's sets.List does
	return out
}

// snapshotVolumes are the VM's volumes in the snapshot and those left out, in the VM's order.
func snapshotVolumes(content *snapv1.VirtualMachineSnapshotContent) *snapv1.SnapshotVolumesLists {
	backed := map[string]bool{}
	for _, b := range content.Spec.VolumeBackups {
		backed[b.VolumeName] = true
	}
	out := &snapv1.SnapshotVolumesLists{}
	if vm := content.Spec.Source.VirtualMachine; vm != nil && vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if backed[v.Name] {
				out.IncludedVolumes = append(out.IncludedVolumes, v.Name)
			} else {
				out.ExcludedVolumes = append(out.ExcludedVolumes, v.Name)
			}
		}
	}
	return out
}

func setSnapshotCondition(st *snapv1.VirtualMachineSnapshotStatus, t snapv1.ConditionType, status corev1.ConditionStatus, reason string) {
	st.Conditions = setKubeVirtCondition(st.Conditions, t, status, reason)
}

// setKubeVirtCondition sets a condition of a snapshot or a restore as KubeVirt does: the
// reason is the message, and the transition time changes with the status.
func setKubeVirtCondition(conds []snapv1.Condition, t snapv1.ConditionType, status corev1.ConditionStatus, reason string) []snapv1.Condition {
	now := metav1.Now()
	for i := range conds {
		if c := &conds[i]; c.Type == t {
			if c.Status != status {
				c.LastTransitionTime = now
			}
			if c.Status != status || c.Reason != reason {
				c.Status, c.Reason, c.LastProbeTime = status, reason, now
			}
			return conds
		}
	}
	return append(conds, snapv1.Condition{Type: t, Status: status, Reason: reason, LastProbeTime: now, LastTransitionTime: now})
}

// deleteVMSnapshot is KubeVirt's deletion of a snapshot: a freeze in progress is thawed, the
// content is deleted (its deletion policy Delete, KubeVirt's default, or not ready yet), and
// with it the volumes' snapshots it controls (the garbage collector's part), before the
// snapshot's finalizer goes.
func (s *Site) deleteVMSnapshot(ctx context.Context, vms *snapv1.VirtualMachineSnapshot, content *snapv1.VirtualMachineSnapshotContent) error {
	if !controllerutil.ContainsFinalizer(vms, vmSnapshotFinalizer) {
		return nil
	}
	if progressing(vms) {
		_, vmi, err := s.snapshotSource(ctx, vms)
		if err != nil {
			return err
		}
		_ = s.thaw(ctx, vmi) // a thaw that fails is only logged by KubeVirt
	}
	retain := ptr.Deref(vms.Spec.DeletionPolicy, snapv1.VirtualMachineSnapshotContentDelete) == snapv1.VirtualMachineSnapshotContentRetain &&
		content != nil && content.Status != nil && ptr.Deref(content.Status.ReadyToUse, false)
	if content != nil && !retain {
		if err := s.deleteVMSnapshotContent(ctx, content); err != nil {
			return err
		}
	}
	before := vms.DeepCopy()
	controllerutil.RemoveFinalizer(vms, vmSnapshotFinalizer)
	return ignoreGone(s.client.Patch(ctx, vms, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

// deleteVMSnapshotContent deletes a content and the volumes' snapshots it controls (the
// garbage collector's part).
func (s *Site) deleteVMSnapshotContent(ctx context.Context, content *snapv1.VirtualMachineSnapshotContent) error {
	for _, b := range content.Spec.VolumeBackups {
		vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: content.Namespace, Name: ptr.Deref(b.VolumeSnapshotName, "")}}
		if vs.Name != "" {
			if err := ignoreGone(s.client.Delete(ctx, vs)); err != nil {
				return fmt.Errorf("deleting VolumeSnapshot %s/%s: %w", vs.Namespace, vs.Name, err)
			}
		}
	}
	before := content.DeepCopy()
	controllerutil.RemoveFinalizer(content, vmSnapshotContentFinalizer)
	if err := ignoreGone(s.client.Patch(ctx, content, client.MergeFrom(before))); err != nil {
		return err
	}
	if err := ignoreGone(s.client.Delete(ctx, content)); err != nil {
		return fmt.Errorf("deleting VirtualMachineSnapshotContent %s/%s: %w", content.Namespace, content.Name, err)
	}
	return nil
}
