package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/profile"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// What a compromised operator may write: any NodeOperation for any node (the agents' namespace
// is where it creates them), and the NodewrightCluster's spec.profileRef, pointing it at any
// EdgeProfile that exists (it cannot create or change one). These tests write exactly that, as
// it would, and run a real agent process on the played network, which must refuse each such
// change before it touches the host.

// ask asks node's agent, as a compromised operator would, to set mode with probes.
func (s *bondSite) ask(name, node string, mode nwv1.BondMode, probes nwv1.BondProbes) *nwv1.NodeOperation {
	s.t.Helper()
	op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationSetBondMode,
			Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			SetBondMode: &nwv1.SetBondModeOperation{Bond: netsite.Bond, Mode: mode,
				CheckpointTimeout: metav1.Duration{Duration: 2 * time.Minute}, Probes: probes}}}
	if err := env.Client.Create(context.Background(), op); err != nil {
		s.t.Fatal(err)
	}
	return op
}

// settled: the operation has ended, or its change is made and waits for its commit (what the
// agent did before it was checked against the profile).
func settled(op *nwv1.NodeOperation) string {
	switch {
	case op.Status.Phase == nwv1.OperationSucceeded || op.Status.Phase == nwv1.OperationFailed || op.Status.Phase == nwv1.OperationRolledBack:
		return ""
	case op.Status.Result != nil && op.Status.Result.CheckpointExpires != nil:
		return ""
	}
	return "not settled"
}

// refused waits for op to settle and checks that the agent refused it with reason, its
// message saying what; and that the node's bond still runs mode after changes changes,
// with mode persisted (or nothing, when persisted is empty): the host untouched.
func (s *bondSite) refused(op *nwv1.NodeOperation, node, reason, what string, mode nwv1.BondMode, changes int, persisted string) {
	s.t.Helper()
	s.until(op, settled)
	got := ""
	if op.Status.Error != nil {
		got = op.Status.Error.Reason + ": " + op.Status.Error.Message
	}
	if op.Status.Phase != nwv1.OperationFailed || op.Status.Error == nil || op.Status.Error.Reason != reason || !strings.Contains(op.Status.Error.Message, what) {
		s.t.Errorf("%s: %s %q; want Failed, %s, saying %q", op.Name, op.Status.Phase, got, reason, what)
	}
	if m, n, p := s.mode(node), s.changes(node), s.persisted(node); m != mode || n != changes || p != persisted {
		s.t.Errorf("after %s: the bond runs %s after %d changes, persisted %q; want %s after %d, persisted %q: the host untouched",
			op.Name, m, n, p, mode, changes, persisted)
	}
}

// pointAt sets the NodewrightCluster's spec.profileRef to name, as a compromised operator can.
func pointAt(t *testing.T, name string) {
	t.Helper()
	nwc := &nwv1.NodewrightCluster{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
		t.Fatal(err)
	}
	nwc.Spec.ProfileRef = &nwv1.ProfileReference{Name: name}
	if err := env.Client.Update(context.Background(), nwc); err != nil {
		t.Fatal(err)
	}
}

// laxProfile is a profile of the played site that also allows balance-rr, which the signed
// one in force does not, at version, signed with key (unsigned when nil); when changed, key
// signed it before balance-rr was added, so that its signature no longer covers its spec.
func laxProfile(t *testing.T, name, version string, key *profile.PrivateKey, changed bool) *nwv1.EdgeProfile {
	t.Helper()
	p := &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nwv1.EdgeProfileSpec{Version: version,
		Topology: nwv1.TopologyThreeNode, OS: nwv1.HostOSSystemdNetworkd, Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR},
		Network: nwv1.ProfileNetwork{BondInterface: netsite.Bond, BondMode: nwv1.BondModeActiveBackup,
			AllowedBondModes: []nwv1.BondMode{nwv1.BondMode8023AD}}}}
	if !changed {
		p.Spec.Network.AllowedBondModes = append(p.Spec.Network.AllowedBondModes, nwv1.BondModeBalanceRR)
	}
	if key != nil {
		sig, err := profile.Sign(p.Spec, key)
		if err != nil {
			t.Fatal(err)
		}
		p.Signature = sig
	}
	if changed {
		p.Spec.Network.AllowedBondModes = append(p.Spec.Network.AllowedBondModes, nwv1.BondModeBalanceRR)
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })
	return p
}

