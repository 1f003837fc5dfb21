package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
)

// The DRBD operations run end to end: a NodeOperation in the API server, the agent's runner,
// and the real drbdadm from drbd-utils in its dry-run mode (-d), as drbd-utils' own tests run
// it without the kernel module this machine lacks, on node-a of LINSTOR-shaped resource files
// (internal/drbd/testdata/drbd: resource R3 on node-a, node-b and the tiebreaker node-c).
const r3 = "pvc-4f6d0c1e-2b7a-4c3e-9d1a-7e5b8c2f0a11"

func drbdadmDryRun(t *testing.T) *agent.DRBD {
	t.Helper()
	path, err := exec.LookPath("drbdadm")
	if err != nil {
		path = "/usr/sbin/drbdadm"
		if _, statErr := os.Stat(path); statErr != nil {
			if os.Getenv("NODEWRIGHT_REQUIRE_DRBD_UTILS") != "" {
				t.Fatalf("drbdadm is not installed and NODEWRIGHT_REQUIRE_DRBD_UTILS is set: make drbd-utils installs it")
			}
			t.Skip("drbdadm is not installed (Debian's drbd-utils; make drbd-utils installs it)")
		}
	}
	conf, err := filepath.Abs(filepath.Join("..", "drbd", "testdata", "drbd", "drbd.conf"))
	if err != nil {
		t.Fatal(err)
	}
	return &agent.DRBD{
		Runner: drbd.ExecRunner{Env: []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C",
			"DRBD_DRIVER_VERSION_OVERRIDE=9.2.12", "__DRBD_NODE__=node-a", "FAKE_DRBDSETUP_SHOW=" + os.DevNull}},
		Drbdadm: []string{path, "-d", "-c", conf},
	}
}

// verifyOf creates a DRBDVerify of r3 on node-a, named name in ns, its deadline an hour away.
func verifyOf(t *testing.T, ns, name string) *nwv1.NodeOperation {
	t.Helper()
	verify := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nwv1.NodeOperationSpec{NodeName: "node-a", Type: nwv1.OperationDRBDVerify, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			DRBDVerify: &nwv1.DRBDResourceOperation{Resource: r3}}}
	create(t, verify)
	return verify
}

func TestDRBDOperationsRunDrbdadm(t *testing.T) {
	d := drbdadmDryRun(t)
	// drbdadm is real; the kernel's state a verification is watched in is played.
	kernel := &drbdplay.Kernel{Real: d.Runner}
	kernel.AddResource(r3, "node-b", "node-c")
	d.Runner, d.VerifyPoll = kernel, 10*time.Millisecond
	ns := env.Namespace(t)
	runOperations(t, &agent.Operations{Node: "node-a", Namespace: ns, Executors: d.Executors()})
	op := func(name string, spec nwv1.NodeOperationSpec) *nwv1.NodeOperation {
		spec.NodeName, spec.Deadline = "node-a", metav1.NewTime(time.Now().Add(time.Hour))
		o := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
		create(t, o)
		return o
	}
	pause := op("pause", nwv1.NodeOperationSpec{Type: nwv1.OperationDRBDPauseSync, DRBDPauseSync: &nwv1.DRBDPeerOperation{Resource: r3, Peer: "node-b"}})
	resume := op("resume", nwv1.NodeOperationSpec{Type: nwv1.OperationDRBDResumeSync, DRBDResumeSync: &nwv1.DRBDPeerOperation{Resource: r3, Peer: "node-c"}})
	adjust := op("adjust", nwv1.NodeOperationSpec{Type: nwv1.OperationDRBDAdjust, DRBDAdjust: &nwv1.DRBDResourceOperation{Resource: r3}})
	stranger := op("stranger", nwv1.NodeOperationSpec{Type: nwv1.OperationDRBDPauseSync, DRBDPauseSync: &nwv1.DRBDPeerOperation{Resource: r3, Peer: "node-z"}})
	verify := op("verify", nwv1.NodeOperationSpec{Type: nwv1.OperationDRBDVerify, DRBDVerify: &nwv1.DRBDResourceOperation{Resource: r3}})

	for _, o := range []*nwv1.NodeOperation{pause, resume, adjust} {
		phaseOf(t, o, nwv1.OperationSucceeded)
	}
	got := phaseOf(t, stranger, nwv1.OperationFailed)
	if e := got.Status.Error; e == nil || e.Reason != agent.ReasonCommandFailed || !strings.Contains(e.Message, "drbdadm") || !strings.Contains(e.Message, "node-z") {
		t.Errorf("a pause towards a node that is not a peer: %+v; want CommandFailed quoting drbdadm", got.Status.Error)
	}
	got = phaseOf(t, verify, nwv1.OperationSucceeded)
	if r := got.Status.Result; r == nil || r.OutOfSyncKiB == nil || *r.OutOfSyncKiB != 0 {
		t.Errorf("a verify of a resource in sync: result %+v; want outOfSyncKiB 0", got.Status.Result)
	}
}

