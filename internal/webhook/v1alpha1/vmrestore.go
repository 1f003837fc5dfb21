package v1alpha1

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The admission of KubeVirt's VirtualMachineRestores (docs/snapshots.md, "Restore"): every one
// is recorded in the audit trail under the name of who asked, admitted or refused; one of a
// snapshot a VMSnapshotPolicy made is refused unless its target is the VM the snapshot is of,
// stopped, and the snapshot is ready. Only creation is admitted here: KubeVirt's own updates
// of the restore are not held up.

// +kubebuilder:webhook:path=/mutate-snapshot-kubevirt-io-v1beta1-virtualmachinerestore,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=snapshot.kubevirt.io,resources=virtualmachinerestores,verbs=create,versions=v1beta1,name=mvirtualmachinerestore-v1beta1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-snapshot-kubevirt-io-v1beta1-virtualmachinerestore,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=snapshot.kubevirt.io,resources=virtualmachinerestores,verbs=create,versions=v1beta1,name=vvirtualmachinerestore-v1beta1.nodewright.spectrocloud.com,admissionReviewVersions=v1

// restores admits VirtualMachineRestores, reading the API server.
type restores struct {
	client client.Reader
}

func (r *restores) create(ctx context.Context, rs *snapv1.VirtualMachineRestore) (admission.Warnings, error) {
	snap := &snapv1.VirtualMachineSnapshot{}
	err := r.client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: rs.Spec.VirtualMachineSnapshotName}, snap)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil // KubeVirt says what is wrong with it
	case err != nil:
		return nil, fmt.Errorf("reading VirtualMachineSnapshot %s: %w", rs.Spec.VirtualMachineSnapshotName, err)
	}
	policy := snap.Labels[nwv1.LabelSnapshotPolicy]
	if policy == "" {
		return nil, nil // not a policy's snapshot: recorded, KubeVirt's rules alone
	}
	target := field.NewPath("spec", "target")
	vmName := snap.Labels[nwv1.LabelSnapshotVM]
	if rs.Spec.Target.Kind != "VirtualMachine" || rs.Spec.Target.Name != vmName {
		return nil, field.Invalid(target, rs.Spec.Target.Kind+" "+rs.Spec.Target.Name,
			fmt.Sprintf("VMSnapshotPolicy %s's snapshot %s is of VirtualMachine %s: it is restored onto that VM only", policy, snap.Name, vmName))
	}
	vm := &virtv1.VirtualMachine{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: vmName}, vm); apierrors.IsNotFound(err) {
		return nil, field.Invalid(target, vmName, "the VirtualMachine is not there (restoring a deleted VM is not offered)")
	} else if err != nil {
		return nil, fmt.Errorf("reading VirtualMachine %s: %w", vmName, err)
	}
	if uid := snap.Annotations[nwv1.AnnotationSnapshotVMUID]; uid != "" && uid != string(vm.UID) {
		return nil, field.Invalid(target, vmName, fmt.Sprintf("the snapshot %s is of an earlier VirtualMachine of that name (UID %s), not of this one", snap.Name, uid))
	}
	vmi := &virtv1.VirtualMachineInstance{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: vmName}, vmi); err == nil {
		return nil, field.Invalid(target, vmName, fmt.Sprintf("the VirtualMachine runs (its VirtualMachineInstance is %s): stop it first "+
			"(virtctl stop %s -n %s); a restore replaces its disks, and is made with the VM stopped", vmi.Status.Phase, vmName, rs.Namespace))
	} else if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading VirtualMachineInstance %s: %w", vmName, err)
	}
	if st := snap.Status; st == nil || st.Phase != snapv1.Succeeded || !ptr.Deref(st.ReadyToUse, false) {
		phase := "no status"
		if st != nil {
			phase = "phase " + string(st.Phase)
		}
		return nil, field.Invalid(field.NewPath("spec", "virtualMachineSnapshotName"), snap.Name,
			fmt.Sprintf("the snapshot is not ready to restore (%s)", phase))
	}
	return nil, nil
}
