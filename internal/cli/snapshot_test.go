package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// snapshot list shows the namespace's policies and the snapshots they made, judged as the
// policy judges them (good, failed with why, in progress), by VM and newest first; a snapshot
// no policy made is left out, as is another VM's when one is named.
func TestSnapshotList(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: nwv1.VMSnapshotPolicySpec{
			Schedule:  nwv1.SnapshotSchedule{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"},
			Retention: nwv1.SnapshotRetention{KeepLast: 3},
		},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	next := metav1.NewTime(time.Date(2026, 12, 1, 1, 30, 0, 0, time.UTC))
	p.Status = nwv1.VMSnapshotPolicyStatus{Selected: 2, Kept: 1, NextRun: &next,
		Conditions: []metav1.Condition{{Type: nwv1.ConditionHealthy, Status: metav1.ConditionFalse, Reason: "Failing", Message: "db (1)", LastTransitionTime: next}}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	web := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: virtv1.VirtualMachineSpec{
		Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{}}}}}
	if err := env.Client.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	vmUID := map[string]string{"web": string(web.UID), "db": "db-uid"}
	snapshot := func(name, vm, scheduled string, mine bool, st *snapv1.VirtualMachineSnapshotStatus) {
		t.Helper()
		s := &snapv1.VirtualMachineSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Labels:      map[string]string{nwv1.LabelSnapshotPolicy: "nightly", nwv1.LabelSnapshotVM: vm},
				Annotations: map[string]string{nwv1.AnnotationSnapshotScheduled: scheduled, nwv1.AnnotationSnapshotVolumes: "root"}},
			Spec: snapv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: vm}},
		}
		if mine {
			s.Annotations[nwv1.AnnotationSnapshotPolicyUID] = string(p.UID)
		}
		s.Annotations[nwv1.AnnotationSnapshotVMUID] = vmUID[vm]
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if st == nil {
			return
		}
		if st.Phase == snapv1.Succeeded {
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
			st.VirtualMachineSnapshotContentName = ptr.To(content.Name)
		}
		s.Status = st
		if err := env.Client.Status().Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	good := func(agent snapv1.Indication) *snapv1.VirtualMachineSnapshotStatus {
		return &snapv1.VirtualMachineSnapshotStatus{Phase: snapv1.Succeeded, ReadyToUse: ptr.To(true),
			Indications:     []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, agent},
			SnapshotVolumes: &snapv1.SnapshotVolumesLists{IncludedVolumes: []string{"root"}}}
	}
	snapshot("nightly-web-20261129-0130", "web", "2026-11-29T01:30:00Z", true, good(snapv1.VMSnapshotGuestAgentIndication))
	snapshot("nightly-web-20261130-0130", "web", "2026-11-30T01:30:00Z", true, nil)
	snapshot("nightly-db-20261130-0130", "db", "2026-11-30T01:30:00Z", true, good(snapv1.VMSnapshotNoGuestAgentIndication))
	snapshot("by-hand", "web", "2026-11-30T03:00:00Z", false, good(snapv1.VMSnapshotGuestAgentIndication))
	vmUID["web"] = "an-earlier-web"
	snapshot("nightly-web-20261128-0130", "web", "2026-11-28T01:30:00Z", true, good(snapv1.VMSnapshotGuestAgentIndication))

	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	r := plugin(t, runOpts{now: now}, "snapshot", "list", "-n", ns)
	r.wantCode(t, ExitOK)
	want := []string{
		"POLICY    SCHEDULE                     VMS   KEPT   HEALTHY           NEXT RUN      LAST SKIPPED",
		"nightly   30 2 * * * (Europe/Berlin)   2     1      False (Failing)   in 13h30m0s   -",
		"",
		"VM              POLICY    SNAPSHOT                    SCHEDULED              STATE    WHY",
		"db              nightly   nightly-db-20261130-0130    2026-11-30T01:30:00Z   Failed   taken while the VM ran without the guest agent's freeze (indications Online, NoGuestAgent); consistency GuestAgent requires it",
		"web             nightly   nightly-web-20261130-0130   2026-11-30T01:30:00Z   Failed   not ended 1m0s past its failure deadline of 10m0s (KubeVirt has not written its status yet)",
		"web             nightly   nightly-web-20261129-0130   2026-11-29T01:30:00Z   Good     -",
		"web (earlier)   nightly   nightly-web-20261128-0130   2026-11-28T01:30:00Z   Good     of an earlier VM of the name, which the policy leaves alone",
	}
	if got := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("snapshot list:\n%s\nwant\n%s", r.stdout, strings.Join(want, "\n"))
	}

	r = plugin(t, runOpts{now: now}, "snapshot", "list", "web", "-n", ns, "-o", "json")
	r.wantCode(t, ExitOK)
	var list snapv1.VirtualMachineSnapshotList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "nightly-web-20261130-0130 nightly-web-20261129-0130 nightly-web-20261128-0130" {
		t.Errorf("web's snapshots, -o json: %v", names)
	}

	r = plugin(t, runOpts{now: now}, "snapshot", "list", "-n", env.Namespace(t))
	r.wantCode(t, ExitOK)
	if !strings.HasPrefix(r.stderr, "No VMSnapshotPolicies found in namespace") || r.stdout != "" {
		t.Errorf("an empty namespace: stdout %q, stderr %q", r.stdout, r.stderr)
	}
}
