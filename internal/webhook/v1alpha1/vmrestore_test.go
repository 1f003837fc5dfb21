package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestARestoreIsAuditedAndMadeWithTheVMStopped: a VirtualMachineRestore of a policy's snapshot
// is refused while its VM runs, onto another VM or one not of kubevirt.io, from a snapshot of
// an earlier VM of the name (by the UID KubeVirt wrote), from one its policy does not judge
// good (one not ready, one lacking a volume, and, judged by the defaults, one whose policy
// label was removed), in place, with overrides or patches, and with a targetReadinessPolicy
// other than FailImmediate; one naming a snapshot that does not exist is refused whatever it
// is. A restore of a stopped VM is admitted, stamped with who asked and given FailImmediate.
// Every decision is in the audit trail under the name of who asked and the restore's own
// apiVersion, a restore of another snapshot's too.
func TestARestoreIsAuditedAndMadeWithTheVMStopped(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyHalted), Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	// The policy selects no VM and is suspended: it makes and deletes nothing here.
	policy := &nwv1.VMSnapshotPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: nwv1.VMSnapshotPolicySpec{
			VMSelector: nwv1.VMSelector{MatchLabels: map[string]string{"backup": "nightly"}},
			Schedule:   nwv1.SnapshotSchedule{Cron: "30 2 * * *"},
			Retention:  nwv1.SnapshotRetention{KeepLast: 3},
			Suspend:    true,
		}}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	// snapshot makes a good snapshot of the policy's, of web, with its content, then edited.
	snapshot := func(name string, edit func(*snapv1.VirtualMachineSnapshot)) {
		t.Helper()
		content := &snapv1.VirtualMachineSnapshotContent{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "content-" + name},
			Spec: snapv1.VirtualMachineSnapshotContentSpec{VirtualMachineSnapshotName: ptr.To(name)}}
		if err := env.Client.Create(ctx, content); err != nil {
			t.Fatal(err)
		}
		content.Status = &snapv1.VirtualMachineSnapshotContentStatus{ReadyToUse: ptr.To(true),
			VolumeSnapshotStatus: []snapv1.VolumeSnapshotStatus{{VolumeSnapshotName: "vs-" + name, ReadyToUse: ptr.To(true)}}}
		if err := env.Client.Status().Update(ctx, content); err != nil {
			t.Fatal(err)
		}
		s := &snapv1.VirtualMachineSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Labels: map[string]string{nwv1.LabelSnapshotPolicy: "nightly", nwv1.LabelSnapshotVM: "web"},
				Annotations: map[string]string{nwv1.AnnotationSnapshotPolicyUID: string(policy.UID), nwv1.AnnotationSnapshotVMUID: string(vm.UID),
					nwv1.AnnotationSnapshotVolumes: "root"}},
			Spec: snapv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "web"}},
			Status: &snapv1.VirtualMachineSnapshotStatus{Phase: snapv1.Succeeded, ReadyToUse: ptr.To(true), SourceUID: ptr.To(vm.UID),
				VirtualMachineSnapshotContentName: ptr.To(content.Name),
				Indications:                       []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotGuestAgentIndication},
				SnapshotVolumes:                   &snapv1.SnapshotVolumesLists{IncludedVolumes: []string{"root"}}},
		}
		if edit != nil {
			edit(s)
		}
		st := s.Status
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		s.Status = st
		if err := env.Client.Status().Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	snapshot("nightly-web-1", nil)
	snapshot("nightly-web-2", func(s *snapv1.VirtualMachineSnapshot) {
		s.Status.Phase, s.Status.ReadyToUse = snapv1.InProgress, ptr.To(false)
	})
	snapshot("of-earlier-web", func(s *snapv1.VirtualMachineSnapshot) { s.Status.SourceUID = ptr.To(types.UID("an-earlier-web")) })
	// Succeeded and readyToUse, but without the data volume the policy expected.
	snapshot("without-data", func(s *snapv1.VirtualMachineSnapshot) { s.Annotations[nwv1.AnnotationSnapshotVolumes] = "root,data" })
	// Its policy label removed: no policy matches it, yet it is checked, by the defaults
	// (GuestAgent, which a snapshot without the guest agent's freeze does not meet).
	snapshot("unlabelled", func(s *snapv1.VirtualMachineSnapshot) {
		delete(s.Labels, nwv1.LabelSnapshotPolicy)
		s.Status.Indications = []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotNoGuestAgentIndication}
	})
	snapshot("by-hand", func(s *snapv1.VirtualMachineSnapshot) { s.Labels, s.Annotations = nil, nil })
	restore := func(name, target, from string, edit ...func(*snapv1.VirtualMachineRestore)) *snapv1.VirtualMachineRestore {
		r := &snapv1.VirtualMachineRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: snapv1.VirtualMachineRestoreSpec{VirtualMachineSnapshotName: from,
				Target: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: target}}}
		for _, e := range edit {
			e(r)
		}
		return r
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

	want := map[string]string{}
	for _, c := range []struct {
		name, target, from, want string
		edit                     func(*snapv1.VirtualMachineRestore)
	}{
		{"elsewhere", "db", "nightly-web-1", "nightly-web-1 (made by VMSnapshotPolicy nightly) is of VirtualMachine web: it is restored onto that VM only", nil},
		{"other-group", "web", "nightly-web-1", `spec.target.apiGroup: Invalid value: "example.com"`,
			func(r *snapv1.VirtualMachineRestore) { r.Spec.Target.APIGroup = ptr.To("example.com") }},
		{"no-group", "web", "nightly-web-1", `spec.target.apiGroup: Required value`,
			func(r *snapv1.VirtualMachineRestore) { r.Spec.Target.APIGroup = nil }},
		{"not-ready", "web", "nightly-web-2",
			`spec.virtualMachineSnapshotName: Invalid value: "nightly-web-2": VMSnapshotPolicy nightly judges it InProgress, not Good (phase InProgress)`, nil},
		{"from-earlier", "web", "of-earlier-web", `spec.target: Invalid value: "web": the snapshot of-earlier-web is of an earlier VirtualMachine of that name (UID an-earlier-web)`, nil},
		{"lacking-data", "web", "without-data",
			`spec.virtualMachineSnapshotName: Invalid value: "without-data": VMSnapshotPolicy nightly judges it Failed, not Good (volume data not included)`, nil},
		{"unlabelled", "web", "unlabelled", "no VMSnapshotPolicy of the namespace has its label and UID: judged by the defaults (consistency GuestAgent, failureDeadline 10m), it is Failed", nil},
		{"missing", "web", "nightly-web-9", `spec.virtualMachineSnapshotName: Invalid value: "nightly-web-9": no VirtualMachineSnapshot of that name`, nil},
		{"in-place", "web", "nightly-web-1", `spec.volumeRestorePolicy: Invalid value: "InPlace": KubeVirt would delete the VM's current claims`,
			func(r *snapv1.VirtualMachineRestore) {
				r.Spec.VolumeRestorePolicy = ptr.To(snapv1.VolumeRestorePolicyInPlace)
			}},
		{"overridden", "web", "nightly-web-1", `spec.volumeRestoreOverrides: Forbidden`, func(r *snapv1.VirtualMachineRestore) {
			r.Spec.VolumeRestoreOverrides = []snapv1.VolumeRestoreOverride{{VolumeName: "root", RestoreName: "mine"}}
		}},
		{"patched", "web", "nightly-web-1", `spec.patches: Forbidden`, func(r *snapv1.VirtualMachineRestore) {
			r.Spec.Patches = []string{`{"op": "replace", "path": "/metadata/name", "value": "web2"}`}
		}},
		{"stop-target", "web", "nightly-web-1", `spec.targetReadinessPolicy: Invalid value: "StopTarget": must be FailImmediate`,
			func(r *snapv1.VirtualMachineRestore) {
				r.Spec.TargetReadinessPolicy = ptr.To(snapv1.VirtualMachineRestoreStopTarget)
			}},
	} {
		var edit []func(*snapv1.VirtualMachineRestore)
		if c.edit != nil {
			edit = append(edit, c.edit)
		}
		refused(t, as(t, "alice").Create(ctx, restore(c.name, c.target, c.from, edit...)), c.want)
		want[c.name] = "alice Refused"
	}
	// A restore of a snapshot no policy made is checked for the snapshot alone.
	refused(t, as(t, "bob").Create(ctx, restore("by-hand-missing", "web", "by-hand-9")), "no VirtualMachineSnapshot of that name")

	good := restore("back", "web", "nightly-web-1")
	if err := as(t, "alice").Create(ctx, good); err != nil {
		t.Fatalf("a restore of a stopped VM was refused: %v", err)
	}
	if by := good.Annotations[nwv1.AnnotationRequestedBy]; by != "alice" {
		t.Errorf("requested-by is %q, want alice", by)
	}
	if p := good.Spec.TargetReadinessPolicy; p == nil || *p != snapv1.VirtualMachineRestoreFailImmediate {
		t.Errorf("targetReadinessPolicy is %v, want FailImmediate by default", p)
	}
	byHand := restore("by-hand", "web", "by-hand")
	if err := as(t, "bob").Create(ctx, byHand); err != nil {
		t.Fatalf("a restore of a snapshot no policy made was refused: %v", err)
	}
	if byHand.Spec.TargetReadinessPolicy != nil {
		t.Errorf("a restore of a snapshot no policy made was given targetReadinessPolicy %s", *byHand.Spec.TargetReadinessPolicy)
	}

	for name, w := range map[string]string{"while-running": "alice Refused", "by-hand-missing": "bob Refused",
		"back": "alice Admitted", "by-hand": "bob Admitted"} {
		want[name] = w
	}
	defaulted := false
	eventually(t, "the restores' admission records", func() bool {
		for name, w := range want {
			for _, r := range trailRecords(t, ns, name) {
				if r.Subject.Kind != "VirtualMachineRestore" {
					continue
				}
				if r.Subject.APIVersion != "snapshot.kubevirt.io/v1beta1" {
					t.Fatalf("%s's record is of apiVersion %q, want snapshot.kubevirt.io/v1beta1", name, r.Subject.APIVersion)
				}
				if name == "back" && r.To == "Defaulted" && r.Message == "set spec.targetReadinessPolicy=FailImmediate" {
					defaulted = true
				}
				if r.Actor+" "+r.To == w && (r.To != "Refused" || strings.HasPrefix(r.Message, "spec.")) {
					delete(want, name)
				}
			}
		}
		return len(want) == 0 && defaulted
	})
}
