package vmsnapshot

import (
	"time"

	snapv1 "kubevirt.io/api/snapshot/v1beta1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// DefaultFailureDeadline is a policy's failureDeadline when it sets none (its CRD's default).
const DefaultFailureDeadline = 10 * time.Minute

// PolicyOf is the policy among policies that made s: the one its label names whose UID its
// annotation holds (a policy deleted and made again under the same name did not make it).
// Nil when none did.
func PolicyOf(s *snapv1.VirtualMachineSnapshot, policies []nwv1.VMSnapshotPolicy) *nwv1.VMSnapshotPolicy {
	label, uid := s.Labels[nwv1.LabelSnapshotPolicy], s.Annotations[nwv1.AnnotationSnapshotPolicyUID]
	if label == "" || uid == "" {
		return nil
	}
	for i := range policies {
		if p := &policies[i]; children.LabelValue(p.Name) == label && string(p.UID) == uid {
			return p
		}
	}
	return nil
}

// JudgedBy is Judged with what p requires: its consistency and failure deadline, the CRD's
// defaults (GuestAgent, DefaultFailureDeadline) for what it leaves unset, and for no policy
// (nil).
func JudgedBy(p *nwv1.VMSnapshotPolicy, s *snapv1.VirtualMachineSnapshot, content *snapv1.VirtualMachineSnapshotContent, now time.Time) Made {
	require, deadline := GuestAgent, DefaultFailureDeadline
	if p != nil {
		if r := p.Spec.Consistency.Require; r != "" {
			require = Consistency(r)
		}
		if d := p.Spec.FailureDeadline.Duration; d > 0 {
			deadline = d
		}
	}
	return Judged(s, content, require, deadline, now)
}
