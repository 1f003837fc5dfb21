package selfservice

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
)

// Refusal is a reason a request cannot be done, naming the field: the webhook refuses the
// request with it, the controller marks the request Refused. Other errors are the API
// server's, and tried again.
type Refusal struct{ Message string }

func (r Refusal) Error() string { return r.Message }

// Subject reads what r is about and refuses what it cannot be done with: the VM must exist;
// a Restore's snapshot must be of that VM (its spec.source, and the UID KubeVirt wrote), and
// judged good by the rules of the VMSnapshotPolicy that made it (the defaults, GuestAgent and
// 10m, for a snapshot no policy made); a Restart's VM must run (have a
// VirtualMachineInstance). The VM is returned, and for a
// Restore the snapshot.
func Subject(ctx context.Context, c client.Reader, r *nwv1.VMOperationRequest, now time.Time) (*virtv1.VirtualMachine, *snapv1.VirtualMachineSnapshot, error) {
	vm := &virtv1.VirtualMachine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Spec.VM}, vm); apierrors.IsNotFound(err) {
		return nil, nil, Refusal{fmt.Sprintf("spec.vm: there is no VirtualMachine %s in namespace %s", r.Spec.VM, r.Namespace)}
	} else if err != nil {
		return nil, nil, fmt.Errorf("reading VirtualMachine %s: %w", r.Spec.VM, err)
	}
	strategy, err := vm.RunStrategy()
	if err != nil {
		return nil, nil, Refusal{fmt.Sprintf("spec.vm: VirtualMachine %s: %v", vm.Name, err)}
	}
	switch r.Spec.Operation {
	case nwv1.VMRestart:
		if strategy != virtv1.RunStrategyAlways && strategy != virtv1.RunStrategyRerunOnFailure {
			return nil, nil, Refusal{fmt.Sprintf("spec.vm: VirtualMachine %s has run strategy %s: a restart stops it and gives the strategy back, which starts only a VM whose strategy is Always or RerunOnFailure", vm.Name, strategy)}
		}
		if vm.DeletionTimestamp != nil {
			return nil, nil, Refusal{fmt.Sprintf("spec.vm: VirtualMachine %s is being deleted", vm.Name)}
		}
		vmi := &virtv1.VirtualMachineInstance{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vmi); apierrors.IsNotFound(err) {
			return nil, nil, Refusal{fmt.Sprintf("spec.vm: VirtualMachine %s is not running: a restart starts a VM that runs again (start it with virtctl start)", vm.Name)}
		} else if err != nil {
			return nil, nil, fmt.Errorf("reading VirtualMachineInstance %s: %w", vm.Name, err)
		}
	case nwv1.VMRestore:
		if strategy == virtv1.RunStrategyManual || strategy == virtv1.RunStrategyOnce {
			vmi := &virtv1.VirtualMachineInstance{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err == nil {
				return nil, nil, Refusal{fmt.Sprintf("spec.vm: VirtualMachine %s runs with run strategy %s, which would not start it again after the restore: stop it first (virtctl stop)", vm.Name, strategy)}
			} else if !apierrors.IsNotFound(err) {
				return nil, nil, fmt.Errorf("reading VirtualMachineInstance %s: %w", vm.Name, err)
			}
		}
		snap, err := restorable(ctx, c, r, vm, now)
		return vm, snap, err
	case nwv1.VMMigrateVolume:
		if vol := migration.VolumeOf(vm, r.Spec.Params.Volume); vol == nil || migration.ClaimOf(vol.VolumeSource) == "" {
			return nil, nil, Refusal{fmt.Sprintf("spec.params.volume: VirtualMachine %s has no volume %q on a claim (PersistentVolumeClaim or DataVolume)", vm.Name, r.Spec.Params.Volume)}
		}
	}
	return vm, nil, nil
}

// restorable reads the Restore's snapshot and refuses one that is not a good snapshot of vm.
func restorable(ctx context.Context, c client.Reader, r *nwv1.VMOperationRequest, vm *virtv1.VirtualMachine, now time.Time) (*snapv1.VirtualMachineSnapshot, error) {
	name := r.Spec.Params.Snapshot
	snap := &snapv1.VirtualMachineSnapshot{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, snap); apierrors.IsNotFound(err) {
		return nil, Refusal{fmt.Sprintf("spec.params.snapshot: there is no VirtualMachineSnapshot %s in namespace %s", name, r.Namespace)}
	} else if err != nil {
		return nil, fmt.Errorf("reading VirtualMachineSnapshot %s: %w", name, err)
	}
	src := snap.Spec.Source
	if ptr.Deref(src.APIGroup, "") != virtv1.GroupVersion.Group || src.Kind != "VirtualMachine" || src.Name != vm.Name {
		return nil, Refusal{fmt.Sprintf("spec.params.snapshot: %s is a snapshot of %s %s, not of VirtualMachine %s: a VM is restored from its own snapshots only",
			name, src.Kind, src.Name, vm.Name)}
	}
	if st := snap.Status; st == nil || ptr.Deref(st.SourceUID, "") != vm.UID {
		return nil, Refusal{fmt.Sprintf("spec.params.snapshot: %s is not of this VirtualMachine %s (UID %s): KubeVirt has not written its status.sourceUID, or it names an earlier VM of that name",
			name, vm.Name, vm.UID)}
	}
	m, policy, err := vmsnapshot.JudgeStored(ctx, c, snap, now)
	if err != nil {
		return nil, err
	}
	if m.State != vmsnapshot.Good {
		by := "the defaults (consistency GuestAgent, failureDeadline 10m; no VMSnapshotPolicy made it)"
		if policy != nil {
			by = "VMSnapshotPolicy " + policy.Name
		}
		return nil, Refusal{fmt.Sprintf("spec.params.snapshot: %s is %s, not Good, by %s (%s): only a good snapshot is restored", name, m.State, by, m.Reason)}
	}
	return snap, nil
}
