package vmsnapshot

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// JudgeStored judges snap at now by its policy's rules (JudgedBy), with the content named in
// its status, reading both through r. Its policy is the one that made it; for a snapshot a
// VMOperationRequest made (SnapshotNow), the first by name of the namespace's policies that
// select its VM (SelectsVM). The policy is nil when there is none (gone, or the snapshot is no
// policy's). Such a snapshot is judged all the same, by the defaults (GuestAgent, 10m): never
// taken as good unjudged.
func JudgeStored(ctx context.Context, r client.Reader, snap *snapv1.VirtualMachineSnapshot, now time.Time) (Made, *nwv1.VMSnapshotPolicy, error) {
	var policies nwv1.VMSnapshotPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(snap.Namespace)); err != nil {
		return Made{}, nil, fmt.Errorf("reading the VMSnapshotPolicies: %w", err)
	}
	policy := PolicyOf(snap, policies.Items)
	if _, byRequest := snap.Labels[nwv1.LabelVMOperationRequest]; policy == nil && byRequest {
		vm := &virtv1.VirtualMachine{}
		err := r.Get(ctx, client.ObjectKey{Namespace: snap.Namespace, Name: snap.Spec.Source.Name}, vm)
		switch {
		case err == nil:
			policy = PolicyOfVM(vm, policies.Items)
		case !apierrors.IsNotFound(err):
			return Made{}, nil, fmt.Errorf("reading VirtualMachine %s: %w", snap.Spec.Source.Name, err)
		}
	}
	var content *snapv1.VirtualMachineSnapshotContent
	var name *string
	if snap.Status != nil {
		name = snap.Status.VirtualMachineSnapshotContentName
	}
	if name != nil && *name != "" {
		got := &snapv1.VirtualMachineSnapshotContent{}
		err := r.Get(ctx, client.ObjectKey{Namespace: snap.Namespace, Name: *name}, got)
		switch {
		case err == nil:
			content = got
		case !apierrors.IsNotFound(err):
			return Made{}, nil, fmt.Errorf("reading VirtualMachineSnapshotContent %s: %w", *name, err)
		}
	}
	return JudgedBy(policy, snap, content, now), policy, nil
}

// SelectsVM reports whether p selects vm: by name when it names VMs, and by its labels.
func SelectsVM(p *nwv1.VMSnapshotPolicy, vm *virtv1.VirtualMachine) bool {
	s := p.Spec.VMSelector
	if p.Namespace != vm.Namespace || (len(s.Names) > 0 && !slices.Contains(s.Names, vm.Name)) {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: s.MatchLabels, MatchExpressions: s.MatchExpressions})
	return err == nil && sel.Matches(labels.Set(vm.Labels))
}

// PolicyOfVM is the first by name of policies that selects vm; nil when none does.
func PolicyOfVM(vm *virtv1.VirtualMachine, policies []nwv1.VMSnapshotPolicy) *nwv1.VMSnapshotPolicy {
	var found []*nwv1.VMSnapshotPolicy
	for i := range policies {
		if SelectsVM(&policies[i], vm) {
			found = append(found, &policies[i])
		}
	}
	if len(found) == 0 {
		return nil
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	return found[0]
}
