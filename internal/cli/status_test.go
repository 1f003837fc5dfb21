package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// statusNow is the clock of the status tests.
var statusNow = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(statusNow.Add(-d)) }

func condition(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, LastTransitionTime: ago(time.Hour)}
}

// createCluster creates the NodewrightCluster singleton and writes its status through the
// status subresource, as the operator would; the test's cleanup deletes it.
func createCluster(t *testing.T, spec nwv1.NodewrightClusterSpec, status nwv1.NodewrightClusterStatus) {
	t.Helper()
	ctx := context.Background()
	nwc := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName}, Spec: spec}
	if err := env.Client.Create(ctx, nwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), nwc) })
	nwc.Status = status
	if err := env.Client.Status().Update(ctx, nwc); err != nil {
		t.Fatal(err)
	}
}

func createAgent(t *testing.T, name string, status nwv1.NodewrightAgentStatusStatus) {
	t.Helper()
	ctx := context.Background()
	a := &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), a) })
	a.Status = status
	if err := env.Client.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
}

func legacySource(ns string) nwv1.LegacySource {
	return nwv1.LegacySource{
		ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: ns, Name: "node-init-state"},
		DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: ns, Name: "node-init"},
		EventComponent: "node-init",
	}
}

// degradedCluster is a two-node cluster with a tiebreaker whose second node's heartbeat went
// stale during a resync; node-c is not in the legacy ConfigMap, so its age is that of lastSeen.
func degradedCluster(t *testing.T) {
	t.Helper()
	ns := env.Namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-init-state"}, Data: map[string]string{
		"state": "DRBD_DEGRADED", "previousState": "MULTI_NODE_READY", "stateSince": statusNow.Add(-5 * time.Minute).Format(time.RFC3339),
		"generation": "14", "nodes": "node-a,node-b",
		"node.node-a.heartbeat": statusNow.Add(-4 * time.Second).Format(time.RFC3339), "node.node-a.role": "primary",
		"node.node-b.heartbeat": statusNow.Add(-2 * time.Minute).Format(time.RFC3339), "node.node-b.role": "secondary",
	}}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	since := ago(5 * time.Minute)
	createCluster(t, nwv1.NodewrightClusterSpec{Legacy: legacySource(ns), ProfileRef: &nwv1.ProfileReference{Name: "site-a"}},
		nwv1.NodewrightClusterStatus{
			Phase: nwv1.ClusterDegraded, LegacyState: "DRBD_DEGRADED", LegacyStateSince: &since, LegacyGeneration: 14,
			Nodes: nwv1.NodeCounts{Ready: 1, Total: 3}, Management: nwv1.ManagementObserve,
			Conditions: []metav1.Condition{
				condition(nwv1.ConditionManagementApplied, metav1.ConditionTrue, nwv1.ReasonObserving, "spec.management is Observe: the legacy DaemonSet decides"),
				condition(nwv1.ConditionObserved, metav1.ConditionTrue, nwv1.ReasonConfigMapRead, "read "+ns+"/node-init-state"),
				condition(nwv1.ConditionStateRecognized, metav1.ConditionTrue, nwv1.ReasonStateParsed, "state DRBD_DEGRADED, generation 14"),
				condition(nwv1.ConditionHeartbeatsFresh, metav1.ConditionFalse, nwv1.ReasonHeartbeatsStale, "node-b: heartbeat 2m0s old (threshold 30s)"),
				condition(nwv1.ConditionDaemonSetAvailable, metav1.ConditionUnknown, nwv1.ReasonDaemonSetNotFound, "DaemonSet "+ns+"/node-init not found"),
				condition(nwv1.ConditionProfileApplied, metav1.ConditionTrue, nwv1.ReasonProfileApplied, "EdgeProfile site-a 1.2.0 is in force"),
			},
			Profile: &nwv1.ActiveProfile{Name: "site-a", Version: "1.2.0", Digest: "sha256:" + strings.Repeat("ab", 32), KeyID: "SHA256:k3y"},
			RecentWarnings: []nwv1.ClusterWarning{
				{Time: ago(3 * time.Minute), Source: nwv1.WarningFromTransition, Reason: "UnexpectedTransition", Message: "MULTI_NODE_READY -> DRBD_DEGRADED"},
				{Time: ago(time.Minute), Source: nwv1.WarningFromEvent, Reason: "LegacyWarning", Message: "node-b: DRBD resource pvc-1 is\nStandAlone"},
			},
		})
	lastSeen := ago(10 * time.Minute)
	createAgent(t, "node-a", nwv1.NodewrightAgentStatusStatus{Role: nwv1.NodeRolePrimary,
		Storage: &nwv1.DRBDStatus{Resources: 4, Connected: 4, UpToDate: 4}, Network: nwv1.NodeNetworkStatus{BondMode: nwv1.BondMode8023AD}})
	createAgent(t, "node-b", nwv1.NodewrightAgentStatusStatus{Role: nwv1.NodeRoleSecondary, Heartbeat: nwv1.HeartbeatStatus{Stale: true},
		Storage: &nwv1.DRBDStatus{Resources: 4, Connected: 3, UpToDate: 2, OutOfSyncKiB: 1 << 20}, Network: nwv1.NodeNetworkStatus{BondMode: nwv1.BondMode8023AD}})
	createAgent(t, "node-c", nwv1.NodewrightAgentStatusStatus{Role: nwv1.NodeRoleTiebreaker, Heartbeat: nwv1.HeartbeatStatus{Stale: true, LastSeen: &lastSeen}})
}

