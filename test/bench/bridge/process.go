package main

import (
	"os"
	"os/exec"

	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

// startOperator runs the operator as deployed, its admission webhook server included, with
// its pprof endpoint on pprofAddr.
func startOperator(binary, kubeconfig, logPath, pprofAddr string) (*benchproc.Process, error) {
	port, err := benchproc.FreePort()
	if err != nil {
		return nil, err
	}
	return benchproc.Start(exec.Command(binary, "--kubeconfig", kubeconfig, "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--pprof-bind-address", pprofAddr,
		"--webhook-host", "127.0.0.1", "--webhook-port", port, "--webhook-cert-hosts", "127.0.0.1"), logPath)
}

// startBareObserver runs this program again as the bare observer (see runBareObserver).
func startBareObserver(kubeconfig, logPath string) (*benchproc.Process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), bareObserverEnv+"="+kubeconfig)
	return benchproc.Start(cmd, logPath)
}
