package fleet

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/operator"
)

// TestHubReadOnly: with exactly the member chart's fleet.hubReader roles, the hub's identity
// (here its user, by a client certificate of the member's CA) is enough for the hub to
// summarise the member, every field of it (its nodes' boots too), and the member's API server
// refuses every write it tries: create, update, patch, delete and deletecollection on each
// resource the roles let it read (and their status), on Secrets, Nodes, NodeOperations, other
// ConfigMaps, Pods and RBAC, and impersonation.
func TestHubReadOnly(t *testing.T) {
	realMembersOnly(t, "the member chart's roles for the hub are the member API server's RBAC, and the hub's certificate its client CA's")
	hub, members := startFleet(t, 1)
	m := members[0]
	ctx := context.Background()
	createCluster(t, m)
	m.installHubReader(t)
	for _, o := range []client.Object{
		&nodewrightv1alpha1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp"}, Spec: nodewrightv1alpha1.BondModeFlipPlanSpec{TargetMode: nodewrightv1alpha1.BondMode8023AD}},
		&nodewrightv1alpha1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "to-two"}, Spec: nodewrightv1alpha1.ReplicationUpgradeSpec{PeerNodes: []string{"node-2"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: memberNS, Name: "nodewright-profile-keys"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: memberNS, Name: "nodewright-audit-key"}},
	} {
		if err := m.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	report(t, m, agentBoot("edge-1", "Passive", imageOld, "boot-2", fellBackFrom(imageA, "boot-2")))
	checkpoints, _ := trail(t, "member", 3)
	publish(t, m, checkpoints[0])
	createOperatorDeployment(t, m, "0.3.0")

	hubCfg := m.hubCertificate(t)
	registerKubeconfig(t, hub, "site", m, hubCfg)
	waitSummary(t, hub.Client, "site", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		st := s.Status
		switch {
		case st.Phase != "MultiNode" || st.Nodes.Ready != 2 || st.Management != "Observe":
			return fmt.Sprintf("the NodewrightCluster not read: %+v", st)
		case len(st.Workflows) != 2 || st.Workflows[0].Name != "to-lacp" || st.Workflows[1].Name != "to-two":
			return fmt.Sprintf("the workflows not read: %+v", st.Workflows)
		case st.NodewrightVersion != "0.3.0":
			return fmt.Sprintf("the operator's Deployment not read: version %q", st.NodewrightVersion)
		case st.Checkpoint == nil || st.Checkpoint.Sequence != 3 || !meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionCheckpointConsistent):
			return fmt.Sprintf("the checkpoint not read: %+v, %+v", st.Checkpoint, st.Conditions)
		case st.Boots == nil || len(st.Boots.FellBack) != 1 || st.Boots.FellBack[0].Image != imageA:
			return fmt.Sprintf("the NodewrightAgentStatuses not read: %+v", st.Boots)
		case !meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionReachable) || st.KubernetesVersion == "":
			return fmt.Sprintf("/readyz or /version not read: %+v, %q", st.Conditions, st.KubernetesVersion)
		}
		return ""
	})

	targets := readable(t, m)
	names := map[string]bool{}
	for _, tg := range targets {
		names[tg.gvr.Resource] = true
	}
	for _, r := range []string{"nodewrightclusters", "bondmodeflipplans", "replicationupgrades", "nodewrightagentstatuses", "configmaps", "deployments"} {
		if !names[r] {
			t.Errorf("the chart's roles do not let the hub read %s, which it reads", r)
		}
	}
	// The hub reads these with its own credentials: its requests are authenticated, and the
	// refusals below are the roles', not a bad credential's.
	dyn, err := dynamic.NewForConfig(hubCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		var sub []string
		if tg.subresource != "" {
			sub = []string{tg.subresource}
		}
		if _, err := dyn.Resource(tg.gvr).Namespace(tg.namespace).Get(ctx, tg.name, metav1.GetOptions{}, sub...); err != nil {
			t.Errorf("the hub cannot get %s %s/%s: %v", tg.gvr.Resource, tg.namespace, tg.name, err)
		}
	}
	var others []target
	for _, tg := range targets {
		if strings.HasPrefix(tg.gvr.Group, "nodewright.") && tg.subresource == "" {
			status := tg
			status.subresource = "status"
			others = append(others, status)
		}
	}
	for _, o := range []struct {
		group, resource, namespace, name string
	}{
		{"", "secrets", memberNS, "nodewright-audit-key"},
		{"", "configmaps", memberNS, "nodewright-profile-keys"},
		{"", "nodes", "", "node-1"},
		{"nodewright.spectrocloud.com", "nodeoperations", "nodewright-agent", "flip-node-1"},
		{"", "pods", memberNS, "nodewright-operator-0"},
		{"", "serviceaccounts", memberNS, hubSA},
		{"rbac.authorization.k8s.io", "clusterrolebindings", "", "nodewright-fleet-hub-reader"},
		{"rbac.authorization.k8s.io", "roles", memberNS, "nodewright-fleet-hub-reader"},
	} {
		others = append(others, target{gvr: resourceFor(t, m, o.group, o.resource), namespace: o.namespace, name: o.name})
	}
	tried := 0
	for _, tg := range append(targets, others...) {
		tried += refuseWrites(t, m, dyn, tg)
	}
	if _, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(memberNS).Get(ctx, "nodewright-audit-key", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the hub gets a Secret: %v", err)
	}
	impersonating := rest.CopyConfig(hubCfg)
	impersonating.Impersonate = rest.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}}
	idyn, err := dynamic.NewForConfig(impersonating)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idyn.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(memberNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the hub impersonates system:masters: %v", err)
	}
	t.Logf("%d writes tried on %d resources", tried, len(targets)+len(others))
}

