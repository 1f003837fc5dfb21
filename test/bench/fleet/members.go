package main

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
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/multicluster-runtime/providers/kubeconfig"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/fleet"
	"github.com/spectrocloud/nodewright/internal/operator"
)

const (
	hubNamespace    = "nodewright-fleet"
	memberNamespace = "nodewright-system"
	nodewrightVer   = "v0.9.0-bench"
)

// member is one member cluster: its API server and the benchmark's admin client on it.
type member struct {
	*apiServer
	client client.Client
}

// checkpointLine is a real checkpoint line, as the operator publishes it, of a trail of one
// record.
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
	rec := audit.Transition(audit.Subject{Kind: "NodewrightCluster", Name: "nodewright", UID: "bench"}, "nodewright-operator",
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

// setUpMember installs the Nodewright CRDs and what the hub reads: the NodewrightCluster
// with a status, the published checkpoint, the operator's Deployment, and the read-only
// roles the member chart grants the hub, bound to the hub's user.
func setUpMember(ctx context.Context, s *apiServer, scheme *runtime.Scheme, crds, checkpoint string) (*member, error) {
	if _, err := envtest.InstallCRDs(s.admin, envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true}); err != nil {
		return nil, fmt.Errorf("installing the CRDs on %s: %w", s.name, err)
	}
	c, err := client.New(s.admin, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	subject := []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: hubUser}}
	labels := map[string]string{"app.kubernetes.io/name": "nodewright", "app.kubernetes.io/version": nodewrightVer}
	replicas := int32(1)
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: memberNamespace}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nodewright-fleet-hub-reader"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"nodewright.spectrocloud.com"}, Resources: []string{"nodewrightclusters", "bondmodeflipplans", "replicationupgrades", "nodewrightagentstatuses"}, Verbs: []string{"get", "list", "watch"}}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: memberNamespace, Name: "nodewright-fleet-hub-reader"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "nodewright-fleet-hub-reader"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nodewright-fleet-hub-reader"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: memberNamespace, Name: "nodewright-fleet-hub-reader"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "nodewright-fleet-hub-reader"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: memberNamespace, Name: fleet.CheckpointConfigMap},
			Data: map[string]string{operator.CheckpointKey: checkpoint}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: memberNamespace, Name: fleet.OperatorDeployment, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "nodewright/operator:" + nodewrightVer}}}}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating %T on %s: %w", o, s.name, err)
		}
	}
	nwc := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: "nodewright"},
		Spec: nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{
			ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-state"},
			DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-init"},
			EventComponent: "node-init"}}}
	if err := c.Create(ctx, nwc); err != nil {
		return nil, fmt.Errorf("creating the NodewrightCluster on %s: %w", s.name, err)
	}
	nwc.Status.Phase = nwv1.ClusterMultiNode
	nwc.Status.Nodes = nwv1.NodeCounts{Ready: 0, Total: 3}
	nwc.Status.Management = nwv1.ManagementMode("Observe")
	if err := c.Status().Update(ctx, nwc); err != nil {
		return nil, fmt.Errorf("writing the NodewrightCluster's status on %s: %w", s.name, err)
	}
	return &member{apiServer: s, client: c}, nil
}

// register gives the hub the member through a kubeconfig Secret with the hub user's
// certificate.
func register(ctx context.Context, hub client.Client, m *member, p *pki) error {
	kc, err := m.kubeconfig(p, p.hubUserCert, p.hubUserKey)
	if err != nil {
		return err
	}
	return hub.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: m.name,
		Labels: map[string]string{kubeconfig.DefaultKubeconfigSecretLabel: "true"}},
		Data: map[string][]byte{"kubeconfig": kc}})
}
