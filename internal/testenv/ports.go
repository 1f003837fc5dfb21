package testenv

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startTries is how many times StartWithFreshPorts starts a process that exits as it starts.
const startTries = 3

// exitedAtStart says whether err is envtest's report of a process (etcd, kube-apiserver)
// that exited before it was ready. The usual cause is its port: envtest picks a free one,
// closes it and hands it to the process, and another process can bind it in between; etcd
// then exits within milliseconds ("bind: address already in use"). A test that opens
// thousands of sockets (the member simulator's listeners, one a member, and its clients'
// connections) makes that likely for a control plane starting beside it, in its package or
// another. envtest's own retries cannot help: they reuse the port they picked first.
func exitedAtStart(err error) bool {
	return err != nil && strings.Contains(err.Error(), "stopped unexpectedly before becoming ready")
}

// StartWithFreshPorts runs start, and runs it again while it fails with a process that
// exited as it started (exitedAtStart), up to startTries times in all. start must build
// its processes afresh (a new envtest.Environment, Etcd or APIServer, with no port set),
// so that each try picks new ports. It returns the last try's error, with the earlier ones.
func StartWithFreshPorts(start func() error) error {
	var errs []error
	for range startTries {
		err := start()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if !exitedAtStart(err) {
			break
		}
	}
	if len(errs) > 1 {
		return errors.Join(append([]error{errs[len(errs)-1]}, errs[:len(errs)-1]...)...)
	}
	return errs[0]
}

// StartEnvironment starts the control plane newEnv makes, with fresh ports on each try
// (StartWithFreshPorts), and returns the one that started. A try that fails is stopped, and
// its error ends with the last lines etcd and kube-apiserver wrote (envtest drops them).
func StartEnvironment(newEnv func() *envtest.Environment) (*envtest.Environment, *rest.Config, error) {
	var env *envtest.Environment
	var cfg *rest.Config
	err := StartWithFreshPorts(func() error {
		env = newEnv()
		etcdOut, apiOut := &tail{max: 2048}, &tail{max: 2048}
		if env.ControlPlane.Etcd == nil {
			env.ControlPlane.Etcd = &envtest.Etcd{}
		}
		etcd, api := env.ControlPlane.Etcd, env.ControlPlane.GetAPIServer()
		// Unless asked to pass the processes' output on (envtest's own switch).
		attach := env.AttachControlPlaneOutput || os.Getenv("KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT") == "true"
		if !attach && etcd.Out == nil && etcd.Err == nil {
			etcd.Out, etcd.Err = etcdOut, etcdOut
		}
		if !attach && api.Out == nil && api.Err == nil {
			api.Out, api.Err = apiOut, apiOut
		}
		var err error
		if cfg, err = env.Start(); err != nil {
			for _, o := range []struct {
				name string
				out  *tail
			}{{"etcd", etcdOut}, {"kube-apiserver", apiOut}} {
				if last := o.out.String(); last != "" {
					err = fmt.Errorf("%w\n%s's last output:\n%s", err, o.name, last)
				}
			}
			// Start can fail after the processes are up (installing a CRD, say): stop them.
			return errors.Join(err, env.Stop())
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return env, cfg, nil
}

// tail keeps the last max bytes written to it: a process's last words, for an error.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
