package vmsnapshot

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// PolicyOf matches a snapshot's policy by its label and its UID annotation both, a long name
// by its label's hash.
func TestPolicyOfMatchesTheLabelAndTheUID(t *testing.T) {
	long := strings.Repeat("nightly-", 10)
	policies := []nwv1.VMSnapshotPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "nightly", UID: "uid-nightly"}},
		{ObjectMeta: metav1.ObjectMeta{Name: long, UID: "uid-long"}},
	}
	snap := func(label, uid string) *snapv1.VirtualMachineSnapshot {
		s := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
		if label != "" {
			s.Labels[nwv1.LabelSnapshotPolicy] = label
		}
		if uid != "" {
			s.Annotations[nwv1.AnnotationSnapshotPolicyUID] = uid
		}
		return s
	}
	for _, tc := range []struct {
		name, label, uid, want string
	}{
		{name: "both", label: "nightly", uid: "uid-nightly", want: "nightly"},
		{name: "a long name by its hash", label: children.LabelValue(long), uid: "uid-long", want: long},
		{name: "a policy made again under the name", label: "nightly", uid: "uid-before"},
		{name: "the label alone", label: "nightly"},
		{name: "the UID alone", uid: "uid-nightly"},
		{name: "another policy's UID", label: "nightly", uid: "uid-long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if p := PolicyOf(snap(tc.label, tc.uid), policies); p != nil {
				got = p.Name
			}
			if got != tc.want {
				t.Errorf("PolicyOf = %q, want %q", got, tc.want)
			}
		})
	}
}

// JudgedBy requires the policy's consistency and failure deadline, and the defaults without a
// policy: GuestAgent, and 10 minutes.
func TestJudgedByTakesThePolicysRequirementsOrTheDefaults(t *testing.T) {
	made := time.Date(2026, 11, 30, 2, 30, 0, 0, time.UTC)
	online := &snapv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(made)},
		Status: &snapv1.VirtualMachineSnapshotStatus{Phase: snapv1.Succeeded, ReadyToUse: ptr.To(true), SourceUID: ptr.To(types.UID("vm")),
			Indications: []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotNoGuestAgentIndication}},
	}
	content := &snapv1.VirtualMachineSnapshotContent{Status: &snapv1.VirtualMachineSnapshotContentStatus{ReadyToUse: ptr.To(true)}}
	bestEffort := &nwv1.VMSnapshotPolicy{Spec: nwv1.VMSnapshotPolicySpec{Consistency: nwv1.SnapshotConsistencySpec{Require: nwv1.SnapshotBestEffort},
		FailureDeadline: metav1.Duration{Duration: time.Hour}}}

	if m := JudgedBy(nil, online, content, made); m.State != Failed {
		t.Errorf("without a policy, a snapshot without the guest agent's freeze is %s, want Failed (GuestAgent)", m.State)
	}
	if m := JudgedBy(bestEffort, online, content, made); m.State != Good || !m.NoGuestAgent {
		t.Errorf("under BestEffort it is %s (noGuestAgent %t), want Good, noGuestAgent", m.State, m.NoGuestAgent)
	}
	if m := JudgedBy(nil, online, content, made); !m.Deadline.Equal(made.Add(10 * time.Minute)) {
		t.Errorf("without a policy, the deadline is %s, want 10 minutes after it was made", m.Deadline)
	}
	if m := JudgedBy(bestEffort, online, content, made); !m.Deadline.Equal(made.Add(time.Hour)) {
		t.Errorf("the policy's deadline is %s, want an hour after it was made", m.Deadline)
	}
}
