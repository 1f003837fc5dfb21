// Package agentlab is where a benchmark of the node agents on the played storage network
// starts: a real control plane, a folder of its own, the agent built for the local site, and a
// kubeconfig for the benchmark's own clients.
package agentlab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// The namespaces of a workflow benchmark: the agents' and the operator's (the workflows'
// claim), as the chart names them.
const (
	AgentNamespace    = "nodewright-agent"
	WorkflowNamespace = "nodewright-system"
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

// Site is the played storage network of a workflow benchmark, its nodes' agents reaching the
// control plane through NodeKubeconfig.
type Site struct {
	*netsite.Network
	NodeKubeconfig string
	lab            *Lab
}

// Site creates the agents' and the workflows' namespaces, and starts the played storage network
// of nodes, its bonds in mode, each node's played DRBD holding resources; the switch runs until
// ctx ends. Close it when done.
func (l *Lab) Site(ctx context.Context, mode nwv1.BondMode, nodes []string, resources ...string) (*Site, error) {
	for _, ns := range []string{AgentNamespace, WorkflowNamespace} {
		if err := l.Env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	n, err := netsite.Start(filepath.Join(l.Dir, "net"), mode, nodes...)
	if err != nil {
		if n != nil {
			n.Close()
		}
		return nil, err
	}
	s := &Site{Network: n, NodeKubeconfig: filepath.Join(l.Dir, "kubeconfig-nodes"), lab: l}
	if err := n.PlayDRBD(resources...); err != nil {
		n.Close()
		return nil, err
	}
	go n.Run(ctx)
	if err := n.ServeAPI(l.Kubeconfig, s.NodeKubeconfig); err != nil {
		n.Close()
		return nil, err
	}
	return s, nil
}

// StartAgent runs node's agent in its network namespace, reporting every reportInterval, its
// log in the lab's folder. Stop it when done.
func (s *Site) StartAgent(node, reportInterval string) (*benchproc.Process, error) {
	nd := s.Node(node)
	cmd := s.Command(node, s.lab.Agent, "--kubeconfig", s.NodeKubeconfig, "--node-name", node, "--namespace", AgentNamespace,
		"--network-backend", "site", "--site-bond-dir", nd.Bond.Dir, "--host-root", nd.Root,
		"--state-dir", filepath.Join(s.lab.Dir, "state-"+node), "--host-os", string(nwv1.HostOSSystemdNetworkd),
		"--storage-bond", netsite.Bond, "--report-interval", reportInterval, "--site-drbd-dir", nd.DRBDDir)
	return benchproc.Start(cmd, s.AgentLog(node))
}

// AgentLog is where node's agent logs.
func (s *Site) AgentLog(node string) string { return filepath.Join(s.lab.Dir, "agent-"+node+".log") }
