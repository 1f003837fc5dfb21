package agentlab

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/bondmodeflipplan"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// ReadyForFlips readies the site's nodes for a BondModeFlipPlan from active-backup to
// 802.3ad and back: each switch port carries both, each node has its Node and its agent
// (reporting every reportInterval), which is waited for until it reports its bond with an
// address and its resources DRBD resources connected and UpToDate; then each node gets its
// role (the primary, the rest secondaries), and the cluster is Managed with both modes
// allowed. It returns the agents' processes by node, and what undoes the cluster's settings;
// stop the agents with their Stop.
func (s *Site) ReadyForFlips(ctx context.Context, nodes []string, primary, reportInterval string, resources int32) (map[string]*benchproc.Process, func(), error) {
	c := s.lab.Env.Client
	agents := map[string]*benchproc.Process{}
	stop := func() {
		for _, p := range agents {
			p.Stop()
		}
	}
	for _, name := range nodes {
		s.Expect(name, nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
		if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}); err != nil {
			stop()
			return nil, nil, err
		}
		p, err := s.StartAgent(name, reportInterval)
		if err != nil {
			stop()
			return nil, nil, err
		}
		agents[name] = p
	}
	for _, name := range nodes {
		as := &nwv1.NodewrightAgentStatus{}
		if err := Wait(ctx, 2*time.Minute, func() (bool, error) {
			if err := c.Get(ctx, client.ObjectKey{Name: name}, as); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			b, d := as.Status.Network.Bond, as.Status.Storage
			return b != nil && len(b.Addresses) > 0 && d != nil && d.Resources == resources && d.UpToDate == resources && d.Connected == resources, nil
		}); err != nil {
			logged, _ := os.ReadFile(s.AgentLog(name))
			stop()
			return nil, nil, fmt.Errorf("waiting for %s's report (bond %+v, DRBD %+v): %w\n%s", name, as.Status.Network.Bond, as.Status.Storage, err, logged)
		}
		role := nwv1.NodeRoleSecondary
		if name == primary {
			role = nwv1.NodeRolePrimary
		}
		if err := clusterplay.SetRole(ctx, c, name, role); err != nil {
			stop()
			return nil, nil, err
		}
	}
	cleanup, err := clusterplay.Managed(ctx, c, netsite.Bond, nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return agents, cleanup, nil
}

// StartFlips runs the operator's flip controller in this process, at its default settings,
// until ctx ends, and returns a client that watches.
func (l *Lab) StartFlips(ctx context.Context, recorder string) (client.WithWatch, error) {
	scheme, err := operator.NewScheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(l.Env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: operator.CacheOptions(operator.Scope{Agent: AgentNamespace, Workflows: WorkflowNamespace})})
	if err != nil {
		return nil, err
	}
	if err := (&bondmodeflipplan.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor(recorder), LockNamespace: WorkflowNamespace},
		Client: mgr.GetClient(), AgentNamespace: AgentNamespace}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	go func() { _ = mgr.Start(ctx) }()
	return client.NewWithWatch(l.Env.Config, client.Options{Scheme: scheme})
}

// Wait polls cond every 50 ms until it holds or fails, for at most limit.
func Wait(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if ok, err := cond(); ok || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("not within %s", limit)
}
