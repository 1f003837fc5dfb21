package cli

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// upgradeSnapshot is a version of an upgrade and when it arrived.
type upgradeSnapshot = storySnapshot[*nwv1.ReplicationUpgrade]

// upgradeStory is the story (gatedStory) of an upgrade: its transitions through the shared
// workflow code on the upgrade's plan (internal/replupgrade), with what the controller writes
// besides (the volumes, the progress, the synchronisation) as edits.
type upgradeStory struct {
	*gatedStory[*nwv1.ReplicationUpgrade]
}

func newUpgradeStory(t *testing.T, u *nwv1.ReplicationUpgrade, t0 time.Time) upgradeStory {
	return upgradeStory{newGatedStory(t, replupgrade.Plan{}, replupgrade.Kind, u.DeepCopy(), t0, nil)}
}

// after moves the story's clock on by d.
func (s upgradeStory) after(d time.Duration) upgradeStory {
	s.gatedStory.after(d)
	return s
}

// status changes the upgrade's own status fields and snaps it.
func (s upgradeStory) status(change func(*nwv1.ReplicationUpgradeStatus)) upgradeStory {
	s.edit(func(u *nwv1.ReplicationUpgrade) { change(&u.Status) })
	return s
}

// volumes are the story's volumes, as LINSTOR names them.
var volumes = []string{"pvc-0a1b", "pvc-5e2f", "pvc-77ce", "pvc-c3d4"}

// preflight ends the Preflight, which found the storage node's volumes.
func (s upgradeStory) preflight(original string, dataNodes []string, replicas int32) upgradeStory {
	st := &s.obj.Status // written with the Preflight's end
	st.OriginalNode, st.DataNodes, st.ResourceDefinitions = original, dataNodes, volumes
	st.Volumes = &nwv1.ReplicationVolumeCounts{Total: int32(len(volumes)), Replicas: replicas}
	s.succeed(fmt.Sprintf("%s holds %d volumes; %d new replicas to place", original, len(volumes), replicas))
	return s
}

// syncing has the replicas not yet UpToDate at percent each (resource, node, percent), the
// least done first as the controller sorts them, and the overall percent.
func (s upgradeStory) syncing(overall, upToDate int32, replicas ...nwv1.ReplicaSync) upgradeStory {
	return s.status(func(st *nwv1.ReplicationUpgradeStatus) {
		st.SyncPercent, st.Syncing = ptr.To(overall), replicas
		st.Volumes.UpToDate = upToDate
		st.Progress = fmt.Sprintf("synced %d/%d", upToDate, st.Volumes.Total)
	})
}

// manualUpgradeStory is a Manual upgrade of edge-1's four volumes onto edge-2 and edge-3,
// three replicas each: every stage that changes the nodes waits for ada's approval; it
// succeeds.
func manualUpgradeStory(t *testing.T, name string) []upgradeSnapshot {
	t0 := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	s := newUpgradeStory(t, &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"edge-2", "edge-3"}, ReplicaCount: 3,
			SyncTimeout: metav1.Duration{Duration: 6 * time.Hour}, Approval: nwv1.ApprovalManual}}, t0)
	s.after(time.Second).event(workflow.Start, "")
	s.after(time.Second).admit()
	s.after(4*time.Second).preflight("edge-1", []string{"edge-2", "edge-3"}, 8)
	approved := func() {
		s.after(time.Second).awaitingApproval()
		s.after(30 * time.Second).approve("ada@example.com")
		s.after(time.Second).admit()
	}
	approved() // Place
	for _, placed := range []int32{4, 8} {
		s.after(5 * time.Second).status(func(st *nwv1.ReplicationUpgradeStatus) {
			st.Volumes.Placed, st.Progress = placed, fmt.Sprintf("placed %d/8", placed)
		})
	}
	s.after(2 * time.Second).succeed("placed 8 replicas on edge-2 and edge-3; the resource group's place count is 3")
	s.after(2*time.Second).syncing(20, 0,
		nwv1.ReplicaSync{Resource: "pvc-c3d4", Node: "edge-3", Percent: 3}, nwv1.ReplicaSync{Resource: "pvc-0a1b", Node: "edge-2", Percent: 12},
		nwv1.ReplicaSync{Resource: "pvc-77ce", Node: "edge-2", Percent: 40})
	s.after(40*time.Second).syncing(75, 2,
		nwv1.ReplicaSync{Resource: "pvc-c3d4", Node: "edge-3", Percent: 41}, nwv1.ReplicaSync{Resource: "pvc-0a1b", Node: "edge-3", Percent: 88})
	s.after(30*time.Second).syncing(100, 4)
	s.after(time.Second).succeed("every new replica is UpToDate")
	approved() // Verify
	s.after(20 * time.Second).status(func(st *nwv1.ReplicationUpgradeStatus) { st.Volumes.Verified, st.Progress = 4, "verified 4/4" })
	s.after(time.Second).succeed("DRBD's online verify found every volume identical on its 3 replicas")
	approved() // Quorum
	s.after(3 * time.Second).succeed("quorum majority and on-no-quorum io-error on resource group rg-vms; the balance task is back on")
	approved() // ReleaseTaints
	s.after(2 * time.Second).succeed("removed node.nodewright.io/storage-not-ready:NoSchedule from edge-2 and edge-3")
	return s.snaps
}