// TestDRBDVerifyReportsWhatItFound: drbdadm verify (real, in its dry-run mode) starts the
// verification, which the played kernel (test/site/drbdplay) carries on for a few status reads;
// the agent waits for its end and reports what it found out of sync, towards each peer.
func TestDRBDVerifyReportsWhatItFound(t *testing.T) {
	d := drbdadmDryRun(t)
	kernel := &drbdplay.Kernel{Real: d.Runner, VerifySteps: 4}
	kernel.AddResource(r3, "node-b", "node-c")
	kernel.Mismatch(r3, 4096)
	d.Runner, d.VerifyPoll = kernel, 10*time.Millisecond
	ns := env.Namespace(t)
	runOperations(t, &agent.Operations{Node: "node-a", Namespace: ns, Executors: d.Executors()})
	verify := verifyOf(t, ns, "verify-mismatch")
	got := phaseOf(t, verify, nwv1.OperationSucceeded)
	if r := got.Status.Result; r == nil || r.OutOfSyncKiB == nil || *r.OutOfSyncKiB != 2*4096 {
		t.Errorf("result %+v; want 8192 KiB out of sync (4096 towards each of the two peers)", got.Status.Result)
	}
}

// TestDRBDVerifyEndsAsDRBDAnnouncesIt: with a VerifyPoll of an hour, the verification's end is
// recorded because DRBD's events stream announces it and wakes the operation, as the agent
// wires them (cmd/agent).
func TestDRBDVerifyEndsAsDRBDAnnouncesIt(t *testing.T) {
	d := drbdadmDryRun(t)
	// The played verification lasts two status reads, the operation's first look and the one
	// its own write of Running brings; only the events can bring a third before the hour.
	kernel := &drbdplay.Kernel{Real: d.Runner, VerifySteps: 2}
	kernel.AddResource(r3, "node-b", "node-c")
	kernel.Mismatch(r3, 64)
	d.Runner, d.VerifyPoll = kernel, time.Hour
	ns := env.Namespace(t)
	ops := &agent.Operations{Node: "node-a", Namespace: ns, Executors: d.Executors()}
	events := &agent.DRBDEvents{Streamer: kernel, ProcDRBD: loadedDRBD(t), Changed: func() {
		for _, key := range d.Verifying() {
			ops.Wake(key)
		}
	}}
	run(t, events.Run)
	runOperations(t, ops)
	verify := verifyOf(t, ns, "verify-announced")
	got := phaseOf(t, verify, nwv1.OperationSucceeded)
	if r := got.Status.Result; r == nil || r.OutOfSyncKiB == nil || *r.OutOfSyncKiB != 2*64 {
		t.Errorf("result %+v; want 128 KiB out of sync (64 towards each of the two peers)", got.Status.Result)
	}
	if left := d.Verifying(); len(left) != 0 {
		t.Errorf("still verifying %v after the end", left)
	}
}

