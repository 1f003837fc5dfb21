package v1alpha1_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/testenv/operatortest"
)

// agentNode is a Node every handover of the package's tests has, so that there is one.
const agentNode = "wh-agent-1"

// heartbeats runs an agent heartbeat, renewing its Lease every second in the namespace the
// operator reads, for every Node there is (and agentNode), until the test ends.
func heartbeats(t *testing.T) *bt.Agents {
	t.Helper()
	var nodes corev1.NodeList
	if err := env.Client.List(context.Background(), &nodes); err != nil {
		t.Fatal(err)
	}
	names := []string{agentNode}
	for _, n := range nodes.Items {
		if n.Name != agentNode {
			names = append(names, n.Name)
		}
	}
	return bt.StartAgents(t, env, operatortest.AgentNamespace, time.Second, names...)
}

// managedCluster makes the NodewrightCluster (a new one) Managed for the test: the agents of
// every Node report, and the legacy DaemonSet it names does not exist. The cluster is deleted
// when the test ends, before the agents stop.
func managedCluster(t *testing.T) {
	t.Helper()
	noCluster(t)
	heartbeats(t)
	c := legacyIn("wh-nowhere", "wh-nowhere")
	c.Spec.Management = nwv1.ManagementManaged
	if err := as(t, "alice").Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noCluster(t) })
	inEffect(t, nwv1.ManagementManaged)
}

// inEffect waits until the mode in effect is mode.
func inEffect(t *testing.T, mode nwv1.ManagementMode) {
	t.Helper()
	eventually(t, "the management mode "+string(mode)+" in effect", func() bool {
		c := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: nwv1.NodewrightClusterName}, c); err != nil {
			return false
		}
		handover := meta.FindStatusCondition(c.Status.Conditions, nwv1.ConditionManagementApplied)
		return c.Status.Management == mode && handover != nil && handover.ObservedGeneration == c.Generation &&
			handover.Status == metav1.ConditionTrue
	})
}

// switchTo sets spec.management as user.
func switchTo(t *testing.T, user string, mode nwv1.ManagementMode) error {
	t.Helper()
	c := as(t, user)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := &nwv1.NodewrightCluster{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: nwv1.NodewrightClusterName}, got); err != nil {
			return err
		}
		got.Spec.Management = mode
		return c.Update(context.Background(), got)
	})
}

