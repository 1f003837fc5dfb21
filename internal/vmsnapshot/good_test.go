package vmsnapshot

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
)

// The four checks of a good snapshot, each failing alone, on the KubeVirt types as its
// snapshot controller writes them.
func TestJudge(t *testing.T) {
	good := func() (*snapv1.VirtualMachineSnapshot, *snapv1.VirtualMachineSnapshotContent) {
		s := &snapv1.VirtualMachineSnapshot{Status: &snapv1.VirtualMachineSnapshotStatus{
			Phase: snapv1.Succeeded, ReadyToUse: ptr.To(true),
			Indications:     []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotGuestAgentIndication},
			SnapshotVolumes: &snapv1.SnapshotVolumesLists{IncludedVolumes: []string{"rootdisk", "data"}},
		}}
		c := &snapv1.VirtualMachineSnapshotContent{Status: &snapv1.VirtualMachineSnapshotContentStatus{ReadyToUse: ptr.To(true),
			VolumeSnapshotStatus: []snapv1.VolumeSnapshotStatus{
				{VolumeSnapshotName: "vmsnapshot-1-volume-rootdisk", ReadyToUse: ptr.To(true)},
				{VolumeSnapshotName: "vmsnapshot-1-volume-data", ReadyToUse: ptr.To(true)},
			}}}
		return s, c
	}
	expected := []string{"rootdisk", "data"}
	for _, c := range []struct {
		name    string
		change  func(*snapv1.VirtualMachineSnapshot, *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent
		require Consistency
		state   State
		reason  string
		noAgent bool
	}{
		{name: "good", state: Good, require: GuestAgent},
		{name: "in progress", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			s.Status.Phase = snapv1.InProgress
			return c
		}, state: InProgress, reason: "phase InProgress"},
		{name: "failed", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			s.Status.Phase, s.Status.Error = snapv1.Failed, &snapv1.Error{Message: ptr.To("freeze timed out")}
			return c
		}, state: Failed, reason: "phase Failed: freeze timed out"},
		{name: "not ready", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			s.Status.ReadyToUse = ptr.To(false)
			return c
		}, state: InProgress, reason: "not readyToUse yet"},
		{name: "no content", change: func(*snapv1.VirtualMachineSnapshot, *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			return nil
		}, state: InProgress, reason: "no status yet"},
		{name: "a volume not ready", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			c.Status.VolumeSnapshotStatus[1].ReadyToUse = ptr.To(false)
			return c
		}, state: InProgress, reason: "vmsnapshot-1-volume-data of a volume is not readyToUse"},
		{name: "a volume failed", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			c.Status.VolumeSnapshotStatus[0].Error = &snapv1.Error{Message: ptr.To("out of space")}
			c.Status.VolumeSnapshotStatus[0].ReadyToUse = ptr.To(false)
			return c
		}, state: Failed, reason: "vmsnapshot-1-volume-rootdisk of a volume failed: out of space"},
		{name: "a ready volume with its last error", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			// KubeVirt copies the VolumeSnapshot's last error, and ignores it once ready.
			c.Status.VolumeSnapshotStatus[0].Error = &snapv1.Error{Message: ptr.To("transient: retrying")}
			return c
		}, state: Good},
		{name: "an excluded volume", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			s.Status.SnapshotVolumes = &snapv1.SnapshotVolumesLists{IncludedVolumes: []string{"rootdisk"}, ExcludedVolumes: []string{"data"}}
			return c
		}, state: Failed, reason: "volume data not included (KubeVirt excluded data"},
		{name: "no guest agent, GuestAgent required", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			s.Status.Indications = []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotNoGuestAgentIndication}
			return c
		}, require: GuestAgent, state: Failed, reason: "without the guest agent's freeze (indications Online, NoGuestAgent)"},
		{name: "no guest agent, BestEffort", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			s.Status.Indications = []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotNoGuestAgentIndication}
			return c
		}, require: BestEffort, state: Good, noAgent: true},
		{name: "freeze failed, GuestAgent required", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			s.Status.Indications = append(s.Status.Indications, snapv1.VMSnapshotQuiesceFailedIndication)
			return c
		}, require: GuestAgent, state: Failed, reason: "QuiesceFailed"},
		{name: "a stopped VM", change: func(s *snapv1.VirtualMachineSnapshot, c *snapv1.VirtualMachineSnapshotContent) *snapv1.VirtualMachineSnapshotContent {
			s.Status.Indications = nil
			return c
		}, require: GuestAgent, state: Good},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, content := good()
			if c.change != nil {
				content = c.change(s, content)
			}
			require := c.require
			if require == "" {
				require = GuestAgent
			}
			j := Judge(s, content, require, expected)
			if j.State != c.state || !strings.Contains(j.Reason, c.reason) || j.NoGuestAgent != c.noAgent {
				t.Errorf("judged %s (%q, noGuestAgent %t); want %s saying %q, noGuestAgent %t", j.State, j.Reason, j.NoGuestAgent, c.state, c.reason, c.noAgent)
			}
		})
	}
}
