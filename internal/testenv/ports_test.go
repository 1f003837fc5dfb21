package testenv

import (
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestAPortTakenBeforeEtcdBindsItIsTriedAgainWithAnother plays the race StartWithFreshPorts
// is for: the first try's etcd is handed a port another listener holds, as when a port
// envtest picked is taken before etcd binds it. That etcd exits at once; the second try,
// built afresh, picks its own port and starts.
func TestAPortTakenBeforeEtcdBindsItIsTriedAgainWithAnother(t *testing.T) {
	t.Parallel()
	assets, taken := takenPort(t)

	var tries []error
	var etcd *envtest.Etcd
	err := StartWithFreshPorts(func() error {
		// Three minutes to be ready, as Start gives: two busy cores are slow to start etcd.
		etcd = &envtest.Etcd{Path: filepath.Join(assets, "etcd"), DataDir: t.TempDir(), StartTimeout: 3 * time.Minute}
		if len(tries) == 0 {
			etcd.URL = &url.URL{Scheme: "http", Host: taken.Addr().String()}
		}
		err := etcd.Start()
		tries = append(tries, err)
		return err
	})
	if err != nil {
		t.Fatalf("starting etcd: %v (tries: %v)", err, tries)
	}
	t.Cleanup(func() {
		if err := etcd.Stop(); err != nil {
			t.Error(err)
		}
	})
	if len(tries) != 2 || !exitedAtStart(tries[0]) {
		t.Fatalf("tries: %v; want the first to exit at start (etcd on a taken port) and the second to start", tries)
	}
	if etcd.URL.Host == taken.Addr().String() {
		t.Fatalf("the second try's etcd listens on the taken port %s", etcd.URL.Host)
	}
}

// TestAFailureOtherThanAnExitIsNotTriedAgain: a process that does not exit at start (a
// missing binary, here) fails on the first try.
func TestAFailureOtherThanAnExitIsNotTriedAgain(t *testing.T) {
	t.Parallel()
	tries := 0
	err := StartWithFreshPorts(func() error {
		tries++
		return (&envtest.Etcd{Path: filepath.Join(t.TempDir(), "no-etcd"), DataDir: t.TempDir()}).Start()
	})
	if err == nil || tries != 1 {
		t.Fatalf("tries %d, error %v; want one try and its error", tries, err)
	}
}

// TestStartEnvironmentStartsAControlPlaneAgainOnFreshPorts: an Environment whose etcd is
// handed a taken port starts at the next try, on a port of its own; when every try is handed
// one, the error says etcd's last words ("address already in use"), which envtest drops.
func TestStartEnvironmentStartsAControlPlaneAgainOnFreshPorts(t *testing.T) {
	t.Parallel()
	assets, taken := takenPort(t)
	newEnv := func(takenTries int, tries *int) func() *envtest.Environment {
		return func() *envtest.Environment {
			*tries++
			env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 3 * time.Minute}
			if *tries <= takenTries {
				env.ControlPlane.Etcd = &envtest.Etcd{URL: &url.URL{Scheme: "http", Host: taken.Addr().String()}}
			}
			return env
		}
	}

	tries := 0
	env, cfg, err := StartEnvironment(newEnv(1, &tries))
	if err != nil {
		t.Fatalf("starting: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	if tries != 2 || cfg == nil || env.ControlPlane.Etcd.URL.Host == taken.Addr().String() {
		t.Fatalf("%d tries, etcd on %s; want 2 tries and etcd off the taken port %s", tries, env.ControlPlane.Etcd.URL.Host, taken.Addr())
	}

	tries = 0
	_, _, err = StartEnvironment(newEnv(startTries, &tries))
	if err == nil {
		t.Fatal("every try handed a taken port: started all the same")
	}
	if tries != startTries || !exitedAtStart(err) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("%d tries, error %v; want %d tries and etcd's exit with its output (address already in use)", tries, err, startTries)
	}
}

// takenPort returns the folder of the control-plane binaries and a port held by a listener
// of the test's, taken.Addr(): a port no process can bind.
func takenPort(t *testing.T) (assets string, taken net.Listener) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if assets, err = BinaryAssets(root); err != nil {
		t.Fatal(err)
	}
	if taken, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = taken.Close() })
	return assets, taken
}
