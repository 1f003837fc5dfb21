// Package noderestriction_test checks, against a real kube-apiserver, what the node agent's
// ServiceAccount may touch with the RBAC and the ValidatingAdmissionPolicy the chart renders
// (charts/nodewright/templates/agent-access.yaml, docs/agent.md): with real tokens the API
// server binds to a pod on each of two nodes, each agent writes its own node's objects and is
// refused the other node's, and a token bound to no pod on a node is refused every write.
//
// helm is $NODEWRIGHT_HELM, which `make test` sets after building it, or else
// bin/tools/helm-<HELM_VERSION> (hack/helm.sh builds it).
package noderestriction_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/kubelite"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	// agentSA is the agent's ServiceAccount (templates/agent.yaml).
	agentSA = "nodewright-agent"
	// policyName is the chart's ValidatingAdmissionPolicy and its binding.
	policyName = "nodewright-agent-own-node"
	// releaseNS is the release's namespace the chart is rendered for: the operator's, where
	// the trusted keys' ConfigMap is.
	releaseNS = "nodewright-system"
	// nodeNameExtra is the user's extra the API server fills from the node of the pod a
	// token is bound to (ServiceAccountTokenPodNodeInfo).
	nodeNameExtra = "authentication.kubernetes.io/node-name"
	podNameExtra  = "authentication.kubernetes.io/pod-name"
	// patience is how long a wait may take before the test counts as stuck.
	patience = 3 * time.Minute
)

// nodes are the site's two nodes.
var nodes = []string{"edge-1", "edge-2"}

// agent is the agent of one node: clients authenticated with a token bound to its pod.
type agent struct {
	node   string
	client client.Client
	kube   kubernetes.Interface
	// lite is the agent's own client, as cmd/agent makes its requests.
	lite *kubelite.Client
}

// site is a namespace holding the chart's agent RBAC and policy, the two nodes, an agent pod
// on each, and a NodeOperation for each node.
type site struct {
	ns     string
	agents map[string]agent
	// operation is the NodeOperation of each node, by node.
	operation map[string]string
}

// operationName is the NodeOperation the site holds for the node.
func operationName(node string) string { return "op-" + node }

// other is the node that is not node.
func other(node string) string {
	if node == nodes[0] {
		return nodes[1]
	}
	return nodes[0]
}

// newSite sets the site up and checks, before anything else, that the tokens carry what the
// policy relies on: the node of the pod they are bound to.
func newSite(t *testing.T) *site {
	t.Helper()
	ctx := context.Background()
	s := &site{ns: env.Namespace(t), agents: map[string]agent{}, operation: map[string]string{}}
	admin := kubernetes.NewForConfigOrDie(env.Config)

	release := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}
	if err := env.Client.Create(ctx, release); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, obj := range renderAgentAccess(t, s.ns) {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating the chart's %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		// The test's namespace takes its own objects along; the others are deleted.
		if obj.GetNamespace() != s.ns {
			t.Cleanup(func() { deleteIgnoringNotFound(t, obj) })
		}
	}
	for _, node := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteIgnoringNotFound(t, n) })
		// The agents' NodewrightAgentStatuses are cluster-scoped: the namespace's deletion
		// does not take them.
		t.Cleanup(func() {
			deleteIgnoringNotFound(t, &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
		})

		// The agent's pod: the API server binds a token to it and, through it, to its node. No
		// kubelet runs it; the TokenRequest needs only the objects.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "agent-" + node},
			Spec: corev1.PodSpec{
				NodeName:           node,
				ServiceAccountName: agentSA,
				Containers:         []corev1.Container{{Name: "agent", Image: "registry.invalid/nodewright-agent:test"}},
			},
		}
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		token, err := admin.CoreV1().ServiceAccounts(s.ns).CreateToken(ctx, agentSA, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
				Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token bound to pod %s: %v", pod.Name, err)
		}
		a := newAgent(t, node, token.Status.Token)
		user := whoAmI(t, a.kube)
		if want := "system:serviceaccount:" + s.ns + ":" + agentSA; user.Username != want {
			t.Fatalf("the token bound to pod %s authenticates as %q, want %q", pod.Name, user.Username, want)
		}
		if got := user.Extra[nodeNameExtra]; len(got) != 1 || got[0] != node {
			t.Fatalf("the token bound to pod %s on node %s carries %s=%v (all extras: %v): the policy relies on it naming the node",
				pod.Name, node, nodeNameExtra, got, user.Extra)
		}
		if got := user.Extra[podNameExtra]; len(got) != 1 || got[0] != pod.Name {
			t.Fatalf("the token bound to pod %s carries %s=%v", pod.Name, podNameExtra, got)
		}
		t.Logf("the token bound to pod %s authenticates as %s with extras %v", pod.Name, user.Username, user.Extra)
		s.agents[node] = a

		op := &nwv1.NodeOperation{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: operationName(node)},
			Spec: nwv1.NodeOperationSpec{
				NodeName:   node,
				Type:       nwv1.OperationDRBDAdjust,
				Deadline:   metav1.NewTime(time.Now().Add(time.Hour)),
				DRBDAdjust: &nwv1.DRBDResourceOperation{Resource: "pvc-1"},
			},
		}
		if err := env.Client.Create(ctx, op); err != nil {
			t.Fatal(err)
		}
		s.operation[node] = op.Name
	}

	// The policy is in force once it refuses a dry run of the first agent's write to the other
	// node's NodewrightAgentStatus; all its rules come into force together. The agent's RBAC
	// is in force once no dry run of each kind is refused by RBAC.
	first := s.agents[nodes[0]]
	probes := s.crossNodeProbes(first)
	testenv.Eventually(t, patience, func() string {
		for _, p := range probes {
			if err := p.write(); refusedByRBAC(err) {
				return fmt.Sprintf("the agent's RBAC is not in force yet: its dry run to %s: %v", p.what, err)
			}
		}
		if err := probes[0].write(); !refusedByPolicy(err) {
			return fmt.Sprintf("the policy does not refuse yet the agent of %s's dry run to %s: %v", first.node, probes[0].what, err)
		}
		return ""
	})
	// The API server lets a deleted policy go a moment late: wait until it no longer refuses,
	// so that a later test does not meet it. Runs before the deletions registered above
	// (cleanups run last first), while the agent's RBAC is still there.
	t.Cleanup(func() {
		for _, kind := range []string{"ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("admissionregistration.k8s.io/v1")
			u.SetKind(kind)
			u.SetName(policyName)
			deleteIgnoringNotFound(t, u)
		}
		testenv.Eventually(t, patience, func() string {
			if err := probes[0].write(); refusedByPolicy(err) {
				return fmt.Sprintf("the deleted policy still refuses the dry run to %s: %v", probes[0].what, err)
			}
			return ""
		})
	})
	return s
}

