package nodehealth

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
)

// NotInSync reads the agents' reports as the agents make them (agent.DRBDStatus) from DRBD's
// own state: a resource of two replicas and a diskless client is in sync when every disk is
// UpToDate and every connection Connected and Established; otherwise it names the resource,
// the node and what is wrong, a node's own report of its disk first.
func TestNotInSyncNamesTheReplicaAndWhatIsWrong(t *testing.T) {
	type node struct {
		name  string
		stale bool
		res   drbd.Resource
	}
	peer := func(name, conn, repl, disk string, client bool, outOfSync uint64) drbd.Connection {
		return drbd.Connection{Name: name, ConnectionState: conn,
			PeerDevices: []drbd.PeerDevice{{ReplicationState: repl, PeerDiskState: disk, PeerClient: client, OutOfSyncKiB: outOfSync}}}
	}
	disk := func(state string, client bool) []drbd.Device {
		return []drbd.Device{{DiskState: state, Client: client, Quorum: true}}
	}
	inSync := func() []node {
		return []node{
			{name: "edge-1", res: drbd.Resource{Name: "pvc-a", Devices: disk("UpToDate", false), Connections: []drbd.Connection{
				peer("edge-2", "Connected", "Established", "UpToDate", false, 0), peer("edge-3", "Connected", "Established", "Diskless", true, 0)}}},
			{name: "edge-2", res: drbd.Resource{Name: "pvc-a", Devices: disk("UpToDate", false), Connections: []drbd.Connection{
				peer("edge-1", "Connected", "Established", "UpToDate", false, 0), peer("edge-3", "Connected", "Established", "Diskless", true, 0)}}},
			{name: "edge-3", res: drbd.Resource{Name: "pvc-a", Devices: disk("Diskless", true), Connections: []drbd.Connection{
				peer("edge-1", "Connected", "Established", "UpToDate", false, 0), peer("edge-2", "Connected", "Established", "UpToDate", false, 0)}}},
		}
	}
	for _, c := range []struct {
		name   string
		change func(nodes []node)
		want   string
	}{
		{"in sync", func([]node) {}, ""},
		{"a replica synchronising", func(n []node) {
			n[0].res.Connections[0] = peer("edge-2", "Connected", "SyncSource", "Inconsistent", false, 1234)
			n[1].res.Devices = disk("Inconsistent", false)
			n[1].res.Connections[0] = peer("edge-1", "Connected", "SyncTarget", "UpToDate", false, 1234)
			n[1].res.Connections[0].PeerDevices[0].ResyncDonePercent = ptr.To(40.7)
		}, "replica of pvc-a on edge-2 is Inconsistent (SyncTarget)"},
		{"seen by a peer only", func(n []node) {
			n[0].res.Connections[0] = peer("edge-2", "Connected", "SyncSource", "Inconsistent", false, 1234)
		}, "replica of pvc-a on edge-2 is Inconsistent, as edge-1 sees it (SyncSource)"},
		{"a peer away", func(n []node) {
			n[2].res.Connections[1] = peer("edge-2", "Connecting", "Off", "DUnknown", false, 0)
		}, "the connection of pvc-a from edge-3 to edge-2 is Connecting"},
		{"verifying", func(n []node) {
			n[1].res.Connections[0] = peer("edge-1", "Connected", "VerifyS", "UpToDate", false, 8)
		}, "the replication of pvc-a from edge-2 to edge-1 is VerifyS"},
		{"suspended", func(n []node) { n[1].res.Suspended = true }, "I/O on pvc-a is suspended on edge-2"},
		{"stale", func(n []node) { n[2].stale = true },
			"the report of pvc-a from edge-3 is stale (its agent's heartbeat is older than the cluster's heartbeatStaleAfter), so whether it is in sync is not known"},
	} {
		nodes := inSync()
		c.change(nodes)
		var agents []nwv1.NodewrightAgentStatus
		for _, n := range nodes {
			agents = append(agents, nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: n.name}, Status: nwv1.NodewrightAgentStatusStatus{
				Heartbeat: nwv1.HeartbeatStatus{Stale: n.stale}, Storage: agent.DRBDStatus([]drbd.Resource{n.res})}})
		}
		reports := ResourceReports(agents)
		if got := NotInSync(reports["pvc-a"]); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if got := DiskNodes(reports["pvc-a"]); !slices.Equal(got, []string{"edge-1", "edge-2"}) {
			t.Errorf("%s: the disks are on %v, want edge-1 and edge-2", c.name, got)
		}
	}
	if got := NotInSync(nil); got != "" {
		t.Errorf("a resource no agent reports: %q; a legacy cluster reports counts only", got)
	}
}
