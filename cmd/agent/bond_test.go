package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// The bond tests run each agent as a real process of the agent built for the local site (its
// bond played on a veth, test/site/netsite), in its own network namespace, joined to the other
// nodes and to the API server through a bridge: its probes are real ICMP echoes and HTTPS
// requests, and a switch port that does not carry a mode really carries nothing.

// bondSite is a played network with its nodes, a namespace for their operations, and the
// agents.
type bondSite struct {
	t          *testing.T
	net        *netsite.Network
	ns         string
	kubeconfig string
	binary     string
	stateDirs  map[string]string
}

func newBondSite(t *testing.T, nodes ...string) *bondSite {
	t.Helper()
	n := netsite.New(t, nwv1.BondModeActiveBackup, nodes...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go n.Run(ctx)
	s := &bondSite{t: t, net: n, ns: env.Namespace(t), binary: siteAgent.binary(t), stateDirs: map[string]string{}}
	s.kubeconfig = n.APIServer(t, env.Kubeconfig(t))
	// The EdgeProfile in force, signed, its switch carrying active-backup and 802.3ad, and the
	// trusted key where the agents read it by default: they check every change against it.
	cleanup, err := clusterplay.Managed(context.Background(), env.Client, netsite.Bond, nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	for _, name := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.Client.Create(context.Background(), node); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), node)
			_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
		s.stateDirs[name] = t.TempDir()
	}
	return s
}

// start runs node's agent in node's namespace; it is killed at the test's end.
func (s *bondSite) start(node string) *exec.Cmd {
	t := s.t
	n := s.net.Node(node)
	cmd := s.net.Command(node, s.binary, "--kubeconfig", s.kubeconfig, "--node-name", node, "--namespace", s.ns,
		"--heartbeat-interval", "1s", "--network-backend", "site", "--site-bond-dir", n.Bond.Dir,
		"--host-root", n.Root, "--state-dir", s.stateDirs[node], "--host-os", string(nwv1.HostOSSystemdNetworkd),
		"--storage-bond", netsite.Bond, "--report-interval", "1s")
	return startAgent(t, "agent "+node, cmd, os.Kill)
}

// setBondMode asks node's agent to change its bond to mode, probing its peers and the API
// server.
func (s *bondSite) setBondMode(name, node string, mode nwv1.BondMode, timeout time.Duration) *nwv1.NodeOperation {
	op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationSetBondMode,
			Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			SetBondMode: &nwv1.SetBondModeOperation{Bond: netsite.Bond, Mode: mode,
				CheckpointTimeout: metav1.Duration{Duration: timeout},
				Probes: nwv1.BondProbes{Peers: s.net.Peers(node), APIServer: ptr.To(true),
					// No DRBD here: drbdsetup needs the kernel module this machine lacks.
					DRBDConnections: ptr.To(false)}}}}
	if err := env.Client.Create(context.Background(), op); err != nil {
		s.t.Fatal(err)
	}
	return op
}

// reported waits until node's NodewrightAgentStatus, written by its agent, shows its bond in
// mode with every member up.
func (s *bondSite) reported(node string, mode nwv1.BondMode) {
	s.t.Helper()
	testenv.Eventually(s.t, patience, func() string {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, as); err != nil {
			return err.Error()
		}
		b := as.Status.Network.Bond
		if as.Status.Reporter != nwv1.ReporterAgent || b == nil || b.Interface != netsite.Bond || b.Mode != mode ||
			as.Status.Network.BondMode != mode || len(b.Members) == 0 {
			return fmt.Sprintf("%s reports %s / %+v; want %s %s with its members", node, as.Status.Reporter, b, netsite.Bond, mode)
		}
		for _, m := range b.Members {
			if !m.Up {
				return fmt.Sprintf("%s reports member %s down", node, m.Name)
			}
		}
		return ""
	})
}

func (s *bondSite) commit(name, node string) *nwv1.NodeOperation {
	return s.commitOf(name, node, "")
}