// probe is a dry-run write.
type probe struct {
	what  string
	write func() error
}

// crossNodeProbes are dry runs of a's writes to the other node's objects, one per kind the
// policy guards.
func (s *site) crossNodeProbes(a agent) []probe {
	ctx := context.Background()
	otherNode := other(a.node)
	return []probe{
		{"create NodewrightAgentStatus " + otherNode, func() error {
			return a.client.Create(ctx, &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: otherNode}}, client.DryRunAll)
		}},
		{"create Lease " + otherNode, func() error {
			return a.client.Create(ctx, lease(s.ns, otherNode), client.DryRunAll)
		}},
		{"patch the status of NodeOperation " + s.operation[otherNode], func() error {
			op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.operation[otherNode]}}
			patch := client.RawPatch("application/merge-patch+json", []byte(`{"status":{"phase":"Running"}}`))
			return a.client.Status().Patch(ctx, op, patch, client.DryRunAll)
		}},
	}
}

// refusedByPolicy says whether err is the chart's policy refusing a write (to
// controller-runtime's client, or to the agent's own).
func refusedByPolicy(err error) bool {
	return (apierrors.IsForbidden(err) || kubelite.IsForbidden(err)) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policyName+"'")
}

// refusedByRBAC says whether err is the authorizer refusing a request, before admission.
func refusedByRBAC(err error) bool {
	return apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") && strings.Contains(err.Error(), " cannot ")
}

// newAgent builds the clients of a bearer token.
func newAgent(t *testing.T, node, token string) agent {
	t.Helper()
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return agent{node: node, client: c, kube: kubernetes.NewForConfigOrDie(cfg), lite: testenv.LiteClient(t, cfg)}
}

// whoAmI is the user the API server sees behind the client's credentials.
func whoAmI(t *testing.T, kube kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return review.Status.UserInfo
}

func deleteIgnoringNotFound(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %T %s: %v", obj, obj.GetName(), err)
	}
}

// renderAgentAccess renders the chart with the agent in namespace ns and returns what
// templates/agent-access.yaml renders (RBAC, the policy and its binding) and the agent's
// ServiceAccount, leaving out the agent's Namespace and DaemonSet.
func renderAgentAccess(t *testing.T, ns string) []*unstructured.Unstructured {
	t.Helper()
	rendered := testenv.RenderChart(t, env.RepoRoot, releaseNS,
		"--set", "agent.enabled=true", "--set", "agent.namespace="+ns,
		"--show-only", "templates/agent-access.yaml", "--show-only", "templates/agent.yaml")
	var objs []*unstructured.Unstructured
	kinds := map[string]bool{}
	for _, o := range rendered {
		if o.Template != "templates/agent-access.yaml" && o.GetKind() != "ServiceAccount" {
			continue
		}
		kinds[o.GetKind()] = true
		objs = append(objs, o.Unstructured)
	}
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if !kinds[kind] {
			t.Fatalf("the chart rendered no %s for the agent (rendered: %v)", kind, kinds)
		}
	}
	return objs
}
