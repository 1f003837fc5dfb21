package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestARestoreIsAuditedAndMadeWithTheVMStopped: a VirtualMachineRestore of a policy's snapshot
// is refused while its VM runs, onto another VM, and from a snapshot not ready; admitted once
// the VM is stopped, stamped with who asked. Every decision is in the audit trail under the
// name of who asked, a restore of another snapshot's too.
func TestARestoreIsAuditedAndMadeWithTheVMStopped(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyHalted), Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	snapshot := func(name string, policy bool, phase snapv1.VirtualMachineSnapshotPhase) {
		s := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: snapv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "web"}}}
		if policy {
			s.Labels = map[string]string{nwv1.LabelSnapshotPolicy: "nightly", nwv1.LabelSnapshotVM: "web"}
			s.Annotations = map[string]string{nwv1.AnnotationSnapshotVMUID: string(vm.UID)}
		}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		s.Status = &snapv1.VirtualMachineSnapshotStatus{Phase: phase, ReadyToUse: ptr.To(phase == snapv1.Succeeded)}
		if err := env.Client.Status().Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	snapshot("nightly-web-1", true, snapv1.Succeeded)
	snapshot("nightly-web-2", true, snapv1.InProgress)
	snapshot("by-hand", false, snapv1.Succeeded)
	restore := func(name, target, from string) *snapv1.VirtualMachineRestore {
		return &snapv1.VirtualMachineRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: snapv1.VirtualMachineRestoreSpec{VirtualMachineSnapshotName: from,
				Target: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: target}}}
	}

	// The VM runs: refused.
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	refused(t, as(t, "alice").Create(ctx, restore("while-running", "web", "nightly-web-1")),
		"spec.target: Invalid value: \"web\": the VirtualMachine runs")
	if err := env.Client.Delete(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	refused(t, as(t, "alice").Create(ctx, restore("elsewhere", "db", "nightly-web-1")),
		"nightly-web-1 is of VirtualMachine web: it is restored onto that VM only")
	refused(t, as(t, "alice").Create(ctx, restore("not-ready", "web", "nightly-web-2")),
		"spec.virtualMachineSnapshotName: Invalid value: \"nightly-web-2\": the snapshot is not ready to restore (phase InProgress)")

	good := restore("back", "web", "nightly-web-1")
	if err := as(t, "alice").Create(ctx, good); err != nil {
		t.Fatalf("a restore of a stopped VM was refused: %v", err)
	}
	if by := good.Annotations[nwv1.AnnotationRequestedBy]; by != "alice" {
		t.Errorf("requested-by is %q, want alice", by)
	}
	if err := as(t, "bob").Create(ctx, restore("by-hand", "web", "by-hand")); err != nil {
		t.Fatalf("a restore of a snapshot no policy made was refused: %v", err)
	}

	want := map[string]string{"while-running": "alice Refused", "elsewhere": "alice Refused", "not-ready": "alice Refused",
		"back": "alice Admitted", "by-hand": "bob Admitted"}
	eventually(t, "the restores' admission records", func() bool {
		for name, w := range want {
			for _, r := range trailRecords(t, ns, name) {
				if r.Subject.Kind == "VirtualMachineRestore" && r.Actor+" "+r.To == w && (r.To != "Refused" || strings.HasPrefix(r.Message, "spec.")) {
					delete(want, name)
				}
			}
		}
		return len(want) == 0
	})
}
