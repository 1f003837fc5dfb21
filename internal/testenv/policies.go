package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// OperatorPolicyTemplates are the chart's templates of the ValidatingAdmissionPolicies that hold
// the operator's ServiceAccount to what its code writes (docs/install.md).
var OperatorPolicyTemplates = []string{
	"templates/operator-limits.yaml", "templates/operator-vm-limits.yaml", "templates/operator-node-limits.yaml",
	"templates/operator-volume-limits.yaml",
}

// OperatorUser is the user the API server sees for the operator's ServiceAccount in the release
// namespace ns, the user the chart's policies hold.
func OperatorUser(ns string) string { return "system:serviceaccount:" + ns + ":nodewright-operator" }

// AsOperatorUnderPolicies installs, once per env and release namespace ns, the chart's
// admission policies for the operator (OperatorPolicyTemplates, rendered with helm's further
// args, e.g. the copy image), and returns a config that authenticates as the operator's user of
// that release in group system:masters. Its writes meet the policies as the operator's do in a
// cluster, while RBAC lets it do anything: the chart's RBAC is proven apart (test/chart,
// test/operatorrestriction, test/e2e), and a controller's own tests then prove that its writes
// pass the policies. It returns once each policy refuses a dry run that only it refuses. The
// policies stay until env stops.
func (e *Env) AsOperatorUnderPolicies(t testing.TB, ns string, args ...string) *rest.Config {
	t.Helper()
	e.policiesMu.Lock()
	defer e.policiesMu.Unlock()
	if cfg, ok := e.policies[ns]; ok {
		return rest.CopyConfig(cfg)
	}
	ctx := context.Background()
	var installed int
	for _, o := range RenderChart(t, e.RepoRoot, ns, append([]string{"--set", "agent.namespace=" + ns + "-agent",
		"--set", "legacy.namespace=" + ns + "-legacy"}, args...)...) {
		if !isOperatorPolicy(o.Template) {
			continue
		}
		if err := e.Client.Create(ctx, o.Unstructured); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating the chart's %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		installed++
	}
	if installed == 0 {
		t.Fatalf("the chart rendered none of %v", OperatorPolicyTemplates)
	}
	user, err := e.control.AddUser(envtest.User{Name: OperatorUser(ns), Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("adding the operator's user: %v", err)
	}
	cfg := user.Config()
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range policyProbes() {
		Eventually(t, 3*time.Minute, func() string {
			err := c.Create(ctx, p.obj(), client.DryRunAll)
			if meta.IsNoMatchError(err) {
				return "" // the Env has no such API (KubeVirt's): nothing to hold
			}
			if err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+p.policy+"'") {
				return ""
			}
			return fmt.Sprintf("policy %s does not refuse the operator's dry run to create %s yet: %v", p.policy, p.what, err)
		})
	}
	if e.policies == nil {
		e.policies = map[string]*rest.Config{}
	}
	e.policies[ns] = cfg
	return rest.CopyConfig(cfg)
}

func isOperatorPolicy(template string) bool {
	for _, p := range OperatorPolicyTemplates {
		if template == p {
			return true
		}
	}
	return false
}

// policyProbes are dry-run creates, one per operator policy, that the policy refuses.
func policyProbes() []struct {
	policy, what string
	obj          func() client.Object
} {
	return []struct {
		policy, what string
		obj          func() client.Object
	}{
		{"nodewright-operator-copy-jobs", "a pod", func() client.Object {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-probe"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}
		}},
		{"nodewright-operator-copy-jobs", "a Job in kube-system", func() client.Object {
			return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "policy-probe"},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}}}
		}},
		{"nodewright-operator-webhook-ca-bundle", "a webhook configuration", func() client.Object {
			return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"}}
		}},
		{"nodewright-operator-virtual-machines", "a VirtualMachine", func() client.Object {
			return &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-probe"},
				Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyHalted),
					Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
		}},
		{"nodewright-operator-vm-migrations", "a live migration sent elsewhere", func() client.Object {
			return &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-probe"},
				Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "probe", SendTo: &virtv1.VirtualMachineInstanceMigrationSource{
					MigrationID: "probe", ConnectURL: "probe.example.com:443"}}}
		}},
		{"nodewright-operator-vm-restores", "a restore with patches", func() client.Object {
			return &snapv1.VirtualMachineRestore{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-probe"},
				Spec: snapv1.VirtualMachineRestoreSpec{Target: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "probe"},
					VirtualMachineSnapshotName: "probe", Patches: []string{`{"op":"add","path":"/metadata/labels/x","value":"y"}`}}}
		}},
		{"nodewright-operator-volumes", "a claim bound to a volume that exists", func() client.Object {
			return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-probe"},
				Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "probe", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}}
		}},
		{"nodewright-operator-nodes", "a Node", func() client.Object {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"}}
		}},
	}
}
