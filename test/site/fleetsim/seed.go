package fleetsim

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// The names the hub reads on a member. They are the fleet and operator packages' constants,
// spelled here because this package must not import the fleet package (whose tests may use
// the simulator); the faithfulness test checks that they agree.
const (
	clusterName         = "nodewright"
	checkpointConfigMap = "nodewright-audit-checkpoint"
	operatorDeployment  = "nodewright-operator"
	checkpointKey       = "checkpoint.jsonl"
	versionLabel        = "app.kubernetes.io/version"
	// NodewrightVersion is the version label of every member's operator Deployment.
	NodewrightVersion = "v0.9.0-sim"
)

// checkpointLine is a real checkpoint line, as the operator publishes it, of a trail of one
// record: every member publishes the same.
func checkpointLine(ctx context.Context) (string, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	var mu sync.Mutex
	var line []byte
	log := audit.NewLog(audit.NewWriterSink(io.Discard), audit.NewSigner(key), audit.ChainState{}, audit.LogOptions{
		OnCheckpoint: func(l []byte) { mu.Lock(); line = append([]byte(nil), l...); mu.Unlock() }})
	defer func() { _ = log.Close() }()
	rec := audit.Transition(audit.Subject{Kind: "NodewrightCluster", Name: clusterName, UID: "fleetsim"}, "nodewright-operator",
		"phase", "SingleNode", "MultiNode", "NodeJoined", "", "", time.Now())
	if _, err := log.Append(ctx, rec); err != nil {
		return "", err
	}
	if _, err := log.Checkpoint(ctx); err != nil {
		return "", err
	}
	mu.Lock()
	defer mu.Unlock()
	if line == nil {
		return "", fmt.Errorf("the audit log wrote no checkpoint line")
	}
	return string(line) + "\n", nil
}

// SeedObjects are what a real member holds and the hub reads: the NodewrightCluster with a
// status (its operator's version in it, as a current operator writes it), the published
// checkpoint, the operator's Deployment, workflows of each kind
// (half of them running) and NodewrightAgentStatuses with a Kairos boot (every fourth one
// fell back). The faithfulness test writes the same to a real API server.
func SeedObjects(namespace, checkpoint string, workflows, agentStatuses int) []client.Object {
	labels := map[string]string{"app.kubernetes.io/name": "nodewright", versionLabel: NodewrightVersion}
	replicas := int32(1)
	objs := []client.Object{
		&nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName},
			Spec: nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{
				ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-state"},
				DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-init"},
				EventComponent: "node-init"}},
			Status: nwv1.NodewrightClusterStatus{Phase: nwv1.ClusterMultiNode, Nodes: nwv1.NodeCounts{Ready: 3, Total: 3},
				Management: nwv1.ManagementMode("Observe"), OperatorVersion: NodewrightVersion,
				Profile: &nwv1.ActiveProfile{Name: "edge", Version: "1.0.0", Digest: "sha256:" + fmt.Sprintf("%064d", 0)}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: checkpointConfigMap},
			Data: map[string]string{checkpointKey: checkpoint}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: operatorDeployment, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "nodewright/operator:" + NodewrightVersion}}}}}},
	}
	phase := func(i int) nwv1.WorkflowStatus {
		if i%2 == 0 {
			return nwv1.WorkflowStatus{Phase: nwv1.WorkflowRunning}
		}
		return nwv1.WorkflowStatus{Phase: nwv1.WorkflowSucceeded}
	}
	for i := range workflows {
		objs = append(objs,
			&nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flip-%03d", i)},
				Spec:   nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD},
				Status: nwv1.BondModeFlipPlanStatus{WorkflowStatus: phase(i)}},
			&nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("upgrade-%03d", i)},
				Spec:   nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"node-b"}},
				Status: nwv1.ReplicationUpgradeStatus{WorkflowStatus: phase(i)}})
	}
	seen := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for i := range agentStatuses {
		node := fmt.Sprintf("node-%03d", i)
		kairos := &nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive, Image: "quay.io/kairos/edge:v1.2.0"}
		if i%4 == 3 {
			kairos.BootEntry = nwv1.KairosBootPassive
			kairos.Image = "quay.io/kairos/edge:v1.1.0"
			kairos.LastFallback = &nwv1.KairosFallback{FromImage: "quay.io/kairos/edge:v1.2.0", ToImage: kairos.Image, BootID: "boot-" + node, SeenAt: seen}
		}
		objs = append(objs, &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node},
			Status: nwv1.NodewrightAgentStatusStatus{OS: &nwv1.HostOSStatus{BootID: "boot-" + node, Kairos: kairos}}})
	}
	return objs
}

// seed writes the objects a real member holds.
func (m *Member) seed(checkpoint string) error {
	o := m.sim.opts
	var objs []client.Object
	if !o.Empty {
		objs = SeedObjects(o.Namespace, checkpoint, o.Workflows, o.AgentStatuses)
	}
	for _, obj := range append(objs, o.Objects...) {
		if err := m.Put(obj); err != nil {
			return err
		}
	}
	return nil
}
