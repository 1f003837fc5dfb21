package agentstatus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bridge"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/controller/agentstatus"
	"github.com/spectrocloud/nodewright/internal/controller/nodewrightcluster"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// TestTheConfigMapHandlerLetsTicksPassOnlyWhileEveryNodeIsFresh drives the handler the
// controllers share with one update at a time and counts what it queues: a heartbeat that
// ticks forward on a fresh node queues nothing while the cluster says every heartbeat is
// fresh, and queues its node otherwise; a real change always queues.
func TestTheConfigMapHandlerLetsTicksPassOnlyWhileEveryNodeIsFresh(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	h := bridge.ConfigMapHandler(env.Client, clocktesting.NewFakePassiveClock(now), nil, func(c legacy.Changes) []reconcile.Request {
		var requests []reconcile.Request
		for name := range c.Nodes {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
		}
		return requests
	})
	heartbeat := legacy.NodeKey(f.Node(1), legacy.FieldHeartbeat)
	configMap := func(beat time.Time, drbd string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: bt.ConfigMapName},
			Data: map[string]string{
				legacy.KeyNodes: f.Node(1), legacy.KeyState: string(legacy.SingleNodeReady),
				heartbeat: beat.Format(time.RFC3339), legacy.NodeKey(f.Node(1), legacy.FieldDRBD): drbd,
			},
		}
	}
	healthy := `{"resources":2,"connected":2,"upToDate":2,"outOfSyncKiB":0}`
	queued := func(before, after *corev1.ConfigMap) []string {
		t.Helper()
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		h.Update(ctx, event.UpdateEvent{ObjectOld: before, ObjectNew: after}, q)
		var names []string
		for q.Len() > 0 {
			req, _ := q.Get()
			names = append(names, req.Name)
			q.Done(req)
		}
		return names
	}
	setFresh := func(status metav1.ConditionStatus) {
		t.Helper()
		nwc := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
			t.Fatal(err)
		}
		meta.SetStatusCondition(&nwc.Status.Conditions, metav1.Condition{Type: nwv1.ConditionHeartbeatsFresh, Status: status,
			Reason: nwv1.ReasonHeartbeatsFresh, Message: "set by the test"})
		if err := env.Client.Status().Update(ctx, nwc); err != nil {
			t.Fatal(err)
		}
	}
	tick := func() []string { return queued(configMap(now.Add(-time.Second), healthy), configMap(now, healthy)) }
	change := func() []string {
		return queued(configMap(now, healthy), configMap(now, `{"resources":2,"connected":1,"upToDate":1,"outOfSyncKiB":8}`))
	}

	setFresh(metav1.ConditionTrue)
	if got := tick(); len(got) != 0 {
		t.Errorf("every node fresh: a heartbeat tick queued %v, want nothing", got)
	}
	if got := change(); len(got) != 1 || got[0] != f.Node(1) {
		t.Errorf("every node fresh: a DRBD change queued %v, want [%s]", got, f.Node(1))
	}
	for _, status := range []metav1.ConditionStatus{metav1.ConditionFalse, metav1.ConditionUnknown} {
		setFresh(status)
		if got := tick(); len(got) != 1 || got[0] != f.Node(1) {
			t.Errorf("HeartbeatsFresh %s: a heartbeat tick queued %v, want [%s]", status, got, f.Node(1))
		}
	}
}

// TestAClockSteppedBackDoesNotHoldANodeStale: a node found stale is judged fresh again by
// its next heartbeat, even when the clock stepped back in between, so that the handler,
// judging at the new time, would take the heartbeat for a quiet tick of a fresh node; until
// that is fixed nothing wakes the node again, and it stays stale while it heartbeats.
func TestAClockSteppedBackDoesNotHoldANodeStale(t *testing.T) {
	// Short, so that the wake each reconcile of a fresh node asks for (at its deadline, in
	// real time) is soon spent; the fake clock decides what is stale.
	const staleAfter = 3 * time.Second
	f := bt.New(t, env, staleAfter)
	start := time.Now().UTC().Truncate(time.Second)
	clk := clocktesting.NewFakeClock(start)
	env.StartManager(t, func(ctx context.Context, mgr manager.Manager) error {
		recorder := mgr.GetEventRecorderFor("nodewright-test")
		if err := (&nodewrightcluster.Reconciler{Client: mgr.GetClient(), Recorder: recorder, Clock: clk}).SetupWithManager(ctx, mgr); err != nil {
			return err
		}
		return (&agentstatus.Reconciler{Client: mgr.GetClient(), Recorder: recorder, Clock: clk}).SetupWithManager(mgr)
	})
	f.SetNodes(f.Node(1), f.Node(2))
	for _, n := range []string{f.Node(1), f.Node(2)} {
		f.Data[legacy.NodeKey(n, legacy.FieldHeartbeat)] = start.Format(time.RFC3339)
	}
	f.Transition(legacy.MultiNodeReady)
	freshness := func(node string, fresh bool, clusterFresh metav1.ConditionStatus) func() string {
		return func() string {
			as, _ := agent(t, node)
			if as == nil || as.Status.Heartbeat.Stale == fresh {
				return fmt.Sprintf("node %s heartbeat %s, want stale %t", node, heartbeatOf(as), !fresh)
			}
			if c := meta.FindStatusCondition(f.Status().Status.Conditions, nwv1.ConditionHeartbeatsFresh); c == nil || c.Status != clusterFresh {
				return fmt.Sprintf("the cluster's HeartbeatsFresh %+v, want %s", c, clusterFresh)
			}
			return ""
		}
	}
	bt.Eventually(t, wait, freshness(f.Node(1), true, metav1.ConditionTrue))

	// Two minutes on, a DRBD report (a real change) has both controllers look: stale.
	clk.Step(2 * time.Minute)
	f.Data[legacy.NodeKey(f.Node(1), legacy.FieldDRBD)] = `{"resources":2,"connected":2,"upToDate":2,"outOfSyncKiB":4}`
	f.Write()
	bt.Eventually(t, wait, freshness(f.Node(1), false, metav1.ConditionFalse))
	// A stale node asks for no wake; let the one asked for while it was fresh come and go,
	// so that only the heartbeat below can have it looked at again.
	time.Sleep(3 * staleAfter)

	// The clock steps back to one second after the start, where the last heartbeat is fresh;
	// node 1 heartbeats at two.
	clk.SetTime(start.Add(time.Second))
	f.Data[legacy.NodeKey(f.Node(1), legacy.FieldHeartbeat)] = start.Add(2 * time.Second).Format(time.RFC3339)
	f.Write()
	bt.Eventually(t, wait, func() string {
		as, _ := agent(t, f.Node(1))
		if as == nil || as.Status.Heartbeat.Stale {
			return fmt.Sprintf("node 1 heartbeat %s, want fresh after its heartbeat at %s", heartbeatOf(as), start.Add(2*time.Second).Format(time.RFC3339))
		}
		return ""
	})
}

func heartbeatOf(as *nwv1.NodewrightAgentStatus) string {
	if as == nil {
		return "(no NodewrightAgentStatus)"
	}
	return fmt.Sprintf("%s, stale %t", as.Status.Heartbeat.LastSeen.UTC().Format(time.RFC3339), as.Status.Heartbeat.Stale)
}