// target is one object the test tries to write.
type target struct {
	gvr                          schema.GroupVersionResource
	namespace, name, subresource string
}

// readable is every resource the chart's roles for the hub grant, each with an object of it
// on the member: the one the rule names, or else the first there is.
func readable(t *testing.T, m *apiServer) []target {
	t.Helper()
	var out []target
	for _, o := range hubReader(t) {
		var rules []rbacv1.PolicyRule
		switch o.GetKind() {
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole // a Role has the same fields
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			rules = r.Rules
		default:
			continue
		}
		for _, rule := range rules {
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					resource, sub, _ := strings.Cut(resource, "/")
					gvr := resourceFor(t, m, group, resource)
					tg := target{gvr: gvr, namespace: o.GetNamespace(), subresource: sub}
					if len(rule.ResourceNames) > 0 {
						for _, name := range rule.ResourceNames {
							tg.name = name
							out = append(out, tg)
						}
						continue
					}
					var list unstructured.UnstructuredList
					list.SetGroupVersionKind(kindFor(t, m, gvr).GroupVersion().WithKind(kindFor(t, m, gvr).Kind + "List"))
					if err := m.Client.List(context.Background(), &list, client.InNamespace(tg.namespace)); err != nil || len(list.Items) == 0 {
						t.Fatalf("no %s on the member to try writing to: %v", resource, err)
					}
					tg.name = list.Items[0].GetName()
					out = append(out, tg)
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gvr.String()+out[i].name < out[j].gvr.String()+out[j].name })
	return out
}

func resourceFor(t *testing.T, m *apiServer, group, resource string) schema.GroupVersionResource {
	t.Helper()
	gvr, err := m.Client.RESTMapper().ResourceFor(schema.GroupVersionResource{Group: group, Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	return gvr
}

func kindFor(t *testing.T, m *apiServer, gvr schema.GroupVersionResource) schema.GroupVersionKind {
	t.Helper()
	gvk, err := m.Client.RESTMapper().KindFor(gvr)
	if err != nil {
		t.Fatal(err)
	}
	return gvk
}

// refuseWrites tries each write verb on the target with the hub's credentials and fails the
// test unless the API server answers Forbidden. It returns how many it tried.
func refuseWrites(t *testing.T, m *apiServer, dyn *dynamic.DynamicClient, tg target) int {
	t.Helper()
	ctx := context.Background()
	gvk := kindFor(t, m, tg.gvr)
	obj := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(tg.namespace)
		u.SetName(name)
		u.SetResourceVersion("1")
		return u
	}
	r := dyn.Resource(tg.gvr).Namespace(tg.namespace)
	var sub []string
	if tg.subresource != "" {
		sub = []string{tg.subresource}
	}
	patch := []byte(`{"metadata":{"labels":{"written-by":"fleet-hub"}}}`)
	writes := map[string]func() error{
		"update": func() error { _, err := r.Update(ctx, obj(tg.name), metav1.UpdateOptions{}, sub...); return err },
		"patch": func() error {
			_, err := r.Patch(ctx, tg.name, types.MergePatchType, patch, metav1.PatchOptions{}, sub...)
			return err
		},
		"apply": func() error {
			_, err := r.Apply(ctx, tg.name, obj(tg.name), metav1.ApplyOptions{FieldManager: "fleet-hub", Force: true}, sub...)
			return err
		},
	}
	if tg.subresource == "" {
		writes["create"] = func() error { _, err := r.Create(ctx, obj(tg.name+"-by-hub"), metav1.CreateOptions{}); return err }
		writes["delete"] = func() error { return r.Delete(ctx, tg.name, metav1.DeleteOptions{}) }
		writes["deletecollection"] = func() error { return r.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}) }
	}
	what := tg.gvr.Resource
	if tg.subresource != "" {
		what += "/" + tg.subresource
	}
	for verb, write := range writes {
		if err := write(); !apierrors.IsForbidden(err) {
			t.Errorf("%s %s %s/%s with the hub's credentials: %v; want Forbidden", verb, what, tg.namespace, tg.name, err)
		}
	}
	return len(writes)
}

// publish publishes the checkpoint line in the member's checkpoint ConfigMap, as the operator
// does.
func publish(t *testing.T, m *apiServer, line string) {
	t.Helper()
	ctx := context.Background()
	m.installHubReader(t) // the namespace
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: memberNS, Name: CheckpointConfigMap}}
	err := m.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Data = map[string]string{operator.CheckpointKey: line}
	switch {
	case apierrors.IsNotFound(err):
		err = m.Client.Create(ctx, cm)
	case err == nil:
		err = m.Client.Update(ctx, cm)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// createOperatorDeployment creates the operator's Deployment, labelled with its version; no
// controller runs it.
func createOperatorDeployment(t *testing.T, m *apiServer, version string) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "nodewright"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: memberNS, Name: OperatorDeployment,
		Labels: map[string]string{versionLabel: version}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "nodewright-operator:" + version}}}}}}
	if err := m.Client.Create(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
}
