package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/testenv/operatortest"
)

// The plugin against the operator as it runs in a cluster: its admission webhooks reached
// through the API server, so that the refusals, defaults and warnings are the real ones.
var env = testenv.New().WithWebhooks()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const linstorClass = "kn-linstor"

// patience bounds every wait on the operator and the plugin: long enough for a busy CI
// machine, and no cost to a passing test, which goes on as soon as the state holds.
const patience = 2 * time.Minute

var (
	startOnce sync.Once
	startErr  error
)

// startOperator runs the operator once for the package (operatortest.Start): it keeps its own
// webhook certificate and writes its CA into the configurations.
func startOperator(t *testing.T) {
	t.Helper()
	startOnce.Do(func() {
		_, startErr = operatortest.Start(env, operatortest.Options{TempPrefix: "kubectl-nodewright-test-"})
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
}

// plugin runs the program in-process, as main does, with a kubeconfig file.
func plugin(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"--kubeconfig", kubeconfig}, args...),
		genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	return out.String(), errOut.String(), code
}

// The webhook's refusal is printed as the webhook wrote it, after the object's kind/name.
func TestMigrateRefusedByTheWebhook(t *testing.T) {
	startOperator(t)
	operatortest.StorageClasses(t, env.Client, operatortest.Class{Name: linstorClass, Driver: "linstor.csi.linbit.com"})
	ns := env.Namespace(t)
	kubeconfig := env.Kubeconfig(t)

	stdout, stderr, code := plugin(t, kubeconfig, "migrate", "x", "root", "--to", linstorClass, "-n", ns, "--name", "move-x")
	want := `Error: vmvolumemigration/move-x: spec.vmName: VirtualMachine "x" not found in namespace ` + ns + "\n"
	if code != 1 || stderr != want || stdout != "" {
		t.Errorf("exit code %d (want 1)\nstdout %q\nstderr %q\nwant   %q", code, stdout, stderr, want)
	}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "move-x"}, &nwv1.VMVolumeMigration{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the refused migration exists: %v", err)
	}

	// And with a generated name, the name it would have had.
	_, stderr, code = plugin(t, kubeconfig, "migrate", "x", "root", "--to", linstorClass, "-n", ns)
	if code != 1 || !strings.HasPrefix(stderr, "Error: vmvolumemigration/x-root-") || !strings.HasSuffix(stderr, `: spec.vmName: VirtualMachine "x" not found in namespace `+ns+"\n") {
		t.Errorf("exit code %d, stderr %q", code, stderr)
	}
}

// The webhook fills in the mode and size, and its warning is printed as kubectl prints it.
func TestMigrateDefaultsAndWarnings(t *testing.T) {
	startOperator(t)
	operatortest.StorageClasses(t, env.Client, operatortest.Class{Name: linstorClass, Driver: "linstor.csi.linbit.com"})
	ns := env.Namespace(t)
	operatortest.HaltedVM(t, env.Client, ns, "db", linstorClass)
	kubeconfig := env.Kubeconfig(t)

	stdout, stderr, code := plugin(t, kubeconfig, "migrate", "db", "root", "--to", linstorClass, "-n", ns, "--name", "move-db")
	if code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	if want := "vmvolumemigration/move-db created: VM db volume root to class " + linstorClass + ", Cold, 1Gi, ReadWriteMany\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if want := "Warning: spec.mode Cold: the VM is stopped for the copy; LINSTOR can clone, so spec.mode Hot would keep it running, at the cost of the guest's writes after the snapshot\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}

	// A second migration of the VM is refused while the first has not finished.
	_, stderr, code = plugin(t, kubeconfig, "migrate", "db", "root", "--to", linstorClass, "-n", ns, "--name", "again")
	if code != 1 || !strings.HasPrefix(stderr, "Error: vmvolumemigration/again: spec.vmName: VirtualMachine db already has migration move-db (") {
		t.Errorf("exit code %d, stderr %q", code, stderr)
	}

	// The operator acts on it, and says so in Events that the plugin finds.
	deadline := time.Now().Add(patience)
	for {
		stdout, _, code = plugin(t, kubeconfig, "events", "-n", ns)
		if code == 0 && strings.Contains(stdout, "nodewright-operator") && strings.Contains(stdout, "vmvolumemigration/move-db") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Nodewright Event about move-db (exit code %d):\n%s", code, stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The binary itself: the exit code reaches the shell.
func TestTheBinary(t *testing.T) {
	startOperator(t)
	bin := filepath.Join(t.TempDir(), "kubectl-nodewright")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ns := env.Namespace(t)
	kubeconfig := env.Kubeconfig(t)
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"migrate", "list", "-n", ns}, 0, "No VMVolumeMigrations found in namespace " + ns + ".\n"},
		{[]string{"migrate", "nope", "root", "--to", linstorClass, "-n", ns, "--name", "m"}, 1,
			`Error: vmvolumemigration/m: spec.vmName: VirtualMachine "nope" not found in namespace ` + ns + "\n"},
		{[]string{"migrate", "nope"}, 2, "Error: kubectl nodewright migrate wants VM VOLUME (or --vm VM VOLUME), got 1 arguments\nRun 'kubectl nodewright migrate --help' for usage.\n"},
	} {
		cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, c.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || stderr.String() != c.stderr {
			t.Errorf("%v: exit code %d, stderr %q; want %d, %q", c.args, code, stderr.String(), c.code, c.stderr)
		}
	}
}
