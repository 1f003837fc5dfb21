package cli

import (
	"context"
	"flag"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// The tests run the commands in-process against a real API server (no operator: the tests
// write the status the operator would). cmd/kubectl-nodewright's tests run the operator with
// its admission webhooks, for the refusals and defaults.
var env = testenv.New()

// TestMain starts the control plane, except in a fuzzing worker: it runs only the fuzz
// targets (FuzzBootAcknowledgement, FuzzOSImageAndName), pure functions that need none, and
// one control plane per worker would be a dozen.
func TestMain(m *testing.M) {
	flag.Parse()
	if w := flag.Lookup("test.fuzzworker"); w != nil && w.Value.String() == "true" {
		os.Exit(m.Run())
	}
	os.Exit(env.Run(m))
}

// invocation is one run of the plugin.
type invocation struct {
	stdout, stderr string
	code           int
}

// runOpts adjust the Factory of a run.
type runOpts struct {
	now      time.Time // the clock; zero: the real one
	terminal bool      // stdout is a terminal
	stdin    string
	ctx      context.Context
	stdout   *testenv.SyncBuffer // to read the output while the command runs
	// kubeconfig is the kubeconfig file; empty: an administrator's, whose context names no
	// namespace.
	kubeconfig string
}

// plugin runs kubectl-nodewright with args against the test API server through a kubeconfig
// file, as a user would.
func plugin(t *testing.T, o runOpts, args ...string) invocation {
	t.Helper()
	kubeconfig := o.kubeconfig
	if kubeconfig == "" {
		kubeconfig = kubeconfigPath(t)
	}
	stdout, stderr := o.stdout, &testenv.SyncBuffer{}
	if stdout == nil {
		stdout = &testenv.SyncBuffer{}
	}
	streams := genericiooptions.IOStreams{In: strings.NewReader(o.stdin), Out: stdout, ErrOut: stderr}
	root := NewRootCommand(streams)
	f := factories[root]
	if !o.now.IsZero() {
		f.Now = func() time.Time { return o.now }
	}
	f.IsTerminal = func(any) bool { return o.terminal }
	f.Getenv = func(string) string { return "" }
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	code := Run(ctx, root, append([]string{"--kubeconfig", kubeconfig}, args...))
	return invocation{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

var (
	kubeconfigsMu sync.Mutex
	kubeconfigs   = map[string]string{}
)

// kubeconfigPath writes an administrator's kubeconfig once per test.
func kubeconfigPath(t *testing.T) string {
	t.Helper()
	kubeconfigsMu.Lock()
	defer kubeconfigsMu.Unlock()
	if p, ok := kubeconfigs[t.Name()]; ok {
		return p
	}
	p := env.Kubeconfig(t)
	kubeconfigs[t.Name()] = p
	t.Cleanup(func() {
		kubeconfigsMu.Lock()
		defer kubeconfigsMu.Unlock()
		delete(kubeconfigs, t.Name())
	})
	return p
}

// wantCode fails the test unless the run ended with code.
func (r invocation) wantCode(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}
