package agent

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestCheckChange: what a verified profile lets through, and what the agent insists on
// whatever the operation says; each refusal names the field and why.
func TestCheckChange(t *testing.T) {
	profile := func(topology nwv1.Topology) *nwv1.EdgeProfile {
		return &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: nwv1.EdgeProfileSpec{Version: "1.2.0", Topology: topology,
			Network: nwv1.ProfileNetwork{BondInterface: "bond0", BondMode: nwv1.BondModeActiveBackup, AllowedBondModes: []nwv1.BondMode{nwv1.BondMode8023AD}}}}
	}
	// On the storage network: 10.0.0.0/24 through bond0, 10.0.0.1 the node's own.
	through := func(bond string, ip net.IP) error {
		switch {
		case ip.Equal(net.ParseIP("10.0.0.1")):
			return fmt.Errorf("not reached through the bond: %s is an address of this node", ip)
		case !(&net.IPNet{IP: net.ParseIP("10.0.0.0"), Mask: net.CIDRMask(24, 32)}).Contains(ip):
			return fmt.Errorf("not reached through the bond: %s leaves this node by eth0, not by %s", ip, bond)
		}
		return nil
	}
	change := func(bond string, mode nwv1.BondMode, probes nwv1.BondProbes) *nwv1.SetBondModeOperation {
		return &nwv1.SetBondModeOperation{Bond: bond, Mode: mode, Probes: probes}
	}
	peers := func(p ...string) nwv1.BondProbes { return nwv1.BondProbes{Peers: p} }
	off := nwv1.BondProbes{APIServer: ptr.To(false), DRBDConnections: ptr.To(false)}
	for _, tc := range []struct {
		name     string
		change   *nwv1.SetBondModeOperation
		topology nwv1.Topology
		reason   string
		message  string
	}{
		{"an allowed mode, a peer, the API server by default", change("bond0", nwv1.BondMode8023AD, peers("10.0.0.2")), nwv1.TopologyThreeNode, "", ""},
		{"the profile's own mode, every probe asked for", change("bond0", nwv1.BondModeActiveBackup,
			nwv1.BondProbes{Peers: []string{"10.0.0.2", "10.0.0.3"}, APIServer: ptr.To(true), DRBDConnections: ptr.To(true)}), nwv1.TopologyThreeNode, "", ""},
		{"a single node has no peer to probe", change("bond0", nwv1.BondMode8023AD, nwv1.BondProbes{}), nwv1.TopologySingleNode, "", ""},
		{"without DRBD's probe", change("bond0", nwv1.BondMode8023AD, nwv1.BondProbes{Peers: []string{"10.0.0.2"}, DRBDConnections: ptr.To(false)}),
			nwv1.TopologyTwoNodeTiebreaker, "", ""},
		{"another bond", change("bond1", nwv1.BondMode8023AD, peers("10.0.0.2")), nwv1.TopologyThreeNode, ReasonNotAllowed,
			"spec.setBondMode.bond: bond1 is not the storage bond of the EdgeProfile site 1.2.0 in force (bond0): the agent changes no other bond"},
		{"a mode the profile does not allow", change("bond0", nwv1.BondModeBalanceRR, peers("10.0.0.2")), nwv1.TopologyThreeNode, ReasonNotAllowed,
			"spec.setBondMode.mode: balance-rr is not allowed by the EdgeProfile site 1.2.0 in force, which allows active-backup, 802.3ad (spec.network.bondMode and allowedBondModes)"},
		{"every probe off", change("bond0", nwv1.BondMode8023AD, off), nwv1.TopologyThreeNode, ReasonProbesRequired,
			"spec.setBondMode.probes.apiServer: false, but the agent always probes the API server after a bond change"},
		{"every probe off on a single node", change("bond0", nwv1.BondMode8023AD, off), nwv1.TopologySingleNode, ReasonProbesRequired,
			"spec.setBondMode.probes.apiServer: false"},
		{"the API server off, peers on", change("bond0", nwv1.BondMode8023AD, nwv1.BondProbes{Peers: []string{"10.0.0.2"}, APIServer: ptr.To(false)}),
			nwv1.TopologyThreeNode, ReasonProbesRequired, "spec.setBondMode.probes.apiServer: false"},
		{"no peer where the site has several nodes", change("bond0", nwv1.BondMode8023AD, nwv1.BondProbes{}), nwv1.TopologyThreeNode, ReasonProbesRequired,
			"spec.setBondMode.probes.peers: empty, but the EdgeProfile site 1.2.0 in force has the topology ThreeNode: the agent probes at least one peer through bond0 after a bond change"},
		{"no peer beside a tiebreaker", change("bond0", nwv1.BondMode8023AD, nwv1.BondProbes{}), nwv1.TopologyTwoNodeTiebreaker, ReasonProbesRequired,
			"spec.setBondMode.probes.peers: empty, but the EdgeProfile site 1.2.0 in force has the topology TwoNodeTiebreaker"},
		{"the node's own address as a peer", change("bond0", nwv1.BondMode8023AD, peers("10.0.0.2", "10.0.0.1")), nwv1.TopologyThreeNode, ReasonProbesRequired,
			"spec.setBondMode.probes.peers[1]: not reached through the bond: 10.0.0.1 is an address of this node: a probe of it would not show whether bond0 carries traffic"},
		{"a peer behind another link", change("bond0", nwv1.BondMode8023AD, peers("192.168.1.10")), nwv1.TopologyThreeNode, ReasonProbesRequired,
			"spec.setBondMode.probes.peers[0]: not reached through the bond: 192.168.1.10 leaves this node by eth0, not by bond0"},
		{"a peer behind another link, on a single node", change("bond0", nwv1.BondMode8023AD, peers("192.168.1.10")), nwv1.TopologySingleNode, ReasonProbesRequired,
			"spec.setBondMode.probes.peers[0]: not reached through the bond"},
		{"a peer that is no address", change("bond0", nwv1.BondMode8023AD, peers("edge-2")), nwv1.TopologyThreeNode, ReasonProbesRequired,
			`spec.setBondMode.probes.peers[0]: "edge-2" is not an IP address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkChange(tc.change, profile(tc.topology), through)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var refused *OperationError
			if !errors.As(err, &refused) || refused.Reason != tc.reason || refused.RolledBack || !strings.HasPrefix(refused.Message, tc.message) {
				t.Fatalf("got %v; want %s: %s", err, tc.reason, tc.message)
			}
		})
	}
}
