package testenv

import (
	"errors"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startTries is how many times StartWithFreshPorts starts a process that exits as it starts.
const startTries = 3

// exitedAtStart says whether err is envtest's report of a process (etcd, kube-apiserver)
// that exited before it was ready. The usual cause is its port: envtest picks a free one,
// closes it and hands it to the process, and another process can bind it in between; etcd
// then exits within milliseconds ("bind: address already in use"). A test that opens
// thousands of connections (the member simulator's) makes that likely for a control plane
// starting beside it, in its package or another. envtest's own retries cannot help: they
// reuse the port they picked first.
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
// (StartWithFreshPorts), and returns the one that started. A try that fails is stopped.
func StartEnvironment(newEnv func() *envtest.Environment) (*envtest.Environment, *rest.Config, error) {
	var env *envtest.Environment
	var cfg *rest.Config
	err := StartWithFreshPorts(func() error {
		env = newEnv()
		var err error
		if cfg, err = env.Start(); err != nil {
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