func TestStatusTable(t *testing.T) {
	degradedCluster(t)
	r := plugin(t, runOpts{now: statusNow}, "status")
	r.wantCode(t, ExitOK)
	want := `NodewrightCluster nodewright: Degraded
  Management:    Observe: the legacy DaemonSet decides
  Legacy state:  DRBD_DEGRADED since 2026-11-21T09:55:00Z (5m00s ago), generation 14
  Nodes ready:   1 of 3

CONDITION            STATUS    REASON              MESSAGE
HeartbeatsFresh      False     HeartbeatsStale     node-b: heartbeat 2m0s old (threshold 30s)
DaemonSetAvailable   Unknown   DaemonSetNotFound   DaemonSet NS/node-init not found
ManagementApplied    True      Observing           spec.management is Observe: the legacy DaemonSet decides
Observed             True      ConfigMapRead       read NS/node-init-state
StateRecognized      True      StateParsed         state DRBD_DEGRADED, generation 14
ProfileApplied       True      Applied             EdgeProfile site-a 1.2.0 is in force

NODE     ROLE         HEARTBEAT     STALE   DRBD CONNECTED   UP-TO-DATE   OUT-OF-SYNC   BOND
node-a   primary      4s ago        no      4/4              4/4          0             802.3ad
node-b   secondary    2m00s ago     yes     3/4              2/4          1.0 GiB       802.3ad
node-c   tiebreaker   10m00s ago*   yes     -                -            -             -
* no heartbeat in the legacy ConfigMap (or it could not be read): age of status.heartbeat.lastSeen, which changes only when the node's freshness does

Profile: site-a version 1.2.0, sha256:abababababababababababababababababababababababababababababababab, signed by SHA256:k3y
  ProfileApplied: True Applied: EdgeProfile site-a 1.2.0 is in force

Recent warnings (newest last):
TIME                   SOURCE       REASON                 MESSAGE
2026-11-21T09:57:00Z   Transition   UnexpectedTransition   MULTI_NODE_READY -> DRBD_DEGRADED
2026-11-21T09:59:00Z   Event        LegacyWarning          node-b: DRBD resource pvc-1 is StandAlone
`
	ns := clusterConfigMapNamespace(t)
	if got := strings.ReplaceAll(r.stdout, ns, "NS"); got != want {
		t.Errorf("status:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(r.stdout, "\x1b[") {
		t.Error("status coloured its output although it is not a terminal")
	}

	// On a terminal it is coloured, unless --no-color.
	if r := plugin(t, runOpts{now: statusNow, terminal: true}, "status"); !strings.Contains(r.stdout, "\x1b[31mDegraded\x1b[0m") {
		t.Errorf("on a terminal the phase is not red:\n%q", r.stdout)
	}
	if r := plugin(t, runOpts{now: statusNow, terminal: true}, "status", "--no-color"); strings.Contains(r.stdout, "\x1b[") {
		t.Errorf("--no-color coloured:\n%q", r.stdout)
	}
}

func clusterConfigMapNamespace(t *testing.T) string {
	t.Helper()
	nwc := &nwv1.NodewrightCluster{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
		t.Fatal(err)
	}
	return nwc.Spec.Legacy.ConfigMapRef.Namespace
}

func TestStatusJSON(t *testing.T) {
	degradedCluster(t)
	r := plugin(t, runOpts{now: statusNow}, "status", "-o", "json")
	r.wantCode(t, ExitOK)
	var got statusReport
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, r.stdout)
	}
	if got.Phase != nwv1.ClusterDegraded || got.LegacyState != "DRBD_DEGRADED" || got.Nodes.Ready != 1 || got.Nodes.Total != 3 {
		t.Errorf("phase %s, legacy state %s, nodes %+v", got.Phase, got.LegacyState, got.Nodes)
	}
	if m := got.Management; m.Requested != nwv1.ManagementObserve || m.InEffect != nwv1.ManagementObserve || m.Handover == nil || m.Handover.Reason != nwv1.ReasonObserving {
		t.Errorf("management %+v, want Observe requested and in effect", m)
	}
	var order []string
	for _, c := range got.Conditions {
		order = append(order, c.Type+"="+string(c.Status))
	}
	if want := "HeartbeatsFresh=False DaemonSetAvailable=Unknown ManagementApplied=True Observed=True StateRecognized=True ProfileApplied=True"; strings.Join(order, " ") != want {
		t.Errorf("conditions %v, want False first: %s", order, want)
	}
	if len(got.Agents) != 3 {
		t.Fatalf("agents %+v", got.Agents)
	}
	a, b, c := got.Agents[0], got.Agents[1], got.Agents[2]
	if a.Name != "node-a" || a.Heartbeat.Source != heartbeatFromConfigMap || *a.Heartbeat.AgeSeconds != 4 || a.Heartbeat.Stale {
		t.Errorf("node-a %+v", a)
	}
	if b.Storage == nil || b.Storage.OutOfSyncKiB != 1<<20 || !b.Heartbeat.Stale || b.BondMode != nwv1.BondMode8023AD || *b.Heartbeat.AgeSeconds != 120 {
		t.Errorf("node-b %+v", b)
	}
	if c.Heartbeat.Source != heartbeatFromLastSeen || *c.Heartbeat.AgeSeconds != 600 || c.Role != nwv1.NodeRoleTiebreaker {
		t.Errorf("node-c %+v", c)
	}
	if p := got.Profile; p == nil || p.Active == nil || p.Active.Version != "1.2.0" || p.Requested != "site-a" || p.Applied == nil || p.Applied.Status != metav1.ConditionTrue {
		t.Errorf("profile %+v", got.Profile)
	}
	if len(got.RecentWarnings) != 2 || got.RecentWarnings[1].Reason != "LegacyWarning" {
		t.Errorf("recent warnings %+v", got.RecentWarnings)
	}

	// YAML says the same.
	y := plugin(t, runOpts{now: statusNow}, "status", "-o", "yaml")
	y.wantCode(t, ExitOK)
	if !strings.Contains(y.stdout, "phase: Degraded\n") || !strings.Contains(y.stdout, "legacyState: DRBD_DEGRADED\n") {
		t.Errorf("-o yaml:\n%s", y.stdout)
	}
}

