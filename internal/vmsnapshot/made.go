package vmsnapshot

import (
	"fmt"
	"strings"
	"time"

	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// PastDeadline is how long past its failure deadline a snapshot KubeVirt has not ended counts
// as failed all the same: a snapshot stuck in progress must not stop the schedule.
const PastDeadline = time.Minute

// Made is a snapshot a VMSnapshotPolicy made, judged at a moment, as the policy and
// kubectl nodewright both judge it.
type Made struct {
	Judgement
	// Scheduled is the scheduled time of the run that made it; Started when the run made it
	// (later for a late run); Deadline when its failure deadline passes.
	Scheduled, Started, Deadline time.Time
	// Stuck: KubeVirt said Succeeded, yet it is not good PastDeadline after its deadline (its
	// content not ready, or not read). It is never failed for that: retention keeps it, and
	// no run waits for it.
	Stuck bool
}

// ClaimVolumes are the names of vm's volumes on claims (a PersistentVolumeClaim or a
// DataVolume), in its template's order: those a good snapshot of it must include. Whoever makes
// a snapshot lists them in its AnnotationSnapshotVolumes, which Judged checks.
func ClaimVolumes(vm *virtv1.VirtualMachine) []string {
	if vm == nil || vm.Spec.Template == nil {
		return nil
	}
	var out []string
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.DataVolume != nil {
			out = append(out, v.Name)
		}
	}
	return out
}

// Judged judges s, a snapshot a policy made, at now: Judge with its content (nil when none is
// read), the consistency required and the volumes its annotation lists, then its failure
// deadline (its spec's, else the policy's failureDeadline), counted from when the run made it.
// A snapshot KubeVirt has not ended PastDeadline after that is Failed.
func Judged(s *snapv1.VirtualMachineSnapshot, content *snapv1.VirtualMachineSnapshotContent, require Consistency, failureDeadline time.Duration, now time.Time) Made {
	var expected []string
	if v := s.Annotations[nwv1.AnnotationSnapshotVolumes]; v != "" {
		expected = strings.Split(v, ",")
	}
	m := Made{Judgement: Judge(s, content, require, expected), Scheduled: s.CreationTimestamp.Time}
	if t, err := time.Parse(time.RFC3339, s.Annotations[nwv1.AnnotationSnapshotScheduled]); err == nil {
		m.Scheduled = t
	}
	m.Started = m.Scheduled
	if t, err := time.Parse(time.RFC3339, s.Annotations[nwv1.AnnotationSnapshotStarted]); err == nil && t.After(m.Started) {
		m.Started = t
	}
	if d := s.Spec.FailureDeadline; d != nil && d.Duration > 0 {
		failureDeadline = d.Duration
	}
	m.Deadline = m.Started.Add(failureDeadline)
	if m.State != InProgress || !now.After(m.Deadline.Add(PastDeadline)) {
		return m
	}
	if s.Status != nil && s.Status.Phase == snapv1.Succeeded {
		m.Stuck = true
		return m
	}
	m.Judgement = Judgement{State: Failed, Reason: fmt.Sprintf("not ended %s past its failure deadline of %s (%s)", PastDeadline, failureDeadline, m.Reason)}
	return m
}
