package v1alpha1

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
)

// The admission of KubeVirt's VirtualMachineRestores (docs/snapshots.md, "Restore"): every one
// is recorded in the audit trail under the name of who asked, admitted or refused, and one
// naming a snapshot that does not exist is refused (a policy's snapshot names are
// predictable: a restore made in advance would otherwise run, unchecked, once it exists).
// One of a snapshot a VMSnapshotPolicy made is refused unless its target is the VM the
// snapshot is of (by the UID KubeVirt wrote), stopped, it makes new claims and leaves the
// old ones, it fails rather than waits or stops the VM (targetReadinessPolicy FailImmediate,
// the default given), and the policy judges the snapshot good. So is a restore with a
// VMOperationRequest's labels (the operator's, for a Restore request; the snapshot is judged
// by its policy's rules or the defaults). Only creation is admitted here: KubeVirt's own
// updates of the restore are not held up.

// +kubebuilder:webhook:path=/mutate-snapshot-kubevirt-io-v1beta1-virtualmachinerestore,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=snapshot.kubevirt.io,resources=virtualmachinerestores,verbs=create,versions=v1beta1,name=mvirtualmachinerestore-v1beta1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-snapshot-kubevirt-io-v1beta1-virtualmachinerestore,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=snapshot.kubevirt.io,resources=virtualmachinerestores,verbs=create,versions=v1beta1,name=vvirtualmachinerestore-v1beta1.nodewright.spectrocloud.com,admissionReviewVersions=v1

// restores admits VirtualMachineRestores, reading the API server.
type restores struct {
	client client.Reader
	// clock is the moment a snapshot is judged at.
	clock clock.PassiveClock
}

// snapshot reads the restore's snapshot; nil when there is none.
func (r *restores) snapshot(ctx context.Context, rs *snapv1.VirtualMachineRestore) (*snapv1.VirtualMachineSnapshot, error) {
	if rs.Spec.VirtualMachineSnapshotName == "" {
		return nil, nil
	}
	snap := &snapv1.VirtualMachineSnapshot{}
	err := r.client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Spec.VirtualMachineSnapshotName}, snap)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading VirtualMachineSnapshot %s: %w", rs.Spec.VirtualMachineSnapshotName, err)
	}
	return snap, nil
}

// fromAPolicy reports whether a policy made snap. Either mark is enough, so that removing one
// does not skip the checks.
func fromAPolicy(snap *snapv1.VirtualMachineSnapshot) bool {
	_, label := snap.Labels[nwv1.LabelSnapshotPolicy]
	_, uid := snap.Annotations[nwv1.AnnotationSnapshotPolicyUID]
	return label || uid
}

// defaults sets spec.targetReadinessPolicy FailImmediate on a restore of a policy's snapshot
// that leaves it unset: a VM started before the restore is done fails it. A restore the
// validator refuses is left as it is.
func (r *restores) defaults(ctx context.Context, rs *snapv1.VirtualMachineRestore) ([]fieldDefault, error) {
	if rs.Spec.TargetReadinessPolicy != nil {
		return nil, nil
	}
	snap, err := r.snapshot(ctx, rs)
	if err != nil || snap == nil || (!fromAPolicy(snap) && !byARequest(rs)) {
		return nil, err
	}
	v := string(snapv1.VirtualMachineRestoreFailImmediate)
	return []fieldDefault{{field: "spec.targetReadinessPolicy", pointer: "/spec/targetReadinessPolicy", value: v, text: v}}, nil
}

func (r *restores) create(ctx context.Context, rs *snapv1.VirtualMachineRestore) (admission.Warnings, error) {
	snapPath := field.NewPath("spec", "virtualMachineSnapshotName")
	snap, err := r.snapshot(ctx, rs)
	if err != nil {
		return nil, err
	}
	if snap == nil {
		return nil, field.Invalid(snapPath, rs.Spec.VirtualMachineSnapshotName, fmt.Sprintf("no VirtualMachineSnapshot of that name in namespace %s: "+
			"a restore names a snapshot that exists", rs.Namespace))
	}
	if !fromAPolicy(snap) && !byARequest(rs) {
		return nil, nil // not a policy's snapshot, nor a request's restore: recorded, KubeVirt's rules alone
	}
	by := "no VMSnapshotPolicy; restored by a VMOperationRequest"
	if fromAPolicy(snap) {
		by = madeBy(snap)
	}
	// The VM is the snapshot's source, which KubeVirt does not let change, never its labels.
	src := snap.Spec.Source
	if ptr.Deref(src.APIGroup, "") != virtv1.GroupVersion.Group || src.Kind != "VirtualMachine" || src.Name == "" {
		return nil, field.Invalid(snapPath, snap.Name, fmt.Sprintf("the snapshot (made by %s) is of %s %s (apiGroup %q), not of a VirtualMachine",
			by, src.Kind, src.Name, ptr.Deref(src.APIGroup, "")))
	}
	if err := restoreSpecErrors(rs, snap, by).ToAggregate(); err != nil {
		return nil, err
	}
	target := field.NewPath("spec", "target")
	vm := &virtv1.VirtualMachine{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: src.Name}, vm); apierrors.IsNotFound(err) {
		return nil, field.Invalid(target, src.Name, "the VirtualMachine is not there (restoring a deleted VM is not offered)")
	} else if err != nil {
		return nil, fmt.Errorf("reading VirtualMachine %s: %w", src.Name, err)
	}
	switch st := snap.Status; {
	case st == nil || st.SourceUID == nil || *st.SourceUID == "":
		return nil, field.Invalid(snapPath, snap.Name, "KubeVirt has not written which VirtualMachine the snapshot is of (status.sourceUID)")
	case *st.SourceUID != vm.UID:
		return nil, field.Invalid(target, src.Name, fmt.Sprintf("the snapshot %s is of an earlier VirtualMachine of that name (UID %s), not of this one", snap.Name, *st.SourceUID))
	}
	vmi := &virtv1.VirtualMachineInstance{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: src.Name}, vmi); err == nil {
		return nil, field.Invalid(target, src.Name, fmt.Sprintf("the VirtualMachine runs (its VirtualMachineInstance is %s): stop it first "+
			"(virtctl stop %s -n %s); a restore replaces its disks, and is made with the VM stopped", vmi.Status.Phase, src.Name, rs.Namespace))
	} else if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading VirtualMachineInstance %s: %w", src.Name, err)
	}
	m, policy, err := r.judged(ctx, snap)
	if err != nil {
		return nil, err
	}
	if m.State != vmsnapshot.Good {
		judged := "no VMSnapshotPolicy of the namespace has its label and UID: judged by the defaults (consistency GuestAgent, failureDeadline 10m), it is"
		if policy != nil {
			judged = "VMSnapshotPolicy " + policy.Name + " judges it"
		}
		return nil, field.Invalid(snapPath, snap.Name, fmt.Sprintf("%s %s, not Good (%s): only a good snapshot is restored", judged, m.State, m.Reason))
	}
	return nil, nil
}

