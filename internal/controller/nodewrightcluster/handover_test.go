package nodewrightcluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/controller/agentstatus"
	"github.com/spectrocloud/nodewright/internal/controller/nodewrightcluster"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// legacyDaemonSet creates the legacy DaemonSet the fixture names, and one pod of it per name.
func legacyDaemonSet(t *testing.T, f *bt.Fixture, pods ...string) *appsv1.DaemonSet {
	t.Helper()
	labels := map[string]string{"app": "node-init"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: bt.DaemonSetName},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node-init", Image: "node-init:1"}}}},
		},
	}
	if err := env.Client.Create(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		legacyPod(t, f, p)
	}
	return ds
}

// legacyPod creates a pod of the legacy DaemonSet.
func legacyPod(t *testing.T, f *bt.Fixture, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name, Labels: map[string]string{"app": "node-init"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node-init", Image: "node-init:1"}}}}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// setManagement sets spec.management, as a person would (no admission webhook runs here).
func setManagement(t *testing.T, mode nwv1.ManagementMode) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, c); err != nil {
			return err
		}
		c.Spec.Management = mode
		return env.Client.Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func handoverIs(mode nwv1.ManagementMode, status metav1.ConditionStatus, reason string, says ...string) func(*nwv1.NodewrightCluster) string {
	return func(c *nwv1.NodewrightCluster) string {
		cond := condition(c, nwv1.ConditionManagementApplied)
		ok := c.Status.Management == mode && cond.Status == status && cond.Reason == reason
		for _, s := range says {
			ok = ok && strings.Contains(cond.Message, s)
		}
		if !ok {
			return fmt.Sprintf("management %q, ManagementApplied %+v; want %s, %s %s saying %q", c.Status.Management, cond, mode, status, reason, says)
		}
		return ""
	}
}

// TestTheControllerHandsOverOnlyToReportingAgents runs the NodewrightCluster and
// NodewrightAgentStatus controllers without admission, where nothing refused the switch: the
// controller keeps Observe in effect while a Node's agent does not report or the legacy
// DaemonSet has a pod, saying which; hands over once every agent reports and the pod is gone,
// and records it; then reads the agents, not the ConfigMap; a legacy pod back holds the
// workflows; and the switch back to Observe reads the ConfigMap again.
func TestTheControllerHandsOverOnlyToReportingAgents(t *testing.T) {
	ctx := context.Background()
	f := bt.New(t, env, 10*time.Second)
	agentNS := env.Namespace(t)
	trail := openTrail(t)
	env.StartManager(t, func(ctx context.Context, mgr manager.Manager) error {
		recorder := mgr.GetEventRecorderFor("nodewright-test")
		if err := (&nodewrightcluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder,
			Audit: trail.log, Actor: "operator", AgentNamespace: agentNS}).SetupWithManager(ctx, mgr); err != nil {
			return err
		}
		return (&agentstatus.Reconciler{Client: mgr.GetClient(), Recorder: recorder, AgentNamespace: agentNS}).SetupWithManager(mgr)
	})
	n1, n2, n3 := f.Node(1), f.Node(2), f.Node(3)
	f.SetNodes(n1, n2)
	f.Transition(legacy.MultiNodeReady)
	expect(f, phaseIs(nwv1.ClusterMultiNode, legacy.MultiNodeReady))
	expect(f, handoverIs(nwv1.ManagementObserve, metav1.ConditionTrue, nwv1.ReasonObserving))
	ds := legacyDaemonSet(t, f, "node-init-a")
	bt.CreateNode(t, env, n1)
	bt.CreateNode(t, env, n2)

	setManagement(t, nwv1.ManagementManaged)
	expect(f, handoverIs(nwv1.ManagementObserve, metav1.ConditionFalse, nwv1.ReasonHandoverRefused,
		"no agent reports for 2 of 2 nodes: "+n1+" (no heartbeat Lease "+agentNS+"/"+n1+"), "+n2,
		"the legacy DaemonSet "+f.Namespace+"/node-init has 1 pod (node-init-a)"))
	bt.Eventually(t, wait, func() string {
		if msg, ok := clusterEvent(t, f.Cluster.UID, nwv1.ReasonHandoverRefused); !ok || !strings.Contains(msg, "node-init-a") {
			return fmt.Sprintf("no Warning Event HandoverRefused naming the legacy pod: %q", msg)
		}
		return ""
	})
	agents := bt.StartAgents(t, env, agentNS, time.Second, n1, n2)
	expect(f, func(c *nwv1.NodewrightCluster) string {
		if msg := handoverIs(nwv1.ManagementObserve, metav1.ConditionFalse, nwv1.ReasonHandoverRefused, "node-init-a")(c); msg != "" {
			return msg
		}
		if cond := condition(c, nwv1.ConditionManagementApplied); strings.Contains(cond.Message, "no agent reports") {
			return "the agents report, but the refusal still names them: " + cond.Message
		}
		return ""
	})
	// Still observed: the legacy state is read.
	if c := f.Status(); c.Status.LegacyState != legacy.MultiNodeReady {
		t.Fatalf("legacy state %q while the handover waits", c.Status.LegacyState)
	}

	if err := env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "node-init-a"}},
		client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	expect(f, handoverIs(nwv1.ManagementManaged, metav1.ConditionTrue, nwv1.ReasonHandedOver,
		"their agents report through their heartbeat Leases in "+agentNS, "node-init has no pods"))
	expect(f, func(c *nwv1.NodewrightCluster) string {
		if c.Status.Phase != nwv1.ClusterMultiNode || c.Status.Nodes != (nwv1.NodeCounts{Ready: 2, Total: 2}) || c.Status.LegacyState != "" {
			return fmt.Sprintf("phase %s, nodes %+v, legacy state %q; want MultiNode from the two agents, no legacy state", c.Status.Phase, c.Status.Nodes, c.Status.LegacyState)
		}
		for _, gone := range []string{nwv1.ConditionObserved, nwv1.ConditionStateRecognized, nwv1.ConditionDaemonSetAvailable} {
			if meta.FindStatusCondition(c.Status.Conditions, gone) != nil {
				return "the legacy condition " + gone + " is still there in Managed"
			}
		}
		return ""
	})
	// Storage on one node only: the agents of both report, but only n1's reports DRBD data
	// (a diskful replica): SingleNode until n2 holds data too (a ReplicationUpgrade placed it).
	reportDRBD(t, n1, "UpToDate")
	reportDRBD(t, n2, "Diskless")
	expect(f, func(c *nwv1.NodewrightCluster) string {
		fresh := condition(c, nwv1.ConditionHeartbeatsFresh)
		if c.Status.Phase != nwv1.ClusterSingleNode || !strings.Contains(fresh.Message, "only "+n1+" holds DRBD data") {
			return fmt.Sprintf("phase %s, HeartbeatsFresh %q; want SingleNode, only %s holding data", c.Status.Phase, fresh.Message, n1)
		}
		return ""
	})
	reportDRBD(t, n2, "Inconsistent")
	expect(f, phaseIs(nwv1.ClusterMultiNode, ""))
	// The rest of the test has no agent reporting: the bridge's view.
	reportDRBD(t, n1, "")
	reportDRBD(t, n2, "")
	bt.Eventually(t, wait, func() string {
		records := trail.records(t, string(f.Cluster.UID))
		if !strings.Contains(records, `"action":"`+nodewrightcluster.ActionManagementSwitched+`","from":"Observe","to":"Managed","reason":"HandedOver"`) ||
			!strings.Contains(records, `{"name":"requestedBy","value":"unknown (no admission webhook stamped nodewright.spectrocloud.com/management-set-by)"}`) ||
			!strings.Contains(records, `{"name":"agents","value":"`+n1+","+n2+`"}`) {
			return "no audit record of the switch to Managed:\n" + records
		}
		return ""
	})

	// The ConfigMap is not read any more: the legacy DaemonSet's last word (FAILED, a node
	// it alone knows) changes nothing; the agents and the Nodes do.
	f.SetNodes(n1, n2, f.Node(9))
	f.Transition(legacy.Failed)
	bt.CreateNode(t, env, n3)
	agents.Stop(n2)
	expect(f, func(c *nwv1.NodewrightCluster) string {
		fresh := condition(c, nwv1.ConditionHeartbeatsFresh)
		if c.Status.Phase != nwv1.ClusterDegraded || c.Status.Nodes != (nwv1.NodeCounts{Ready: 1, Total: 3}) || c.Status.LegacyState != "" ||
			fresh.Status != metav1.ConditionFalse || !strings.Contains(fresh.Message, n2+" (heartbeat Lease "+agentNS+"/"+n2+" last renewed") ||
			!strings.Contains(fresh.Message, n3+" (no heartbeat Lease "+agentNS+"/"+n3+")") {
			return fmt.Sprintf("phase %s, nodes %+v, legacy state %q, HeartbeatsFresh %+v; want Degraded, 1 of 3 ready, naming %s and %s",
				c.Status.Phase, c.Status.Nodes, c.Status.LegacyState, fresh, n2, n3)
		}
		return handoverIs(nwv1.ManagementManaged, metav1.ConditionTrue, nwv1.ReasonHandedOver)(c)
	})
	bt.Eventually(t, wait, func() string {
		as := &nwv1.NodewrightAgentStatus{}
		for node, stale := range map[string]bool{n1: false, n2: true, n3: true} {
			if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
				return fmt.Sprintf("%s: %v", node, err)
			}
			cond := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionHeartbeatFresh)
			if as.Status.Heartbeat.Stale != stale || cond == nil || !strings.Contains(cond.Message, agentNS+"/"+node) {
				return fmt.Sprintf("%s: stale %v, HeartbeatFresh %+v; want stale %v from its Lease", node, as.Status.Heartbeat.Stale, cond, stale)
			}
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: f.Node(9)}, as); !apierrors.IsNotFound(err) {
			return "a NodewrightAgentStatus for " + f.Node(9) + ", which only the legacy ConfigMap lists"
		}
		// The legacy DaemonSet's report of a node is not observed any more: the bridge let go
		// of it (no agent reports it here); the role stays.
		if err := env.Client.Get(ctx, client.ObjectKey{Name: n1}, as); err != nil {
			return err.Error()
		}
		if st := as.Status; st.Reporter != "" || st.Storage != nil || st.Network.BondMode != "" || st.Role != nwv1.NodeRolePrimary ||
			meta.FindStatusCondition(st.Conditions, nwv1.ConditionStorageHealthy) != nil {
			return fmt.Sprintf("%s in Managed: %+v; want the legacy report gone, the role kept", n1, st)
		}
		return ""
	})

	// A legacy pod back (the DaemonSet controller schedules it and says so in the status):
	// Managed stays in effect, but the condition holds every workflow.
	legacyPod(t, f, "node-init-b")
	ds.Status.CurrentNumberScheduled = 1
	if err := env.Client.Status().Update(ctx, ds); err != nil {
		t.Fatal(err)
	}
	expect(f, handoverIs(nwv1.ManagementManaged, metav1.ConditionFalse, nwv1.ReasonLegacyDaemonSetRunning, "has 1 pod (node-init-b)"))

	// Back to Observe: the ConfigMap is read again, and the nodes are the ones it lists.
	setManagement(t, nwv1.ManagementObserve)
	expect(f, handoverIs(nwv1.ManagementObserve, metav1.ConditionTrue, nwv1.ReasonObserving))
	expect(f, phaseIs(nwv1.ClusterDegraded, legacy.Failed))
	bt.Eventually(t, wait, func() string {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: n3}, &nwv1.NodewrightAgentStatus{}); !apierrors.IsNotFound(err) {
			return "the NodewrightAgentStatus of " + n3 + ", which the legacy ConfigMap does not list, is still there in Observe"
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: f.Node(9)}, &nwv1.NodewrightAgentStatus{}); err != nil {
			return "no NodewrightAgentStatus for " + f.Node(9) + ", which the legacy ConfigMap lists: " + err.Error()
		}
		records := trail.records(t, string(f.Cluster.UID))
		if !strings.Contains(records, `"action":"`+nodewrightcluster.ActionManagementSwitched+`","from":"Managed","to":"Observe","reason":"Observing"`) {
			return "no audit record of the switch back to Observe:\n" + records
		}
		return ""
	})
}

// reportDRBD writes, as node's agent does, one DRBD resource whose disk on the node is in
// diskState (Diskless: a client, no data there); with no diskState, no report at all.
func reportDRBD(t *testing.T, node, diskState string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, as); err != nil {
			return err
		}
		as.Status.Reporter, as.Status.Storage = "", nil
		if diskState == "" {
			return env.Client.Status().Update(context.Background(), as)
		}
		as.Status.Reporter = nwv1.ReporterAgent
		as.Status.Storage = &nwv1.DRBDStatus{Resources: 1, Connected: 1, ResourceStatuses: []nwv1.DRBDResourceStatus{{Name: "pvc-one",
			Volumes: []nwv1.DRBDVolumeStatus{{Volume: 0, DiskState: diskState, Client: diskState == "Diskless"}}}}}
		return env.Client.Status().Update(context.Background(), as)
	})
	if err != nil {
		t.Fatal(err)
	}
}