// TestDRBDVerifyCutShortIsStartedAgain: connections are lost while the verification runs (the
// played kernel's StandAlone fault hook). DRBD stops a peer's verification then, and what shows
// out of sync afterwards is no comparison's finding: the operation stays Running, and once
// the connections are back the agent starts the verification again and reports what that one
// found (the mismatch fault hook's 64 KiB towards each peer), where it used to report the cut
// verification's 0. Both peers lost, the verification ends while they are; one peer lost and
// back while the other peer's verification goes on, only a read during the cut shows it.
func TestDRBDVerifyCutShortIsStartedAgain(t *testing.T) {
	t.Run("both peers lost", func(t *testing.T) { testVerifyCutShort(t, "node-b", "node-c") })
	t.Run("one peer lost and back", func(t *testing.T) { testVerifyCutShort(t, "node-b") })
}

func testVerifyCutShort(t *testing.T, lost ...string) {
	d := drbdadmDryRun(t)
	faults := t.TempDir()
	kernel := &drbdplay.Kernel{Real: d.Runner, VerifySteps: 8, FaultDir: faults}
	kernel.AddResource(r3, "node-b", "node-c")
	// The state is read only when the operation runs: its own status writes bring a read or
	// three, fewer than the verification's steps; the test's wakes bring the others.
	d.Runner, d.VerifyPoll = kernel, time.Hour
	ns := env.Namespace(t)
	ops := &agent.Operations{Node: "node-a", Namespace: ns, Executors: d.Executors()}
	runOperations(t, ops)
	verify := verifyOf(t, ns, "verify-cut")
	key := client.ObjectKeyFromObject(verify)
	// The agent writes Running before it runs the operation: the verification starts after.
	phaseOf(t, verify, nwv1.OperationRunning)
	testenv.Eventually(t, patience, func() string {
		if v := d.Verifying(); len(v) != 1 {
			return fmt.Sprintf("verifying %v; want the operation's verification started", v)
		}
		return ""
	})

	standAlone := filepath.Join(faults, drbdplay.StandAloneFile)
	if err := os.WriteFile(standAlone, []byte(strings.Join(lost, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := &nwv1.NodeOperation{}
	if len(lost) == 2 {
		testenv.Eventually(t, patience, func() string {
			ops.Wake(key)
			if v := d.Verifying(); len(v) > 0 {
				return fmt.Sprintf("the agent has not seen the verification stop: verifying %v", v)
			}
			return ""
		})
		if err := env.Client.Get(context.Background(), key, got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != nwv1.OperationRunning {
			found := "none"
			if r := got.Status.Result; r != nil && r.OutOfSyncKiB != nil {
				found = fmt.Sprintf("%d KiB out of sync", *r.OutOfSyncKiB)
			}
			t.Fatalf("a verification cut short by its lost connections is %s (found: %s); want Running until it can start again", got.Status.Phase, found)
		}
	} else {
		// One read while node-b is lost, the other peer still verifying; nothing else reads
		// (the poll is an hour), so the verification is still under way when node-b is back.
		before := kernel.Reads()
		ops.Wake(key)
		testenv.Eventually(t, patience, func() string {
			if n := kernel.Reads(); n == before {
				return "the agent has not read the state since node-b was lost"
			}
			return ""
		})
		if v := d.Verifying(); len(v) != 1 {
			t.Fatalf("verifying %v after one read with node-b lost; want the verification still under way towards node-c", v)
		}
	}

	mismatch := filepath.Join(faults, drbdplay.MismatchFile)
	if err := os.WriteFile(mismatch, []byte(r3+" 64\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(standAlone); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, patience, func() string {
		ops.Wake(key)
		if err := env.Client.Get(context.Background(), key, got); err != nil {
			return err.Error()
		}
		if got.Status.Phase != nwv1.OperationSucceeded {
			return fmt.Sprintf("%s is %q, want Succeeded", key.Name, got.Status.Phase)
		}
		return ""
	})
	if r := got.Status.Result; r == nil || r.OutOfSyncKiB == nil || *r.OutOfSyncKiB != 2*64 {
		t.Errorf("result %+v; want 128 KiB out of sync (the verification started again: 64 towards each of the two peers)", got.Status.Result)
	}
}

// scriptedStatus is a drbd.Runner that answers `drbdsetup status` with the states of states in
// turn, the last one again once they are all said, and runs drbdadm with real (the dry run):
// a sequence no played kernel makes, as `drbdsetup status --json` prints it.
type scriptedStatus struct {
	real drbd.Runner

	mu       sync.Mutex
	states   []drbd.Resource
	read     int
	verifies int
}

func (s *scriptedStatus) Run(ctx context.Context, argv []string) (drbd.Result, error) {
	if filepath.Base(argv[0]) == "drbdadm" {
		res, err := s.real.Run(ctx, argv)
		if err == nil && argv[len(argv)-2] == "verify" {
			s.mu.Lock()
			s.verifies++
			s.mu.Unlock()
		}
		return res, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	state := s.states[min(s.read, len(s.states)-1)]
	s.read++
	out, err := json.Marshal([]drbd.Resource{state})
	return drbd.Result{Stdout: append(out, '\n')}, err
}

func (s *scriptedStatus) started() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verifies
}

// r3State is r3 towards node-b and node-c as drbdsetup prints it, each peer in the replication
// state and with the out of sync given (a peer StandAlone when its state is "StandAlone").
func r3State(b string, bKiB uint64, c string, cKiB uint64) drbd.Resource {
	peer := func(id int, name, state string, kib uint64) drbd.Connection {
		conn := drbd.Connection{PeerNodeID: id, Name: name, ConnectionState: "Connected", PeerRole: "Secondary",
			PeerDevices: []drbd.PeerDevice{{Volume: 0, ReplicationState: state, PeerDiskState: "UpToDate", OutOfSyncKiB: kib}}}
		switch state {
		case "StandAlone":
			conn.ConnectionState, conn.PeerRole = "StandAlone", "Unknown"
			conn.PeerDevices[0] = drbd.PeerDevice{Volume: 0, ReplicationState: "Off", PeerDiskState: "DUnknown"}
		case "SyncSource", "PausedSyncS":
			conn.PeerDevices[0].PeerDiskState = "Inconsistent"
		}
		return conn
	}
	return drbd.Resource{Name: r3, Role: "Secondary", Devices: []drbd.Device{{Volume: 0, Minor: 1000, DiskState: "UpToDate", Quorum: true}},
		Connections: []drbd.Connection{peer(1, "node-b", b, bKiB), peer(2, "node-c", c, cKiB)}}
}

// TestDRBDVerifyCutShortKeepsWhatItFound: node-b's connection is lost during the verification;
// node-b comes back resynchronising, node-c's verification ends. What the cut verification
// compared, it compared: the operation reports what it found, rather than wait for the resync
// to copy the blocks over and start again. It found them towards node-b before the cut (32 KiB
// in a read while it ran), or towards node-c (16 KiB, shown only once node-c is Established).
func TestDRBDVerifyCutShortKeepsWhatItFound(t *testing.T) {
	cases := []struct {
		name      string
		seen, end uint64
		want      int64
	}{
		{"before the cut", 32, 0, 32},
		{"at the end", 0, 16, 16},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := drbdadmDryRun(t)
			script := &scriptedStatus{real: d.Runner, states: []drbd.Resource{
				r3State("Established", 0, "Established", 0), // the read before the start
				r3State("VerifyS", 0, "VerifyS", 0),
				r3State("VerifyS", c.seen, "VerifyS", 0),
				r3State("StandAlone", 0, "VerifyS", 0),
				r3State("SyncSource", c.seen, "Established", c.end),
			}}
			d.Runner, d.VerifyPoll = script, 10*time.Millisecond
			ns := env.Namespace(t)
			runOperations(t, &agent.Operations{Node: "node-a", Namespace: ns, Executors: d.Executors()})
			got := phaseOf(t, verifyOf(t, ns, fmt.Sprintf("verify-found-%d", i)), nwv1.OperationSucceeded)
			if r := got.Status.Result; r == nil || r.OutOfSyncKiB == nil || *r.OutOfSyncKiB != c.want {
				t.Errorf("result %+v; want the %d KiB the cut verification found", got.Status.Result, c.want)
			}
			if n := script.started(); n != 1 {
				t.Errorf("drbdadm verify ran %d times; want once", n)
			}
		})
	}
}

// TestDRBDVerifyWaitsForAResourceFullyReplicated: a resource not fully replicated with nothing
// under way that would end it (node-c's connection StandAlone; the resync towards node-b paused
// by a person) never gets a verification, and the operation fails once it has been so for
// VerifySettle, naming what is wrong. A resync under way (node-b SyncSource for 60 reads, three
// seconds at least, three times the settle time) is waited for, and the verification follows.
func TestDRBDVerifyWaitsForAResourceFullyReplicated(t *testing.T) {
	stuck := []struct {
		name, want string
		state      drbd.Resource
	}{
		{"a connection down", r3 + ": the connection to node-c is StandAlone", r3State("Established", 0, "StandAlone", 0)},
		{"a resync paused", r3 + " volume 0: replication with node-b is PausedSyncS", r3State("PausedSyncS", 4096, "Established", 0)},
	}
	for i, c := range stuck {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := drbdadmDryRun(t)
			script := &scriptedStatus{real: d.Runner, states: []drbd.Resource{c.state}}
			d.Runner, d.VerifyPoll, d.VerifySettle = script, 50*time.Millisecond, time.Second
			ns := env.Namespace(t)
			runOperations(t, &agent.Operations{Node: "node-a", Namespace: ns, Executors: d.Executors()})
			got := phaseOf(t, verifyOf(t, ns, fmt.Sprintf("verify-stuck-%d", i)), nwv1.OperationFailed)
			if e := got.Status.Error; e == nil || e.Reason != agent.ReasonNotFullyReplicated || !strings.Contains(e.Message, c.want) {
				t.Errorf("error %+v; want %s naming %q", got.Status.Error, agent.ReasonNotFullyReplicated, c.want)
			}
			if n := script.started(); n != 0 {
				t.Errorf("drbdadm verify ran %d times; want never", n)
			}
		})
	}
	t.Run("a resync under way", func(t *testing.T) {
		t.Parallel()
		d := drbdadmDryRun(t)
		var states []drbd.Resource
		for range 60 {
			states = append(states, r3State("SyncSource", 4096, "Established", 0))
		}
		states = append(states, r3State("Established", 0, "Established", 0), r3State("VerifyS", 0, "VerifyS", 0), r3State("Established", 0, "Established", 0))
		script := &scriptedStatus{real: d.Runner, states: states}
		d.Runner, d.VerifyPoll, d.VerifySettle = script, 50*time.Millisecond, time.Second
		ns := env.Namespace(t)
		runOperations(t, &agent.Operations{Node: "node-a", Namespace: ns, Executors: d.Executors()})
		got := phaseOf(t, verifyOf(t, ns, "verify-after-resync"), nwv1.OperationSucceeded)
		if r := got.Status.Result; r == nil || r.OutOfSyncKiB == nil || *r.OutOfSyncKiB != 0 {
			t.Errorf("result %+v; want 0 KiB out of sync", got.Status.Result)
		}
		if n := script.started(); n != 1 {
			t.Errorf("drbdadm verify ran %d times; want once, after the resync", n)
		}
	})
}
