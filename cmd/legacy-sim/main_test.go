package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/legacysim"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func TestBadInputNamesTheFlag(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"explode"}, `unknown command "explode"`},
		{[]string{"run", "--scenario", "nope"}, "--scenario"},
		{[]string{"run", "--heartbeat-interval", "0s"}, "--heartbeat-interval"},
		{[]string{"run", "--step-interval", "soon"}, "-step-interval"},
		{[]string{"run", "--nodes", "edge-1,Edge_2"}, "--nodes"},
		{[]string{"run", "--nodes", "edge-1,edge-2:boss"}, "--nodes"},
		{[]string{"run", "--nodes", "edge-1", "--scenario", "upgrade"}, "at least two nodes"},
		{[]string{"silence", "--namespace", "Not_OK", "edge-2"}, "--namespace"},
		{[]string{"silence"}, "missing argument NODE"},
		{[]string{"garbage", "k"}, "missing argument VALUE"},
		{[]string{"jump-generation", "lots"}, "not a decimal integer"},
		{[]string{"resume", "edge-1", "edge-2"}, `unexpected argument "edge-2"`},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stdout, &stderr); code != exitBadInput {
			t.Errorf("%v: exit %d, want %d", c.args, code, exitBadInput)
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: stderr %q does not say %q", c.args, stderr.String(), c.want)
		}
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Errorf("--help: exit %d", code)
	}
	if !strings.Contains(stdout.String(), "Examples:") || !strings.Contains(stdout.String(), "peer-lost") {
		t.Errorf("--help lacks examples or scenarios:\n%s", stdout.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"run", "--help"}, &stdout, &stderr); code != exitOK {
		t.Errorf("run --help: exit %d", code)
	}
	if !strings.Contains(stderr.String(), "-step-interval") {
		t.Errorf("run --help lacks its flags:\n%s", stderr.String())
	}
}

func readState(t *testing.T, ns string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "state"}, cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

// run plays bootstrap, keeps heartbeating, honours one-shot commands from "another process",
// and exits 0 when signalled.
func TestRunAndOneShots(t *testing.T) {
	kubeconfig := env.Kubeconfig(t)
	ns := env.Namespace(t) + "-legacy"
	common := []string{"--kubeconfig", kubeconfig, "--namespace", ns, "--configmap", "state", "--component", "sim-" + ns}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runLog testenv.SyncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, append([]string{"run", "--scenario", "upgrade", "--step-interval", "10ms", "--heartbeat-interval", "20ms"}, common...), os.Stdout, &runLog)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(runLog.String(), "Scenario done") {
		if time.Now().After(deadline) {
			t.Fatalf("the scenario did not finish:\n%s", runLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	obs, problems := legacy.Parse(readState(t, ns).Data)
	if len(problems) > 0 || obs.State != legacy.MultiNodeReady || len(obs.Nodes) != 3 {
		t.Fatalf("after upgrade: %s, %d nodes, problems %v", obs.State, len(obs.Nodes), problems)
	}

	oneShot := func(args ...string) {
		t.Helper()
		var stderr bytes.Buffer
		// The common flags go first: after "--" everything is an argument.
		full := append(append([]string{args[0]}, common...), args[1:]...)
		if code := run(context.Background(), full, os.Stdout, &stderr); code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
	}
	oneShot("silence", "edge-2")
	if got := readState(t, ns).Annotations[legacysim.SilencedAnnotation]; got != "edge-2" {
		t.Errorf("silenced annotation %q", got)
	}
	oneShot("garbage", legacy.NodeKey("edge-2", legacy.FieldHeartbeat), "2001-01-01T00:00:00Z")
	time.Sleep(100 * time.Millisecond) // several heartbeat intervals
	if got := readState(t, ns).Data[legacy.NodeKey("edge-2", legacy.FieldHeartbeat)]; got != "2001-01-01T00:00:00Z" {
		t.Errorf("the running heartbeat loop refreshed silenced edge-2: %s", got)
	}
	oneShot("resume", "edge-2")

	oneShot("set-state", "NOT_A_STATE")
	oneShot("jump-generation", "--", "-2")
	d := readState(t, ns).Data
	if d[legacy.KeyState] != "NOT_A_STATE" || d[legacy.KeyPreviousState] != string(legacy.MultiNodeReady) ||
		d[legacy.KeyGeneration] != "13" {
		t.Errorf("after set-state and jump-generation -2: state %s, previous %s, generation %s (want 13: 1 + 13 transitions + 1 - 2)",
			d[legacy.KeyState], d[legacy.KeyPreviousState], d[legacy.KeyGeneration])
	}
	oneShot("set-state", string(legacy.Init))
	oneShot("forbidden-jump")
	d = readState(t, ns).Data
	if legacy.Allowed(legacy.Init, legacy.State(d[legacy.KeyState])) || d[legacy.KeyPreviousState] != string(legacy.Init) {
		t.Errorf("forbidden-jump wrote %s -> %s", d[legacy.KeyPreviousState], d[legacy.KeyState])
	}

	cancel()
	select {
	case code := <-exit:
		if code != exitOK {
			t.Errorf("run exited %d on signal:\n%s", code, runLog.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("run did not stop on signal")
	}
	for _, line := range []string{"Created", "State changed", "Node joined", "Stopping on signal"} {
		if !strings.Contains(runLog.String(), line) {
			t.Errorf("the run log lacks %q", line)
		}
	}
}

func TestOneShotWithoutSiteSaysSo(t *testing.T) {
	var stderr bytes.Buffer
	args := []string{"silence", "edge-1", "--kubeconfig", env.Kubeconfig(t), "--namespace", env.Namespace(t)}
	if code := run(context.Background(), args, os.Stdout, &stderr); code != exitFailed {
		t.Errorf("exit %d, want %d", code, exitFailed)
	}
	if !strings.Contains(stderr.String(), "legacy-sim run") {
		t.Errorf("stderr does not say how to set the site up: %s", stderr.String())
	}
}