// commitOf commits the change of the operation called of ("": the bond's change, whichever).
func (s *bondSite) commitOf(name, node, of string) *nwv1.NodeOperation {
	op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationCommitCheckpoint,
			Deadline:         metav1.NewTime(time.Now().Add(time.Hour)),
			CommitCheckpoint: &nwv1.CommitCheckpointOperation{Bond: netsite.Bond, Operation: of}}}
	if err := env.Client.Create(context.Background(), op); err != nil {
		s.t.Fatal(err)
	}
	return op
}

// until waits for op to satisfy cond, which says what is missing.
func (s *bondSite) until(op *nwv1.NodeOperation, cond func(*nwv1.NodeOperation) string) {
	s.t.Helper()
	testenv.Eventually(s.t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(op), op); err != nil {
			return err.Error()
		}
		if why := cond(op); why != "" {
			return fmt.Sprintf("%s: %s (status %+v)", op.Name, why, op.Status)
		}
		return ""
	})
}

func ended(phase nwv1.NodeOperationPhase, reason string) func(*nwv1.NodeOperation) string {
	return func(op *nwv1.NodeOperation) string {
		if op.Status.Phase != phase {
			return "not " + string(phase)
		}
		got := ""
		if op.Status.Error != nil {
			got = op.Status.Error.Reason
		}
		if got != reason {
			return fmt.Sprintf("reason %q, want %q", got, reason)
		}
		return ""
	}
}

// armed: the change is made, every probe answered, and the checkpoint waits for its commit.
func armed(mode nwv1.BondMode) func(*nwv1.NodeOperation) string {
	return func(op *nwv1.NodeOperation) string {
		r := op.Status.Result
		switch {
		case op.Status.Phase != nwv1.OperationRunning:
			return "not Running"
		case r == nil || r.CheckpointExpires == nil:
			return "no checkpoint yet"
		case r.Bond == nil || r.Bond.Mode != mode:
			return "the bond is not in " + string(mode)
		case len(r.Probes) == 0:
			return "no probe results"
		}
		for _, p := range r.Probes {
			if !p.OK {
				return "probe " + p.Target + " failed: " + p.Message
			}
		}
		return ""
	}
}

func (s *bondSite) mode(node string) nwv1.BondMode {
	raw, err := os.ReadFile(s.net.Node(node).Bond.ModeFile(netsite.Bond))
	if err != nil {
		s.t.Fatal(err)
	}
	return nwv1.BondMode(strings.TrimSpace(string(raw)))
}

// changes counts the mode changes made to node's bond.
func (s *bondSite) changes(node string) int {
	raw, err := os.ReadFile(s.net.Node(node).Bond.ChangesFile(netsite.Bond))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.Count(string(raw), "\n")
}

// persisted is the mode the node's persistent configuration says, "" when it says none.
func (s *bondSite) persisted(node string) string {
	raw, err := os.ReadFile(filepath.Join(s.net.Node(node).Root, "etc/systemd/network/10-nodewright-bond0.netdev"))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		s.t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode="); ok {
			return mode
		}
	}
	return "?"
}