// switchRecords reads the operator's records of the management mode switching.
func switchRecords(t *testing.T) []audit.Record {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(trailDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Record
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Record *audit.Record `json:"record"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Record != nil && line.Record.Action == "ManagementSwitched" {
				out = append(out, *line.Record)
			}
		}
	}
	return out
}

func detail(r audit.Record, name string) string {
	for _, d := range r.Details {
		if d.Name == name {
			return d.Value
		}
	}
	return ""
}

// TestTheHandoverIsRefusedAndThenAccepted: a cluster observed while the legacy DaemonSet has
// a pod refuses the flip and the upgrade; the switch to Managed is refused, naming each node
// whose agent does not report and the legacy pod, then only the pod once the agents report,
// and accepted once it is gone; the switch is stamped and recorded with who asked; a flip is
// then admitted; the switch back to Observe is always allowed, recorded, and refuses flips
// again.
func TestTheHandoverIsRefusedAndThenAccepted(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	noClusterWorkflows(t)
	noCluster(t)
	// No heartbeat left by an earlier test of the package may count.
	if err := env.Client.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(operatortest.AgentNamespace)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	alice, bob := as(t, "alice"), as(t, "bob")
	bt.CreateNode(t, env, agentNode)
	var nodes corev1.NodeList
	if err := env.Client.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}

	legacyNS := env.Namespace(t)
	labels := map[string]string{"app": "node-init"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNS, Name: "node-init"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node-init", Image: "node-init:1"}}}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNS, Name: "node-init-x1", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node-init", Image: "node-init:1"}}}}
	ended := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNS, Name: "node-init-ended", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node-init", Image: "node-init:1"}}}}
	for _, o := range []client.Object{ds, pod, ended} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ended.Status.Phase = corev1.PodSucceeded
	if err := env.Client.Status().Update(ctx, ended); err != nil {
		t.Fatal(err)
	}
	cluster := legacyIn(legacyNS, legacyNS)
	if err := alice.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noCluster(t) })
	inEffect(t, nwv1.ManagementObserve)

	// Observed: the workflows that change nodes are refused.
	observed := "NodewrightCluster nodewright is in the Observe mode (spec.management): the legacy DaemonSet decides about the nodes; a %s changes nodes and is admitted only in the Managed mode"
	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "handover-flip"}, Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "802.3ad"}}
	refused(t, alice.Create(ctx, flip.DeepCopy()), fmt.Sprintf(observed, "BondModeFlipPlan"))
	upgrade := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "handover-upgrade"}, Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{agentNode}}}
	refused(t, alice.Create(ctx, upgrade), fmt.Sprintf(observed, "ReplicationUpgrade"))

	// No agent reports, and the legacy DaemonSet has a pod (the one that ended does not count).
	err := switchTo(t, "alice", nwv1.ManagementManaged)
	noun := "nodes"
	if len(nodes.Items) == 1 {
		noun = "node"
	}
	refused(t, err, fmt.Sprintf("spec.management: Managed is refused while no agent reports for %d of %d %s: ", len(nodes.Items), len(nodes.Items), noun))
	refused(t, err, agentNode+" (no heartbeat Lease "+operatortest.AgentNamespace+"/"+agentNode+")")
	refused(t, err, "; the legacy DaemonSet "+legacyNS+"/node-init has 1 pod (node-init-x1), and would go on deciding; the cluster stays in Observe")

	// Every agent reports: only the pod is left.
	heartbeats(t)
	err = switchTo(t, "alice", nwv1.ManagementManaged)
	refused(t, err, "spec.management: Managed is refused while the legacy DaemonSet "+legacyNS+"/node-init has 1 pod (node-init-x1)")
	if strings.Contains(err.Error(), "no agent reports") {
		t.Fatalf("the agents report, and the refusal still names them: %v", err)
	}

	// The pod gone: accepted, stamped with who asked, in effect, recorded.
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if err := switchTo(t, "alice", nwv1.ManagementManaged); err != nil {
		t.Fatalf("the switch to Managed, every agent reporting and no legacy pod: %v", err)
	}
	inEffect(t, nwv1.ManagementManaged)
	got := &nwv1.NodewrightCluster{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), got); err != nil {
		t.Fatal(err)
	}
	if by := got.Annotations[nwv1.AnnotationManagementSetBy]; by != "alice" {
		t.Errorf("%s = %q, want alice", nwv1.AnnotationManagementSetBy, by)
	}
	eventually(t, "the record of the switch to Managed, and of the refusals", func() bool {
		switched, refusals := false, 0
		for _, r := range switchRecords(t) {
			if r.Subject.UID == got.UID && r.From == "Observe" && r.To == "Managed" && detail(r, "requestedBy") == "alice" {
				switched = true
			}
		}
		for _, r := range trailRecords(t, "", nwv1.NodewrightClusterName) {
			if r.To == "Refused" && r.Actor == "alice" && strings.HasPrefix(r.Message, "spec.management: Managed is refused while") {
				refusals++
			}
		}
		return switched && refusals >= 2
	})

	// Managed: a flip is admitted.
	if err := alice.Create(ctx, flip.DeepCopy()); err != nil {
		t.Fatalf("a flip on a Managed cluster: %v", err)
	}
	if err := env.Client.Delete(ctx, flip); err != nil {
		t.Fatal(err)
	}
	noClusterWorkflows(t)

	// Back to Observe: always allowed (an agent's silence changes nothing here), stamped,
	// recorded, and flips are refused again.
	if err := switchTo(t, "bob", nwv1.ManagementObserve); err != nil {
		t.Fatalf("the switch back to Observe: %v", err)
	}
	inEffect(t, nwv1.ManagementObserve)
	if err := bob.Get(ctx, client.ObjectKeyFromObject(cluster), got); err != nil {
		t.Fatal(err)
	}
	if by := got.Annotations[nwv1.AnnotationManagementSetBy]; by != "bob" {
		t.Errorf("%s = %q after bob switched back, want bob", nwv1.AnnotationManagementSetBy, by)
	}
	eventually(t, "the record of the switch back to Observe", func() bool {
		for _, r := range switchRecords(t) {
			if r.Subject.UID == got.UID && r.From == "Managed" && r.To == "Observe" && detail(r, "requestedBy") == "bob" {
				return true
			}
		}
		return false
	})
	refused(t, alice.Create(ctx, flip.DeepCopy()), fmt.Sprintf(observed, "BondModeFlipPlan"))
}

// TestTheManagementStampCannotBeForged: the user who set spec.management is stamped; a request
// that names another is kept to the stamp, and the try is recorded.
func TestTheManagementStampCannotBeForged(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	noCluster(t)
	c := legacyIn("wh-nowhere", "wh-nowhere")
	c.Annotations = map[string]string{nwv1.AnnotationManagementSetBy: "mallory"}
	if err := as(t, "alice").Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noCluster(t) })
	if by := c.Annotations[nwv1.AnnotationManagementSetBy]; by != "alice" {
		t.Fatalf("created by alice naming mallory: %s = %q, want alice", nwv1.AnnotationManagementSetBy, by)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := &nwv1.NodewrightCluster{}
		if err := as(t, "carol").Get(ctx, client.ObjectKeyFromObject(c), got); err != nil {
			return err
		}
		got.Annotations[nwv1.AnnotationManagementSetBy] = "carol"
		got.Labels = map[string]string{"team": "storage"}
		return as(t, "carol").Update(ctx, got)
	})
	if err != nil {
		t.Fatal(err)
	}
	got := &nwv1.NodewrightCluster{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	if by := got.Annotations[nwv1.AnnotationManagementSetBy]; by != "alice" || got.Labels["team"] != "storage" {
		t.Fatalf("carol's update naming herself: %s = %q (labels %v), want alice", nwv1.AnnotationManagementSetBy, by, got.Labels)
	}
	eventually(t, "the records of the kept stamp", func() bool {
		want := map[string]string{
			"alice": `the request set nodewright.spectrocloud.com/management-set-by to "mallory"; it stays "alice"`,
			"carol": `the request set nodewright.spectrocloud.com/management-set-by to "carol"; it stays "alice"`,
		}
		for _, r := range trailRecords(t, "", nwv1.NodewrightClusterName) {
			if r.To == "ManagementSetterKept" && want[r.Actor] == r.Message {
				delete(want, r.Actor)
			}
		}
		return len(want) == 0
	})
}
