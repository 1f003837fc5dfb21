package agentstatus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/operator"
)

// renew sets node's heartbeat Lease in ns as renewed at when, creating it if need be, as the
// agent's lease controller does.
func renew(t *testing.T, ns, node string, when time.Time) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: node}}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
			l.Spec.HolderIdentity, l.Spec.RenewTime = &node, &metav1.MicroTime{Time: when}
			return env.Client.Create(ctx, l)
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: when}
		return env.Client.Update(ctx, l)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLeaseRenewalsReconcileNothing: in the Managed mode the agents renew their Leases every
// 10 s, which changes nothing derived from them while they are fresh; like the legacy
// heartbeats, such a renewal must cost neither controller a reconcile. The renewals are
// followed by one real change (an agent's Lease goes): once both controllers show it, their
// handlers have taken every renewal before it. The same change, and its undoing, are made
// first, so that the events of the handover are behind when counting starts.
func TestLeaseRenewalsReconcileNothing(t *testing.T) {
	f := bt.New(t, env, 30*time.Minute) // no agent goes stale during the test
	agentNS := env.Namespace(t)
	var cache client.Reader
	env.StartManager(t, func(ctx context.Context, mgr manager.Manager) error {
		cache = mgr.GetCache()
		return operator.SetupControllersWithAgents(agentNS)(ctx, mgr)
	})
	n1, n2 := f.Node(1), f.Node(2)
	start := time.Now().UTC()
	for _, n := range []string{n1, n2} {
		bt.CreateNode(t, env, n)
		renew(t, agentNS, n, start)
	}
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.Cluster), c); err != nil {
			return err
		}
		c.Spec.Management = nwv1.ManagementManaged
		return env.Client.Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	// settled waits until n2's agent reports (or not), as the cluster and its status say.
	settled := func(reports bool) {
		t.Helper()
		bt.Eventually(t, wait, func() string {
			c := f.Status()
			if c.Status.Management != nwv1.ManagementManaged ||
				meta.IsStatusConditionTrue(c.Status.Conditions, nwv1.ConditionHeartbeatsFresh) != reports {
				return fmt.Sprintf("management %q, conditions %+v; want Managed, HeartbeatsFresh %v", c.Status.Management, c.Status.Conditions, reports)
			}
			for n, fresh := range map[string]bool{n1: true, n2: reports} {
				if as, _ := agent(t, n); as == nil || meta.IsStatusConditionTrue(as.Status.Conditions, nwv1.ConditionHeartbeatFresh) != fresh {
					return fmt.Sprintf("node %s: %+v, want HeartbeatFresh %v", n, as, fresh)
				}
			}
			return cachedHeartbeatsFresh(t, cache, reports)
		})
	}
	deleteLease := func() {
		t.Helper()
		if err := env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: n2}}); err != nil {
			t.Fatal(err)
		}
	}
	settled(true)
	deleteLease()
	settled(false)
	renew(t, agentNS, n2, time.Now())
	settled(true)
	clusterBefore, agentsBefore := bt.Reconciles(t, "nodewrightcluster"), bt.Reconciles(t, "nodewrightagentstatus")

	const renewals = 20
	for i := 1; i <= renewals; i++ {
		renew(t, agentNS, n1, start.Add(time.Duration(i)*time.Second))
	}
	deleteLease()
	settled(false)

	// The Lease's deletion costs each controller one reconcile; one more is a retry at most.
	cluster, agents := bt.Reconciles(t, "nodewrightcluster")-clusterBefore, bt.Reconciles(t, "nodewrightagentstatus")-agentsBefore
	if cluster > 2 || agents > 2 {
		t.Errorf("%d Lease renewals and a Lease deleted cost the NodewrightCluster controller %.0f reconciles and the NodewrightAgentStatus controller %.0f; want 1 each (2 at most)",
			renewals, cluster, agents)
	}
}