// TestStatusShowsTheManagementMode: Managed reads the heartbeats' ages from the agents'
// Leases and says the legacy state is not read; a switch that waits or a legacy DaemonSet back
// is said on the Management line.
func TestStatusShowsTheManagementMode(t *testing.T) {
	ctx := context.Background()
	agentNS := env.Namespace(t)
	createCluster(t, nwv1.NodewrightClusterSpec{Legacy: legacySource(env.Namespace(t)), Management: nwv1.ManagementManaged},
		nwv1.NodewrightClusterStatus{Phase: nwv1.ClusterSingleNode, Nodes: nwv1.NodeCounts{Ready: 1, Total: 1}, Management: nwv1.ManagementManaged,
			LegacyGeneration: 14, Conditions: []metav1.Condition{
				condition(nwv1.ConditionManagementApplied, metav1.ConditionTrue, nwv1.ReasonHandedOver, "Nodewright manages the nodes"),
				condition(nwv1.ConditionHeartbeatsFresh, metav1.ConditionTrue, nwv1.ReasonHeartbeatsFresh, "the agents of all 1 nodes renewed their heartbeat Leases within 30s"),
			}})
	createAgent(t, "node-m", nwv1.NodewrightAgentStatusStatus{Role: nwv1.NodeRolePrimary})
	renewed := metav1.NewMicroTime(statusNow.Add(-7 * time.Second))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: "node-m"}, Spec: coordinationv1.LeaseSpec{RenewTime: &renewed}}
	if err := env.Client.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	r := plugin(t, runOpts{now: statusNow}, "status", "--agent-namespace", agentNS)
	r.wantCode(t, ExitOK)
	for _, want := range []string{
		"\n  Management:    Managed: the agents report, and workflows may change nodes\n  Legacy state:  not read (Managed)\n  Nodes ready:   1 of 1\n",
		"\nnode-m   primary   7s ago      no",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, r.stdout)
		}
	}
	j := plugin(t, runOpts{now: statusNow}, "status", "--agent-namespace", agentNS, "-o", "json")
	var got statusReport
	if err := json.Unmarshal([]byte(j.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Management.InEffect != nwv1.ManagementManaged || len(got.Agents) != 1 || got.Agents[0].Heartbeat.Source != heartbeatFromLease {
		t.Errorf("management %+v, agents %+v; want Managed, the heartbeat from the agent's Lease", got.Management, got.Agents)
	}

	for _, c := range []struct {
		requested, inEffect nwv1.ManagementMode
		status              metav1.ConditionStatus
		reason, want        string
	}{
		{nwv1.ManagementManaged, nwv1.ManagementObserve, metav1.ConditionFalse, nwv1.ReasonHandoverRefused,
			"Observe; Managed requested and refused (ManagementApplied)"},
		{nwv1.ManagementObserve, nwv1.ManagementManaged, metav1.ConditionTrue, nwv1.ReasonHandedOver, "Managed; Observe requested"},
		{nwv1.ManagementManaged, nwv1.ManagementManaged, metav1.ConditionFalse, nwv1.ReasonLegacyDaemonSetRunning,
			"Managed, but LegacyDaemonSetRunning: no workflow changes a node (ManagementApplied)"},
		{nwv1.ManagementObserve, "", "", "", "(not observed yet); Observe requested"},
	} {
		m := managementReport{Requested: c.requested, InEffect: c.inEffect}
		if c.reason != "" {
			m.Handover = &metav1.Condition{Type: nwv1.ConditionManagementApplied, Status: c.status, Reason: c.reason}
		}
		if got := managementLine(m, palette{}); got != c.want {
			t.Errorf("%+v: %q, want %q", c, got, c.want)
		}
	}
}

func TestStatusWithoutACluster(t *testing.T) {
	r := plugin(t, runOpts{}, "status")
	r.wantCode(t, ExitFailed)
	if want := "Error: NodewrightCluster \"nodewright\" not found"; !strings.HasPrefix(r.stderr, want) {
		t.Errorf("stderr %q, want it to start with %q", r.stderr, want)
	}
	plugin(t, runOpts{}, "status", "-o", "xml").wantCode(t, ExitUsage)
}