// TestABondChangeIsCheckedAndCommitted: three nodes; the first changes its bond to 802.3ad,
// which its switch port carries: every probe answers, the change waits for its commit, and
// the commit keeps it, at runtime and in the persistent configuration.
func TestABondChangeIsCheckedAndCommitted(t *testing.T) {
	s := newBondSite(t, "bond-edge-1", "bond-edge-2", "bond-edge-3")
	s.net.Expect("bond-edge-1", nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	for _, node := range []string{"bond-edge-1", "bond-edge-2", "bond-edge-3"} {
		s.start(node)
	}
	// Each agent reports its node's bond, as it reads it.
	s.reported("bond-edge-1", nwv1.BondModeActiveBackup)
	op := s.setBondMode("flip-1", "bond-edge-1", nwv1.BondMode8023AD, 2*time.Minute)
	s.until(op, armed(nwv1.BondMode8023AD))
	if op.Status.Result.PreviousMode != nwv1.BondModeActiveBackup || len(op.Status.Result.Probes) != 3 {
		t.Errorf("result %+v; want previous active-backup and three probes (two peers, the API server)", op.Status.Result)
	}
	if got := s.persisted("bond-edge-1"); got != string(nwv1.BondMode8023AD) {
		t.Errorf("persisted mode %q while waiting for the commit; want 802.3ad", got)
	}
	// A commit naming another operation keeps nothing.
	stray := s.commitOf("commit-stray", "bond-edge-1", "flip-0")
	s.until(stray, ended(nwv1.OperationFailed, "NoCheckpoint"))
	commit := s.commitOf("commit-1", "bond-edge-1", "flip-1")
	s.until(commit, ended(nwv1.OperationSucceeded, ""))
	s.until(op, ended(nwv1.OperationSucceeded, ""))
	if s.mode("bond-edge-1") != nwv1.BondMode8023AD || s.persisted("bond-edge-1") != string(nwv1.BondMode8023AD) || s.changes("bond-edge-1") != 1 {
		t.Errorf("after the commit: mode %s, persisted %q, %d changes; want 802.3ad, kept, one change",
			s.mode("bond-edge-1"), s.persisted("bond-edge-1"), s.changes("bond-edge-1"))
	}
	// A second commit has nothing to commit, but says the last one was.
	again := s.commit("commit-2", "bond-edge-1")
	s.until(again, ended(nwv1.OperationSucceeded, ""))
	// The node's report says the new mode; the others' the old one.
	s.reported("bond-edge-1", nwv1.BondMode8023AD)
	s.reported("bond-edge-2", nwv1.BondModeActiveBackup)
}

// TestAPortThatNeverCarriesTheModeIsRolledBack: the switch's port for the node never carries
// 802.3ad; the agent's probes fail, it restores active-backup by itself, probes healthy again
// and reports RolledBack.
func TestAPortThatNeverCarriesTheModeIsRolledBack(t *testing.T) {
	s := newBondSite(t, "bond-edge-1", "bond-edge-2")
	s.net.Expect("bond-edge-1", nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	s.net.NeverCarry("bond-edge-1", nwv1.BondMode8023AD)
	s.start("bond-edge-1")
	op := s.setBondMode("flip-bad-port", "bond-edge-1", nwv1.BondMode8023AD, 20*time.Second)
	s.until(op, ended(nwv1.OperationRolledBack, "ProbeFailed"))
	if s.mode("bond-edge-1") != nwv1.BondModeActiveBackup || s.persisted("bond-edge-1") != "" || s.changes("bond-edge-1") != 2 {
		t.Errorf("after the rollback: mode %s, persisted %q, %d changes; want active-backup, nothing persisted, two changes",
			s.mode("bond-edge-1"), s.persisted("bond-edge-1"), s.changes("bond-edge-1"))
	}
	for _, p := range op.Status.Result.Probes {
		if !p.OK {
			t.Errorf("after the restore probe %s failed: %s", p.Target, p.Message)
		}
	}
	if msg := op.Status.Error.Message; !strings.Contains(msg, "bond-edge-2") && !strings.Contains(msg, s.net.Node("bond-edge-2").Address) {
		t.Errorf("the message %q does not name the peer that did not answer", msg)
	}
	// Nothing left to commit.
	commit := s.commit("commit-late", "bond-edge-1")
	s.until(commit, ended(nwv1.OperationFailed, "NoCheckpoint"))
}

// TestCutOffTheAPIServerTheNodeRollsBackByItself: the change works, but then the node's link
// to the API server is cut, so no commit can reach it. At the checkpoint's expiry the agent
// restores the previous mode by itself, while still cut off, and reports RolledBack
// (NotCommitted) once it reaches the API server again.
func TestCutOffTheAPIServerTheNodeRollsBackByItself(t *testing.T) {
	s := newBondSite(t, "bond-edge-1", "bond-edge-2")
	s.net.Expect("bond-edge-1", nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	s.start("bond-edge-1")
	op := s.setBondMode("flip-cut", "bond-edge-1", nwv1.BondMode8023AD, 10*time.Second)
	s.until(op, armed(nwv1.BondMode8023AD))
	s.net.CutAPIServer("bond-edge-1", true)
	expires := op.Status.Result.CheckpointExpires.Time
	testenv.Eventually(t, patience, func() string {
		if m := s.mode("bond-edge-1"); m != nwv1.BondModeActiveBackup {
			return "the cut-off node still runs " + string(m)
		}
		return ""
	})
	restored := time.Now()
	if restored.Before(expires) {
		t.Errorf("restored at %s, before the checkpoint expired at %s", restored, expires)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(op), op); err != nil {
		t.Fatal(err)
	}
	if op.Status.Phase != nwv1.OperationRunning {
		t.Errorf("while cut off the operation shows %s; the agent could not have written it", op.Status.Phase)
	}
	s.net.CutAPIServer("bond-edge-1", false)
	s.until(op, ended(nwv1.OperationRolledBack, "NotCommitted"))
	if s.persisted("bond-edge-1") != "" {
		t.Errorf("the persistent configuration still says %q after the rollback", s.persisted("bond-edge-1"))
	}
}

// TestAKilledAgentNeverChangesTheBondTwice: the agent is killed while its change waits for
// the commit; started again, it finds its checkpoint, does not change the bond again (the
// operation still says it changed it from active-backup), and takes the commit.
func TestAKilledAgentNeverChangesTheBondTwice(t *testing.T) {
	s := newBondSite(t, "bond-edge-1", "bond-edge-2")
	s.net.Expect("bond-edge-1", nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	agent := s.start("bond-edge-1")
	op := s.setBondMode("flip-killed", "bond-edge-1", nwv1.BondMode8023AD, 2*time.Minute)
	s.until(op, armed(nwv1.BondMode8023AD))
	if err := agent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	s.start("bond-edge-1")
	commit := s.commit("commit-after-restart", "bond-edge-1")
	s.until(commit, ended(nwv1.OperationSucceeded, ""))
	s.until(op, ended(nwv1.OperationSucceeded, ""))
	if n, prev := s.changes("bond-edge-1"), op.Status.Result.PreviousMode; n != 1 || prev != nwv1.BondModeActiveBackup {
		t.Errorf("%d changes to the bond, previous mode %q; want exactly one, from active-backup", n, prev)
	}
}

// TestAnAgentStartedAfterItsCheckpointExpiredRollsBack: killed while a change waits for its
// commit and started again only after the checkpoint expired, the agent restores the previous
// mode as it starts and reports RolledBack.
func TestAnAgentStartedAfterItsCheckpointExpiredRollsBack(t *testing.T) {
	s := newBondSite(t, "bond-edge-1", "bond-edge-2")
	s.net.Expect("bond-edge-1", nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	agent := s.start("bond-edge-1")
	op := s.setBondMode("flip-expired", "bond-edge-1", nwv1.BondMode8023AD, 10*time.Second)
	s.until(op, armed(nwv1.BondMode8023AD))
	if err := agent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	time.Sleep(time.Until(op.Status.Result.CheckpointExpires.Time)) // the checkpoint's expiry, not a wait on state
	if m := s.mode("bond-edge-1"); m != nwv1.BondMode8023AD {
		t.Fatalf("with no agent running the bond changed to %s", m)
	}
	s.start("bond-edge-1")
	s.until(op, ended(nwv1.OperationRolledBack, "NotCommitted"))
	if m, n := s.mode("bond-edge-1"), s.changes("bond-edge-1"); m != nwv1.BondModeActiveBackup || n != 2 {
		t.Errorf("mode %s after %d changes; want active-backup after two", m, n)
	}
}
