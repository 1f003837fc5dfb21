package agentlab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/osversionpolicy"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// StartKairosAgent runs node's agent on host, its played Kairos host (installed, its Root the
// node's), in the node's network namespace at its default intervals, as installed: --host-os
// Kairos, --host-proc and --site-kairos-dir the host's. The agent is supervised across played
// reboots (siteagent.Run): each boot's agent logs to AgentLog. Stop the supervision when done.
func (s *Site) StartKairosAgent(node string, host *kairosplay.Host) (*siteagent.Supervisor, error) {
	nd := s.Node(node)
	log, err := os.OpenFile(s.AgentLog(node), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	argv := []string{s.lab.Agent, "--kubeconfig", s.NodeKubeconfig, "--node-name", node, "--namespace", AgentNamespace,
		"--network-backend", "site", "--site-bond-dir", nd.Bond.Dir, "--host-root", nd.Root,
		"--state-dir", filepath.Join(s.lab.Dir, "state-"+node), "--host-os", string(nwv1.HostOSKairos),
		"--storage-bond", netsite.Bond, "--site-drbd-dir", nd.DRBDDir,
		"--host-proc", host.Proc(), "--site-kairos-dir", host.Dir}
	sup, _, err := siteagent.Run(node, host, func() *exec.Cmd {
		cmd := s.Command(node, argv...)
		// A benchmark killed outright takes its agents with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd
	}, log)
	if err != nil {
		_ = log.Close()
		return nil, err
	}
	go func() { <-sup.Done(); _ = log.Close() }()
	return sup, nil
}

// StartOSPolicies runs the operator's OSVersionPolicy controller in this process, at its
// default settings, until ctx ends, and returns a client that watches.
func (l *Lab) StartOSPolicies(ctx context.Context, recorder string) (client.WithWatch, error) {
	scheme, err := operator.NewScheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(l.Env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: operator.CacheOptions(operator.Scope{Agent: AgentNamespace, Workflows: WorkflowNamespace})})
	if err != nil {
		return nil, err
	}
	if err := (&osversionpolicy.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor(recorder), LockNamespace: WorkflowNamespace},
		Client: mgr.GetClient(), AgentNamespace: AgentNamespace}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	go func() { _ = mgr.Start(ctx) }()
	return client.NewWithWatch(l.Env.Config, client.Options{Scheme: scheme})
}
