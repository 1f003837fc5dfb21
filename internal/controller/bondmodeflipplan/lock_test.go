package bondmodeflipplan_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// upgradeStandIn runs ReplicationUpgrades on the engine with two steps that change nothing,
// gated as a cluster-wide workflow's are, and notes any action taken while it does not hold
// the claim or while the flip f runs its steps.
type upgradeStandIn struct {
	reader     client.Reader
	lockNS     string
	flip       client.ObjectKey
	mu         sync.Mutex
	violations []string
}

type upgradePlan struct{}

func (upgradePlan) Forward() []workflow.Step               { return []workflow.Step{"Preflight", "JoinPeers"} }
func (upgradePlan) Rollback(workflow.Step) []workflow.Step { return nil }
func (upgradePlan) Irreversible(workflow.Step) bool        { return false }
func (upgradePlan) Gates(s workflow.Step) workflow.Gates {
	if s == "Preflight" {
		return workflow.GatesPreflight
	}
	return workflow.GatesNodeChange
}

var upgradeStandInKind = &engine.Descriptor[*nwv1.ReplicationUpgrade]{
	Kind:          workflow.Kind{Name: "ReplicationUpgrade", AuditAction: "ReplicationUpgradeTransition", Noun: "upgrade"},
	Controller:    "upgrade-stand-in",
	New:           func() *nwv1.ReplicationUpgrade { return &nwv1.ReplicationUpgrade{} },
	NewList:       func() client.ObjectList { return &nwv1.ReplicationUpgradeList{} },
	Plan:          func(*nwv1.ReplicationUpgrade) workflow.Plan { return upgradePlan{} },
	Plans:         func() []workflow.Plan { return []workflow.Plan{upgradePlan{}} },
	Finalizer:     "nodewright.spectrocloud.com/upgrade-stand-in",
	ClusterWide:   true,
	ClusterPhases: []nwv1.ClusterPhase{nwv1.ClusterMultiNode},
}

func (u *upgradeStandIn) Actions() engine.Actions[*nwv1.ReplicationUpgrade] {
	return engine.Actions[*nwv1.ReplicationUpgrade]{"Preflight": u.Act, "JoinPeers": u.Act}
}

func (u *upgradeStandIn) Finish(context.Context, *engine.Run[*nwv1.ReplicationUpgrade]) (engine.Finished, error) {
	return engine.Tidied("nothing to tidy"), nil
}

func (u *upgradeStandIn) Act(ctx context.Context, run *engine.Run[*nwv1.ReplicationUpgrade]) (engine.Outcome, error) {
	var lease coordinationv1.Lease
	if err := u.reader.Get(ctx, client.ObjectKey{Namespace: u.lockNS, Name: engine.LockName}, &lease); err != nil {
		return engine.Outcome{}, err
	}
	f := &nwv1.BondModeFlipPlan{}
	if err := u.reader.Get(ctx, u.flip, f); err != nil {
		return engine.Outcome{}, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != fmt.Sprintf("ReplicationUpgrade/%s/%s", run.Object.Name, run.Object.UID) {
		u.violations = append(u.violations, fmt.Sprintf("the upgrade acted in %s while the claim was %q", run.State.Step, holder))
	}
	if f.Status.Phase.Active() && len(f.Status.Steps) > 0 && f.Status.Steps[0].StartedAt != nil {
		u.violations = append(u.violations, fmt.Sprintf("the upgrade acted in %s while the flip was %s", run.State.Step, f.Status.Phase))
	}
	return engine.Succeeded("%s done", run.State.Step), nil
}

// TestOneClusterWideWorkflowAtATime creates a flip and a ReplicationUpgrade at the same
// moment: one holds the cluster-wide claim and the other waits for it (AnotherWorkflowRunning),
// never acting while the first runs; both end.
func TestOneClusterWideWorkflowAtATime(t *testing.T) {
	s := plantSite(t, true, nil, "fliplock-a=primary", "fliplock-b=secondary")
	u := &upgradeStandIn{reader: env.Client, lockNS: s.lockNS, flip: client.ObjectKey{Name: "flip-lock"}}
	env.StartManagerWithCache(t, s.cacheOptions(), func(_ context.Context, mgr manager.Manager) error {
		e := engine.New(upgradeStandInKind, u, engine.Deps{Recorder: mgr.GetEventRecorderFor("upgrade-stand-in"), LockNamespace: s.lockNS})
		_, err := e.Setup(mgr)
		return err
	})
	up := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "upgrade-lock"},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"fliplock-b"}}}
	var wg sync.WaitGroup
	var f *nwv1.BondModeFlipPlan
	wg.Add(2)
	go func() { defer wg.Done(); f = s.flip("flip-lock", nwv1.VMProtectionNone) }()
	go func() {
		defer wg.Done()
		if err := env.Client.Create(context.Background(), up); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), up) })
	s.ended(f, nwv1.WorkflowSucceeded)
	waitFinished(t, up)
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, v := range u.violations {
		t.Error(v)
	}
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondMode8023AD {
			t.Errorf("%s's bond runs %s, want 802.3ad", n, got)
		}
	}
}

func waitFinished(t *testing.T, up *nwv1.ReplicationUpgrade) {
	t.Helper()
	eventually(t, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(up), up); err != nil {
			return err.Error()
		}
		if up.Status.Phase != nwv1.WorkflowSucceeded {
			return "the upgrade is " + string(up.Status.Phase)
		}
		return ""
	})
}
