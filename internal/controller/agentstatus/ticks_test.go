package agentstatus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bridge"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/operator"
)

// TestHeartbeatTicksReconcileNothing: a heartbeat that only ticks forward on a fresh node
// changes nothing derived from the ConfigMap, so it must cost neither controller a
// reconcile; with 50 nodes heartbeating every second, a parse and a reconcile per tick was
// most of the operator's CPU. Each burst of ticks is followed by one real change (a state
// transition and a DRBD report in one write): once both controllers show it, their watch
// handlers have taken every tick before it, in order, and their queues are past them.
func TestHeartbeatTicksReconcileNothing(t *testing.T) {
	f := bt.New(t, env, 30*time.Minute) // no node goes stale during the test
	// The handlers read the cluster from the manager's cache: while it does not yet show
	// HeartbeatsFresh True there, every heartbeat counts as a change (ConfigMapHandler).
	var cache client.Reader
	env.StartManager(t, func(ctx context.Context, mgr manager.Manager) error {
		cache = mgr.GetCache()
		return operator.SetupControllers(ctx, mgr)
	})
	f.SetNodes(f.Node(1), f.Node(2))
	f.Transition(legacy.SingleNodeReady)

	drbd := legacy.NodeKey(f.Node(2), legacy.FieldDRBD)
	settle := func(state legacy.State, outOfSync int) {
		t.Helper()
		f.Data[drbd] = fmt.Sprintf(`{"resources":2,"connected":2,"upToDate":2,"outOfSyncKiB":%d}`, outOfSync)
		f.Transition(state)
		bt.Eventually(t, wait, func() string {
			c := f.Status()
			as, _ := agent(t, f.Node(2))
			if c.Status.LegacyState != state || as == nil || as.Status.Storage == nil || as.Status.Storage.OutOfSyncKiB != int64(outOfSync) {
				return fmt.Sprintf("state %s, node 2 %+v; want %s and %d KiB out of sync", c.Status.LegacyState, as, state, outOfSync)
			}
			if as, _ := agent(t, f.Node(1)); as == nil || as.Status.Heartbeat.Stale ||
				!meta.IsStatusConditionPresentAndEqual(as.Status.Conditions, nwv1.ConditionHeartbeatFresh, metav1.ConditionTrue) {
				return fmt.Sprintf("node 1 %+v, want fresh", as)
			}
			return cachedHeartbeatsFresh(t, cache, true)
		})
	}
	settle(legacy.PeerDetected, 0)
	clusterBefore, agentsBefore := bt.Reconciles(t, "nodewrightcluster"), bt.Reconciles(t, "nodewrightagentstatus")

	// Distinct heartbeats moving forward, one write each, as fast as the API server takes them.
	heartbeat := legacy.NodeKey(f.Node(1), legacy.FieldHeartbeat)
	start := time.Now().UTC().Truncate(time.Second)
	const ticks = 60
	for i := 1; i <= ticks; i++ {
		f.Data[heartbeat] = start.Add(time.Duration(i) * time.Second).Format(time.RFC3339)
		f.Write()
	}
	settle(legacy.SingleNodeReady, 1024)

	// The real change costs each controller one reconcile. A few more are retries (a write
	// that met the other controller's) and what a loaded machine's timing adds: CI saw 4 in a
	// full run beside other packages. A tick that cost a reconcile would cost dozens: 60
	// writes, each a round trip to the API server, coalesce into few queue entries only when
	// the controller is slower than all of them together.
	const most = 5
	cluster, agents := bt.Reconciles(t, "nodewrightcluster")-clusterBefore, bt.Reconciles(t, "nodewrightagentstatus")-agentsBefore
	if cluster > most || agents > most {
		t.Errorf("%d heartbeat ticks and one change cost the NodewrightCluster controller %.0f reconciles and the NodewrightAgentStatus controller %.0f; want 1 each (%d at most)",
			ticks, cluster, agents, most)
	}
}

// cachedHeartbeatsFresh says what is wrong unless the manager's cache shows the cluster's
// HeartbeatsFresh condition as want. The watch handlers judge a heartbeat by the cluster in
// that cache, which can lag the API server: a test that counts reconciles waits for it.
func cachedHeartbeatsFresh(t *testing.T, cache client.Reader, want bool) string {
	t.Helper()
	cached := &nwv1.NodewrightCluster{}
	if err := cache.Get(t.Context(), bridge.ClusterKey, cached); err != nil ||
		meta.IsStatusConditionTrue(cached.Status.Conditions, nwv1.ConditionHeartbeatsFresh) != want {
		return fmt.Sprintf("the manager's cache shows the cluster's conditions %+v (%v), want HeartbeatsFresh %v", cached.Status.Conditions, err, want)
	}
	return ""
}
