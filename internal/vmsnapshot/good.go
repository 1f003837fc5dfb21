package vmsnapshot

import (
	"fmt"
	"slices"
	"strings"

	snapv1 "kubevirt.io/api/snapshot/v1beta1"
)

// Consistency is spec.consistency.require: what a snapshot must show of the guest's freeze.
type Consistency string

// The consistencies.
const (
	// GuestAgent: the guest agent froze the guest's file systems for the snapshot (the
	// indication GuestAgent, and not QuiesceFailed). A snapshot without it is not good.
	GuestAgent Consistency = "GuestAgent"
	// BestEffort: a snapshot taken without the guest agent is good too, and marked
	// NoGuestAgent: crash-consistent, as after a power cut.
	BestEffort Consistency = "BestEffort"
)

// Judgement is what a VirtualMachineSnapshot is, for retention and for the policy's status.
type Judgement struct {
	State State
	// Reason says why, for a snapshot that is not good (what is missing, or what failed).
	Reason string
	// NoGuestAgent: good under BestEffort, without the guest agent's freeze.
	NoGuestAgent bool
}

// Judge says what snapshot is, with content its VirtualMachineSnapshotContent (nil when
// KubeVirt has not made it, or it is not read yet), for a policy that requires consistency
// and expects the VM's volumes expected to be in it. A snapshot is good only when all of these
// hold:
//
//   - its phase is Succeeded and readyToUse is true;
//   - every volume's snapshot in its content is readyToUse;
//   - its indications meet the consistency required;
//   - every volume expected is among its included volumes.
//
// A snapshot on its way to that is InProgress (retention leaves it alone; the run's failure
// deadline ends it); one that cannot get there is Failed, with the reason.
func Judge(snapshot *snapv1.VirtualMachineSnapshot, content *snapv1.VirtualMachineSnapshotContent, require Consistency, expected []string) Judgement {
	st := snapshot.Status
	if st == nil {
		return Judgement{State: InProgress, Reason: "KubeVirt has not written its status yet"}
	}
	switch st.Phase {
	case snapv1.Failed:
		return Judgement{State: Failed, Reason: "phase Failed" + errorText(st.Error)}
	case snapv1.Deleting:
		return Judgement{State: Failed, Reason: "being deleted"}
	case snapv1.Succeeded:
	default:
		phase := string(st.Phase)
		if phase == "" {
			phase = "not set"
		}
		return Judgement{State: InProgress, Reason: "phase " + phase + errorText(st.Error)}
	}
	if st.ReadyToUse == nil || !*st.ReadyToUse {
		return Judgement{State: InProgress, Reason: "Succeeded, not readyToUse yet" + errorText(st.Error)}
	}
	if content == nil || content.Status == nil {
		return Judgement{State: InProgress, Reason: "its VirtualMachineSnapshotContent has no status yet"}
	}
	for _, v := range content.Status.VolumeSnapshotStatus {
		// A ready volume snapshot's error is its last one, not a current one: KubeVirt copies
		// it from the VolumeSnapshot, and ignores it once the snapshot is ready.
		switch {
		case v.ReadyToUse != nil && *v.ReadyToUse:
		case v.Error != nil && v.Error.Message != nil:
			return Judgement{State: Failed, Reason: fmt.Sprintf("the snapshot %s of a volume failed%s", v.VolumeSnapshotName, errorText(v.Error))}
		default:
			return Judgement{State: InProgress, Reason: fmt.Sprintf("the snapshot %s of a volume is not readyToUse yet", v.VolumeSnapshotName)}
		}
	}
	var included, excluded []string
	if sv := st.SnapshotVolumes; sv != nil {
		included, excluded = sv.IncludedVolumes, sv.ExcludedVolumes
	}
	var missing []string
	for _, want := range expected {
		if !slices.Contains(included, want) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		why := fmt.Sprintf("volume %s not included", strings.Join(missing, ", "))
		if len(excluded) > 0 {
			why += " (KubeVirt excluded " + strings.Join(excluded, ", ") + ": no VolumeSnapshotClass for its storage class?)"
		}
		return Judgement{State: Failed, Reason: why}
	}
	has := func(i snapv1.Indication) bool { return slices.Contains(st.Indications, i) }
	switch {
	case has(snapv1.VMSnapshotQuiesceFailedIndication) && require == GuestAgent:
		return Judgement{State: Failed, Reason: "the guest agent failed to freeze the guest (indication QuiesceFailed); consistency GuestAgent requires it"}
	case !has(snapv1.VMSnapshotGuestAgentIndication) && has(snapv1.VMSnapshotOnlineSnapshotIndication) && require == GuestAgent:
		return Judgement{State: Failed, Reason: fmt.Sprintf("taken while the VM ran without the guest agent's freeze (indications %s); consistency GuestAgent requires it", indications(st.Indications))}
	}
	// A snapshot of a stopped VM needs no freeze: its disks are at rest.
	noAgent := has(snapv1.VMSnapshotOnlineSnapshotIndication) && (!has(snapv1.VMSnapshotGuestAgentIndication) || has(snapv1.VMSnapshotQuiesceFailedIndication))
	return Judgement{State: Good, NoGuestAgent: noAgent}
}

func errorText(e *snapv1.Error) string {
	if e == nil || e.Message == nil || *e.Message == "" {
		return ""
	}
	return ": " + *e.Message
}

func indications(in []snapv1.Indication) string {
	if len(in) == 0 {
		return "none"
	}
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = string(v)
	}
	return strings.Join(out, ", ")
}