// byARequest reports whether rs carries a VMOperationRequest's labels: the operator's restores
// (the chart's nodewright-operator-vm-restores policy holds it to them), and any other that
// claims to be one, held to the same checks as a policy's snapshot's.
func byARequest(rs *snapv1.VirtualMachineRestore) bool {
	_, uid := rs.Labels[nwv1.LabelVMOperationRequestUID]
	_, name := rs.Labels[nwv1.LabelVMOperationRequest]
	return uid || name
}

// madeBy names the policy that made snap for a message: by its label, else by its UID.
func madeBy(snap *snapv1.VirtualMachineSnapshot) string {
	if name := snap.Labels[nwv1.LabelSnapshotPolicy]; name != "" {
		return "VMSnapshotPolicy " + name
	}
	return "the VMSnapshotPolicy of UID " + snap.Annotations[nwv1.AnnotationSnapshotPolicyUID]
}

// restoreSpecErrors is what a restore of snap, a snapshot of a policy by, may not ask: another
// target than the snapshot's VM; claims restored in place (KubeVirt deletes the VM's current
// ones, and the restore leaves the old claims in place); volumes restored otherwise than
// snapshotted; patches; and any targetReadinessPolicy but FailImmediate (StopTarget stops a
// VM someone started, WaitGracePeriod and WaitEventually restore later, whenever it stops).
func restoreSpecErrors(rs *snapv1.VirtualMachineRestore, snap *snapv1.VirtualMachineSnapshot, by string) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	t := rs.Spec.Target
	switch {
	case t.APIGroup == nil:
		errs = append(errs, field.Required(spec.Child("target", "apiGroup"), "a restore of a policy's snapshot targets a VirtualMachine of "+virtv1.GroupVersion.Group))
	case *t.APIGroup != virtv1.GroupVersion.Group:
		errs = append(errs, field.Invalid(spec.Child("target", "apiGroup"), *t.APIGroup, "a restore of a policy's snapshot targets a VirtualMachine of "+virtv1.GroupVersion.Group))
	case t.Kind != "VirtualMachine" || t.Name != snap.Spec.Source.Name:
		errs = append(errs, field.Invalid(spec.Child("target"), t.Kind+" "+t.Name,
			fmt.Sprintf("the snapshot %s (made by %s) is of VirtualMachine %s: it is restored onto that VM only", snap.Name, by, snap.Spec.Source.Name)))
	}
	if p := rs.Spec.VolumeRestorePolicy; p != nil && *p == snapv1.VolumeRestorePolicyInPlace {
		errs = append(errs, field.Invalid(spec.Child("volumeRestorePolicy"), string(*p),
			"KubeVirt would delete the VM's current claims: a restore of a policy's snapshot makes new claims and leaves the old ones in place"))
	}
	if len(rs.Spec.VolumeRestoreOverrides) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("volumeRestoreOverrides"), "a restore of a policy's snapshot restores each volume as it was snapshotted"))
	}
	if len(rs.Spec.Patches) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("patches"), "a restore of a policy's snapshot restores the VM as it was snapshotted"))
	}
	readiness := spec.Child("targetReadinessPolicy")
	why := "a restore of a policy's snapshot is made with the VM stopped and fails if it is started: " +
		"StopTarget would stop a VM someone started, WaitGracePeriod and WaitEventually would restore it later, whenever it stops"
	switch p := rs.Spec.TargetReadinessPolicy; {
	case p == nil:
		errs = append(errs, field.Required(readiness, "must be FailImmediate: "+why))
	case *p != snapv1.VirtualMachineRestoreFailImmediate:
		errs = append(errs, field.Invalid(readiness, string(*p), "must be FailImmediate: "+why))
	}
	return errs
}

// judged is snap as its policy judges it now (vmsnapshot.JudgeStored); the policy is nil when
// it is gone. A gone policy's snapshot is judged all the same, by the defaults (GuestAgent,
// 10m): the restore is held to what a policy asks by default, never admitted unjudged.
func (r *restores) judged(ctx context.Context, snap *snapv1.VirtualMachineSnapshot) (vmsnapshot.Made, *nwv1.VMSnapshotPolicy, error) {
	now := time.Now()
	if r.clock != nil {
		now = r.clock.Now()
	}
	return vmsnapshot.JudgeStored(ctx, r.client, snap, now)
}