// rolledBackUpgradeStory is an Automatic upgrade of edge-1's volumes onto edge-2, with edge-3 as
// the tiebreaker, whose synchronisation does not finish within its sync timeout: it is rolled
// back, the new replicas removed and the place count and balance task put back.
func rolledBackUpgradeStory(t *testing.T, name string) []upgradeSnapshot {
	t0 := time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)
	s := newUpgradeStory(t, &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"edge-2", "edge-3"}, TiebreakerNode: "edge-3", ReplicaCount: 2,
			SyncTimeout: metav1.Duration{Duration: 10 * time.Minute}, Approval: nwv1.ApprovalAutomatic}}, t0)
	s.after(time.Second).event(workflow.Start, "")
	s.after(time.Second).admit()
	s.after(3*time.Second).preflight("edge-1", []string{"edge-2"}, 8)
	s.after(6 * time.Second).status(func(st *nwv1.ReplicationUpgradeStatus) { st.Volumes.Placed, st.Progress = 8, "placed 8/8" })
	s.after(time.Second).succeed("placed 4 replicas on edge-2 and 4 tiebreakers on edge-3; the resource group's place count is 2")
	s.after(time.Minute).syncing(60, 2,
		nwv1.ReplicaSync{Resource: "pvc-77ce", Node: "edge-2", Percent: 22}, nwv1.ReplicaSync{Resource: "pvc-c3d4", Node: "edge-2", Percent: 97})
	s.after(5 * time.Minute).says("pvc-77ce on edge-2 has not moved for 5m00s")
	s.after(4*time.Minute).event(workflow.StepFailed, "the sync timeout (10m00s) passed with 2 of 4 volumes UpToDate; pvc-77ce on edge-2 at 22%")
	s.after(time.Second).status(func(st *nwv1.ReplicationUpgradeStatus) { st.Progress, st.Syncing = "removed 3/8", nil })
	s.after(4 * time.Second).succeed("removed the 4 replicas and 4 tiebreakers the upgrade placed")
	s.after(time.Second).succeed("the resource group's place count is 1 again")
	s.after(time.Second).succeed("the balance task is back to what it was")
	return s.snaps
}

// upgradeStories are the upgrades the golden files record.
var upgradeStories = map[string]func(*testing.T, string) []upgradeSnapshot{
	"upgrade-manual-succeeded": manualUpgradeStory,
	"upgrade-rolledback":       rolledBackUpgradeStory,
}

// upgradeHeldAt is the first version of the story in which a gate holds step.
func upgradeHeldAt(t *testing.T, snaps []upgradeSnapshot, step string) *nwv1.ReplicationUpgrade {
	t.Helper()
	return firstVersion(t, snaps, step+" held", func(u *nwv1.ReplicationUpgrade) bool {
		p := replupgrade.ProgressOf(u)
		return p.Current != nil && p.Current.Name == step && p.Current.State == nwv1.StepWaiting && p.Held != nil
	})
}
