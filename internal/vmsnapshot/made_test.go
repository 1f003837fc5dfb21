package vmsnapshot

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Judged counts the failure deadline from when the run made the snapshot (later than its
// scheduled time for a late run), takes the snapshot's own deadline over the policy's, fails a
// snapshot KubeVirt has not ended a minute past it, and never fails one KubeVirt said
// Succeeded: that one is stuck.
func TestJudgedAppliesTheFailureDeadline(t *testing.T) {
	scheduled := time.Date(2026, 11, 30, 19, 0, 0, 0, time.UTC)
	made := func(started time.Time, own time.Duration, st *snapv1.VirtualMachineSnapshotStatus) *snapv1.VirtualMachineSnapshot {
		s := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{
			nwv1.AnnotationSnapshotScheduled: scheduled.Format(time.RFC3339),
			nwv1.AnnotationSnapshotStarted:   started.Format(time.RFC3339),
		}}, Status: st}
		if own > 0 {
			s.Spec.FailureDeadline = &metav1.Duration{Duration: own}
		}
		return s
	}
	for _, c := range []struct {
		name     string
		s        *snapv1.VirtualMachineSnapshot
		now      time.Time
		state    State
		stuck    bool
		reason   string
		deadline time.Time
	}{
		{name: "on time, within", s: made(scheduled, 0, nil), now: scheduled.Add(11 * time.Minute), state: InProgress, deadline: scheduled.Add(10 * time.Minute)},
		{name: "on time, past", s: made(scheduled, 0, nil), now: scheduled.Add(11*time.Minute + time.Second), state: Failed,
			reason: "not ended 1m0s past its failure deadline of 10m0s (KubeVirt has not written its status yet)"},
		{name: "late run, from its start", s: made(scheduled.Add(20*time.Minute), 0, nil), now: scheduled.Add(25 * time.Minute), state: InProgress,
			deadline: scheduled.Add(30 * time.Minute)},
		{name: "its own deadline", s: made(scheduled, 2*time.Minute, nil), now: scheduled.Add(4 * time.Minute), state: Failed,
			reason: "failure deadline of 2m0s"},
		{name: "succeeded, never failed by it", s: made(scheduled, 0, &snapv1.VirtualMachineSnapshotStatus{Phase: snapv1.Succeeded, ReadyToUse: ptr.To(true)}),
			now: scheduled.Add(time.Hour), state: InProgress, stuck: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := Judged(c.s, nil, GuestAgent, 10*time.Minute, c.now)
			if m.State != c.state || m.Stuck != c.stuck || !strings.Contains(m.Reason, c.reason) || !m.Scheduled.Equal(scheduled) {
				t.Errorf("%+v; want %s, stuck %t, reason %q", m, c.state, c.stuck, c.reason)
			}
			if !c.deadline.IsZero() && !m.Deadline.Equal(c.deadline) {
				t.Errorf("deadline %s, want %s", m.Deadline, c.deadline)
			}
		})
	}
}

// ClaimVolumes lists the volumes on a PersistentVolumeClaim or a DataVolume, in order, and no
// other kind; a VM without a template has none.
func TestClaimVolumesAreTheVolumesOnClaims(t *testing.T) {
	withVolumes := func(volumes ...virtv1.Volume) *virtv1.VirtualMachine {
		return &virtv1.VirtualMachine{Spec: virtv1.VirtualMachineSpec{Template: &virtv1.VirtualMachineInstanceTemplateSpec{
			Spec: virtv1.VirtualMachineInstanceSpec{Volumes: volumes}}}}
	}
	claim := func(name string) virtv1.Volume {
		return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{}}}
	}
	dataVolume := func(name string) virtv1.Volume {
		return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name}}}
	}
	for _, tc := range []struct {
		name string
		vm   *virtv1.VirtualMachine
		want []string
	}{
		{"no VM", nil, nil},
		{"no template", &virtv1.VirtualMachine{}, nil},
		{"no claims", withVolumes(virtv1.Volume{Name: "boot", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{}}}), nil},
		{"claims among others", withVolumes(dataVolume("root"),
			virtv1.Volume{Name: "init", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{}}},
			claim("data")), []string{"root", "data"}},
	} {
		if got := ClaimVolumes(tc.vm); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
