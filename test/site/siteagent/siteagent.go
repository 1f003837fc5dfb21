// Package siteagent builds the node agent for the local site (the nodewright_site build, which
// plays bonds and DRBD) once per test binary, and runs it as a real process for a node of a
// played storage network (test/site/netsite), in the node's network namespace.
package siteagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

var binary struct {
	once sync.Once
	path string
	err  error
}

// Build builds the agent for the local site once for the test binary and returns its path.
// Remove removes it: call it from TestMain once the tests ran.
func Build(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "nodewright-site-agent-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "agent")
		cmd := exec.Command("go", "build", "-tags", "nodewright_site", "-o", binary.path, "github.com/spectrocloud/nodewright/cmd/agent")
		if out, err := cmd.CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("building the agent: %w\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// Remove removes the agent Build built, if it did.
func Remove() {
	if binary.path != "" {
		_ = os.RemoveAll(filepath.Dir(binary.path))
	}
}

// Options are one agent's settings.
type Options struct {
	// Kubeconfig reaches the API server from the node's namespace (netsite's APIServer).
	Kubeconfig string
	// Namespace is the agents' namespace.
	Namespace string
	// StateDir is the agent's state folder; a new one of the test's when empty.
	StateDir string
	// Defaults runs the agent at its default heartbeat and report intervals, as installed,
	// rather than every second.
	Defaults bool
	// Kairos, when set, is the node's played Kairos host (test/site/kairosplay), its Root the
	// node's (netsite's Node.Root), installed (Host.Install) before Start: the agent runs with --host-os Kairos, --host-proc
	// <root>/proc and --site-kairos-dir <Dir>, and Start supervises it (Supervised): when its
	// process ends with a reboot requested, the host is booted (Host.Boot) and the agent
	// started again with the same arguments, unless the node does not come back. Its DRBDDir
	// is set to the node's played DRBD when empty.
	Kairos *kairosplay.Host
}

// Start runs node's agent in node's network namespace of n, its heartbeat every 2 s and its
// report every second (unless o.Defaults), its bond and DRBD played from the node's folders, until the test
// ends (its output logged when the test failed). It returns the process, for a test to kill
// it sooner.
func Start(t testing.TB, n *netsite.Network, node string, o Options) *exec.Cmd {
	t.Helper()
	nd := n.Node(node)
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	hostOS := string(nwv1.HostOSSystemdNetworkd)
	if o.Kairos != nil {
		hostOS = string(nwv1.HostOSKairos)
	}
	args := []string{"--kubeconfig", o.Kubeconfig, "--node-name", node, "--namespace", o.Namespace,
		"--network-backend", "site", "--site-bond-dir", nd.Bond.Dir,
		"--host-root", nd.Root, "--state-dir", o.StateDir, "--host-os", hostOS,
		"--storage-bond", netsite.Bond, "--site-drbd-dir", nd.DRBDDir}
	if !o.Defaults {
		// A heartbeat every 2 s holds the Lease 8 s: a test of a dead agent sees it stale soon,
		// and a busy machine does not make a live one look dead.
		args = append(args, "--heartbeat-interval", "2s", "--report-interval", "1s")
	}
	if o.Kairos != nil {
		return startKairos(t, n, node, o.Kairos, args)
	}
	cmd := n.Command(node, append([]string{Build(t)}, args...)...)
	log := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent %s:\n%s", node, log)
		}
	})
	return cmd
}

// Kill stops an agent Start started, for good and without a word (SIGKILL): its heartbeat
// Lease is not renewed again. A supervised agent (Options.Kairos) is not started again: a
// kill is not a reboot.
func Kill(cmd *exec.Cmd) {
	if s := Supervised(cmd); s != nil {
		s.kill()
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// Lease is node's heartbeat Lease in the agents' namespace ns, as c reads it, and how long its
// last renewal holds (its duration).
func Lease(t testing.TB, c client.Reader, ns, node string) (*coordinationv1.Lease, time.Duration) {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: node}, l); err != nil {
		t.Fatal(err)
	}
	return l, time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
}
