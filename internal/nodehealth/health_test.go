package nodehealth

import (
	"os"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
)

// DRBDRed reads the agent's report as the agent makes it (agent.DRBDStatus) from DRBD's own
// state: connected and UpToDate is green; a lost quorum, a peer not connected, a disk not
// UpToDate, or fewer resources than at the Preflight is red, naming what.
func TestDRBDRedNamesWhatIsNotHealthy(t *testing.T) {
	device := func(disk string, quorum bool) []drbd.Device {
		return []drbd.Device{{Volume: 0, Minor: 1000, DiskState: disk, Quorum: quorum}}
	}
	peer := func(state string) []drbd.Connection {
		return []drbd.Connection{{Name: "edge-2", PeerNodeID: 1, ConnectionState: state}}
	}
	report := func(rs ...drbd.Resource) *nwv1.NodewrightAgentStatus {
		return &nwv1.NodewrightAgentStatus{Status: nwv1.NodewrightAgentStatusStatus{Storage: agent.DRBDStatus(rs)}}
	}
	for _, c := range []struct {
		name string
		a    *nwv1.NodewrightAgentStatus
		had  int32
		want string
	}{
		{"healthy", report(drbd.Resource{Name: "pvc-a", Devices: device("UpToDate", true), Connections: peer("Connected")}), 1, ""},
		{"quorum lost", report(drbd.Resource{Name: "pvc-a", Devices: device("UpToDate", false), Connections: peer("Connected")}), 1,
			"edge-1: DRBD lost quorum on pvc-a/0"},
		{"peer away", report(drbd.Resource{Name: "pvc-a", Devices: device("UpToDate", true), Connections: peer("Connecting")}), 1,
			"edge-1: 0 of 1 DRBD resources connected, 1 UpToDate (pvc-a to edge-2 Connecting)"},
		{"fewer than before", report(), 2, "edge-1: its agent reports 0 DRBD resources; it had 2"},
		{"none reported", &nwv1.NodewrightAgentStatus{}, 2, "edge-1: its agent reports no DRBD state; it had 2 resources"},
	} {
		if got := DRBDRed(c.a, "edge-1", c.had); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// A status of two resources, the second without quorum ("quorum": false; from
// ha-cluster-exporter, internal/drbd/testdata/status), parsed as the agent parses
// drbdsetup status --json and reported as it reports, is red naming that one.
func TestDRBDRedSeesQuorumLostInAStatus(t *testing.T) {
	raw, err := os.ReadFile("../drbd/testdata/status/ha-cluster-exporter-two-resources.json")
	if err != nil {
		t.Fatal(err)
	}
	resources, err := drbd.ParseStatus(raw)
	if err != nil {
		t.Fatal(err)
	}
	a := &nwv1.NodewrightAgentStatus{Status: nwv1.NodewrightAgentStatusStatus{Storage: agent.DRBDStatus(resources)}}
	if got, want := DRBDRed(a, "edge-1", 2), "edge-1: DRBD lost quorum on 1-single-1/0"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