// TestACompromisedOperatorCannotMakeABadModeStick: a real agent on the played network, its
// switch port carrying active-backup, 802.3ad and even balance-rr, and the signed EdgeProfile
// in force allowing active-backup and 802.3ad. The agent refuses, before it touches the host,
// a SetBondMode with every probe off, one whose only peer is its own address, and one to
// balance-rr; it makes and keeps the change to 802.3ad that the flip would ask for; then,
// with spec.profileRef pointed at a profile that allows balance-rr but is unsigned, signed
// and then changed, signed by a key that is not trusted, or signed but older than the one it
// changed its bond under, it refuses balance-rr each time. The bond's mode, as the played
// network keeps it, and its persisted configuration say the host was untouched.
func TestACompromisedOperatorCannotMakeABadModeStick(t *testing.T) {
	s := newBondSite(t, "prof-edge-1", "prof-edge-2")
	node := "prof-edge-1"
	s.net.Expect(node, nwv1.BondModeActiveBackup, nwv1.BondMode8023AD, nwv1.BondModeBalanceRR)
	s.start(node)
	s.reported(node, nwv1.BondModeActiveBackup)
	peers := s.net.Peers(node)
	probes := nwv1.BondProbes{Peers: peers, APIServer: ptr.To(true), DRBDConnections: ptr.To(false)}
	own := s.net.Node(node).Address

	// Changes the operation itself makes unsafe.
	s.refused(s.ask("every-probe-off", node, nwv1.BondMode8023AD, nwv1.BondProbes{APIServer: ptr.To(false), DRBDConnections: ptr.To(false)}),
		node, "ProbesRequired", "spec.setBondMode.probes.apiServer: false, but the agent always probes the API server after a bond change",
		nwv1.BondModeActiveBackup, 0, "")
	s.refused(s.ask("no-peer", node, nwv1.BondMode8023AD, nwv1.BondProbes{APIServer: ptr.To(true), DRBDConnections: ptr.To(false)}),
		node, "ProbesRequired", "spec.setBondMode.probes.peers: empty, but the EdgeProfile played-site 1.0.0 in force has the topology ThreeNode",
		nwv1.BondModeActiveBackup, 0, "")
	s.refused(s.ask("own-address", node, nwv1.BondMode8023AD, nwv1.BondProbes{Peers: []string{own}, APIServer: ptr.To(true), DRBDConnections: ptr.To(false)}),
		node, "ProbesRequired", "spec.setBondMode.probes.peers[0]: not reached through the bond: "+own+" is an address of this node",
		nwv1.BondModeActiveBackup, 0, "")
	s.refused(s.ask("loopback", node, nwv1.BondMode8023AD, nwv1.BondProbes{Peers: []string{"127.0.0.1"}, APIServer: ptr.To(true), DRBDConnections: ptr.To(false)}),
		node, "ProbesRequired", "spec.setBondMode.probes.peers[0]: not reached through the bond: 127.0.0.1 is an address of this node",
		nwv1.BondModeActiveBackup, 0, "")
	s.refused(s.ask("not-allowed", node, nwv1.BondModeBalanceRR, probes),
		node, "NotAllowedByProfile", "spec.setBondMode.mode: balance-rr is not allowed by the EdgeProfile played-site 1.0.0 in force, which allows active-backup, 802.3ad",
		nwv1.BondModeActiveBackup, 0, "")

	// The change the flip asks for passes, and is kept.
	op := s.ask("allowed", node, nwv1.BondMode8023AD, probes)
	s.until(op, armed(nwv1.BondMode8023AD))
	s.until(s.commitOf("commit-allowed", node, "allowed"), ended(nwv1.OperationSucceeded, ""))
	s.until(op, ended(nwv1.OperationSucceeded, ""))
	if m, n := s.mode(node), s.changes(node); m != nwv1.BondMode8023AD || n != 1 {
		t.Fatalf("after the allowed change: %s after %d changes; want 802.3ad after one", m, n)
	}

	// Profiles that would allow balance-rr, in force by the operator's say alone.
	trusted, err := clusterplay.SigningKey()
	if err != nil {
		t.Fatal(err)
	}
	priv, _, err := profile.GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := profile.LoadPrivateKey(priv, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		profile *nwv1.EdgeProfile
		says    string
	}{
		{laxProfile(t, "lax-unsigned", "1.0.0", nil, false), "signature: the profile is not signed"},
		{laxProfile(t, "lax-changed", "1.0.0", trusted, true),
			"signature: the signature does not verify: it is not a signature of this spec by the trusted key " + string(trusted.Public().ID())},
		{laxProfile(t, "lax-other-key", "1.0.0", other, false), "signature: the signature does not verify"},
		{laxProfile(t, "lax-older", "0.9.0", trusted, false), "has version 0.9.0, lower than the version 1.0.0 of the EdgeProfile played-site this node verified before"},
	} {
		pointAt(t, tc.profile.Name)
		s.refused(s.ask("rr-"+tc.profile.Name, node, nwv1.BondModeBalanceRR, probes), node, "ProfileNotTrusted", tc.says,
			nwv1.BondMode8023AD, 1, string(nwv1.BondMode8023AD))
	}
	// The node's report still says what the host runs.
	s.reported(node, nwv1.BondMode8023AD)
}
