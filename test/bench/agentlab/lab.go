// Package agentlab is where a benchmark of the node agents on the played storage network
// starts: a real control plane, a folder of its own, the agent built for the local site, and a
// kubeconfig for the benchmark's own clients.
package agentlab

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

// Lab is a started lab; Close stops it and removes its folder.
type Lab struct {
	Env *testenv.Env
	// Dir is the lab's folder; Agent the agent's binary and Kubeconfig the control plane's
	// kubeconfig, both in it.
	Dir, Agent, Kubeconfig string
}

// Start starts a lab in a folder named after prefix. The played network needs root.
func Start(prefix string) (*Lab, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the played network needs root: it creates network namespaces")
	}
	l := &Lab{Env: testenv.New()}
	if err := l.Env.Start(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		l.Close()
		return nil, err
	}
	l.Dir, l.Agent, l.Kubeconfig = dir, filepath.Join(dir, "agent"), filepath.Join(dir, "kubeconfig")
	if err := benchproc.Build(l.Env.RepoRoot, "./cmd/agent", l.Agent, "nodewright_site"); err != nil {
		l.Close()
		return nil, err
	}
	if err := l.Env.WriteKubeconfig(l.Kubeconfig); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Close stops the control plane and removes the lab's folder.
func (l *Lab) Close() {
	_ = l.Env.Stop()
	if l.Dir != "" {
		_ = os.RemoveAll(l.Dir)
	}
}
