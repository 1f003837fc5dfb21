package main_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

// patience bounds every wait on the operator: long enough for a busy CI machine, and no cost
// to a passing test, which goes on as soon as the state holds.
const patience = 2 * time.Minute

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// replica is one operator process started by a test.
type replica struct {
	cmd        *exec.Cmd
	probeAddr  string
	metricAddr string
	log        *testenv.SyncBuffer
	done       chan error
}

// TestLeaderElectionProbesMetricsAndShutdown runs two operator replicas against a real API
// server: one holds the Lease, both are ready, metrics are served, and SIGTERM makes the
// leader exit cleanly and hand the Lease to the standby at once.
func TestLeaderElectionProbesMetricsAndShutdown(t *testing.T) {
	binary := buildOperator(t)
	kubeconfig := env.Kubeconfig(t)
	ns := env.Namespace(t)

	first := startReplica(t, binary, kubeconfig, ns)
	waitHTTP(t, "http://"+first.probeAddr+"/healthz", "")
	waitHTTP(t, "http://"+first.probeAddr+"/readyz", "")
	leader := waitForHolder(t, ns, func(holder string) bool { return holder != "" })
	waitHTTP(t, "http://"+first.metricAddr+"/metrics", fmt.Sprintf(`leader_election_master_status{name=%q} 1`, operator.DefaultLeaderElectionID))

	second := startReplica(t, binary, kubeconfig, ns)
	waitHTTP(t, "http://"+second.probeAddr+"/readyz", "")
	if holder := leaseHolder(t, ns); holder != leader {
		t.Fatalf("the Lease moved from %q to %q while the leader was healthy", leader, holder)
	}

	first.stop(t)
	if !strings.Contains(first.log.String(), "Stopped cleanly") {
		t.Errorf("the leader did not log a clean stop:\n%s", first.log)
	}
	// Released before it exited: the standby's takeover does not wait for the lease to run out.
	if holder := leaseHolder(t, ns); holder == leader {
		t.Errorf("the leader exited still holding the Lease")
	}
	successor := waitForHolder(t, ns, func(holder string) bool { return holder != "" && holder != leader })
	t.Logf("Lease passed from %s to %s", leader, successor)

	second.stop(t)
	waitForHolder(t, ns, func(holder string) bool { return holder == "" })
}

// TestRefusesBadFlags checks that inconsistent settings are refused with a message that
// names the flags, before anything starts.
func TestRefusesBadFlags(t *testing.T) {
	binary := buildOperator(t)
	cmd := exec.Command(binary, "--kubeconfig", env.Kubeconfig(t),
		"--leader-election-namespace", "default",
		"--leader-election-lease-duration", "5s", "--leader-election-renew-deadline", "10s")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the operator started with a renew deadline longer than the lease:\n%s", out)
	}
	if !strings.Contains(string(out), "--leader-election-renew-deadline (10s) must be shorter than --leader-election-lease-duration (5s)") {
		t.Errorf("the refusal does not name the flags:\n%s", out)
	}
}

func buildOperator(t *testing.T) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "operator")
	build := exec.Command("go", "build", "-o", binary, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}
	return binary
}

func startReplica(t *testing.T, binary, kubeconfig, ns string) *replica {
	t.Helper()
	r := &replica{probeAddr: testenv.FreeAddr(t), metricAddr: testenv.FreeAddr(t), log: &testenv.SyncBuffer{}, done: make(chan error, 1)}
	r.cmd = exec.Command(binary,
		"--kubeconfig", kubeconfig,
		"--leader-election-namespace", ns,
		"--health-probe-bind-address", r.probeAddr,
		"--metrics-bind-address", r.metricAddr,
		// A lease long enough that a busy machine never makes a healthy leader miss its
		// renewal: the standby can then only take over at once because the leader released
		// the Lease when it stopped.
		"--leader-election-lease-duration", "2m",
		"--leader-election-renew-deadline", "90s",
		"--leader-election-retry-period", "500ms",
		"--shutdown-timeout", "1m",
		// Two replicas without the webhook configurations: admission (tested with the
		// webhooks in internal/webhook and internal/operator) is off here.
		"--webhooks=false")
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting the operator: %v", err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("operator log:\n%s", r.log)
		}
	})
	return r
}

// stop sends SIGTERM and expects a zero exit well within the shutdown timeout.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("the operator exited with %v after SIGTERM:\n%s", err, r.log)
		}
	case <-time.After(patience):
		t.Fatalf("the operator did not exit within %s of SIGTERM:\n%s", patience, r.log)
	}
}

func leaseHolder(t *testing.T, ns string) string {
	t.Helper()
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: ns, Name: operator.DefaultLeaderElectionID}
	if err := env.Client.Get(context.Background(), key, lease); err != nil {
		return ""
	}
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

func waitForHolder(t *testing.T, ns string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		holder := leaseHolder(t, ns)
		if ok(holder) {
			return holder
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Lease holder is %q after %s", holder, patience)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitHTTP polls url until it answers 200 with a body containing want.
func waitHTTP(t *testing.T, url, want string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), want) {
				return
			}
			last = fmt.Sprintf("%s: %.300s", resp.Status, body)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 with %q within %s; last: %s", url, want, patience, last)
}

func TestRefusesAnAuditTrailWithoutAKey(t *testing.T) {
	binary := buildOperator(t)
	cmd := exec.Command(binary, "--kubeconfig", env.Kubeconfig(t), "--leader-election-namespace", "default",
		"--audit-dir", t.TempDir(), "--audit-checkpoint-configmap", "nowhere", "--audit-actor", strings.Repeat("é", 1024))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the operator started with an audit trail it cannot sign:\n%s", out)
	}
	for _, want := range []string{"--audit-dir needs --audit-key-file", "--audit-checkpoint-configmap", "nowhere", "want namespace/name",
		"--audit-actor: 2048 bytes, at most 1024"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
}
