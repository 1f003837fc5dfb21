package operatorrestriction_test

import (
	"context"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// restore is a restore of VM web as a Restore request makes one
// (internal/controller/vmoperationrequest), with change applied.
func (s *site) restore(name string, change func(*snapv1.VirtualMachineRestore)) *snapv1.VirtualMachineRestore {
	r := &snapv1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.vms, Name: name, Labels: map[string]string{
			nwv1.LabelVMOperationRequest: "back", nwv1.LabelVMOperationRequestUID: "6a1f0c9e-2b7d-4e35-8c41-9d0e3f5a7b12"}},
		Spec: snapv1.VirtualMachineRestoreSpec{
			Target:                     corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "web"},
			VirtualMachineSnapshotName: "web-nightly",
			TargetReadinessPolicy:      ptr.To(snapv1.VirtualMachineRestoreFailImmediate),
		},
	}
	if change != nil {
		change(r)
	}
	return r
}

// TestOperatorRestoresOnlyAsARequestDoes: as the operator's ServiceAccount, a restore as a
// Restore request makes one is admitted (dry run: no restore webhook runs here); one that would
// patch the restored VM (a host disk), override its volumes, restore in place, stop a VM someone
// runs, or carry no request's labels is refused, the message naming the field; RBAC refuses
// changing or deleting one, and with RBAC widened the policy still does.
func TestOperatorRestoresOnlyAsARequestDoes(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	if err := s.operator.Create(ctx, s.restore("back", nil)); err != nil {
		t.Fatalf("the operator creates a restore as a request does: %v", err)
	}
	refusals := []struct {
		name   string
		change func(*snapv1.VirtualMachineRestore)
		rule   string
	}{
		{"a host disk patched in", func(r *snapv1.VirtualMachineRestore) {
			r.Spec.Patches = []string{`{"op":"add","path":"/spec/template/spec/volumes/-","value":{"name":"host","hostDisk":{"path":"/","type":"Disk"}}}`}
		}, "spec.patches must not be set"},
		{"a volume overridden", func(r *snapv1.VirtualMachineRestore) {
			r.Spec.VolumeRestoreOverrides = []snapv1.VolumeRestoreOverride{{VolumeName: "root", RestoreName: "elsewhere"}}
		}, "spec.volumeRestoreOverrides must not be set"},
		{"an in-place restore", func(r *snapv1.VirtualMachineRestore) {
			r.Spec.VolumeRestorePolicy = ptr.To(snapv1.VolumeRestorePolicyInPlace)
		}, "spec.volumeRestorePolicy and spec.volumeOwnershipPolicy must not be set"},
		{"a VM someone runs stopped", func(r *snapv1.VirtualMachineRestore) {
			r.Spec.TargetReadinessPolicy = ptr.To(snapv1.VirtualMachineRestoreStopTarget)
		}, "spec.targetReadinessPolicy must be FailImmediate"},
		{"no request's labels", func(r *snapv1.VirtualMachineRestore) { r.Labels = nil },
			"metadata.labels[nodewright.spectrocloud.com/vm-operation-request-uid] must be set"},
		{"another kind of target", func(r *snapv1.VirtualMachineRestore) { r.Spec.Target.APIGroup = ptr.To("pool.kubevirt.io") },
			"spec.target must be a kubevirt.io VirtualMachine"},
	}
	for i, r := range refusals {
		wantPolicyRefusal(t, "a restore with "+r.name, s.operator.Create(ctx, s.restore(fmt.Sprintf("refused-%d", i), r.change)), restoresPolicy, r.rule)
	}

	rs := &snapv1.VirtualMachineRestore{}
	if err := s.operator.Get(ctx, client.ObjectKey{Namespace: s.vms, Name: "back"}, rs); err != nil {
		t.Fatal(err)
	}
	wantRBACRefusal(t, "deleting a restore", s.operator.Delete(ctx, rs.DeepCopy()), "delete", "virtualmachinerestores")
	s.grant(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"snapshot.kubevirt.io"}, Resources: []string{"virtualmachinerestores"}, Verbs: []string{"update", "delete"}},
	}, authorizationv1.ResourceAttributes{Namespace: s.vms, Verb: "delete", Group: "snapshot.kubevirt.io", Resource: "virtualmachinerestores"})
	rs.Spec.VirtualMachineSnapshotName = "another"
	const rule = "the operator only creates VirtualMachineRestores; it changes and deletes none: refused "
	wantPolicyRefusal(t, "changing a restore", s.operator.Update(ctx, rs), restoresPolicy, rule+"UPDATE of virtualmachinerestores")
	wantPolicyRefusal(t, "deleting a restore", s.operator.Delete(ctx, rs), restoresPolicy, rule+"DELETE of virtualmachinerestores")
}
