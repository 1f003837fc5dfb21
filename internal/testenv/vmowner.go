package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeVirtEditRules are the rules of KubeVirt's kubevirt.io:edit ClusterRole that a VM owner's
// self-service reads or checks, as KubeVirt v1.6.2 generates them
// (pkg/virt-operator/resource/generate/rbac/cluster.go, newEditClusterRole): the VMs and
// their instances, their start, stop and restart, and the snapshots and restores. KubeVirt
// labels it rbac.authorization.k8s.io/aggregate-to-edit, as here.
var KubeVirtEditRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"subresources.kubevirt.io"}, Resources: []string{"virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart"}, Verbs: []string{"update"}},
	{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines", "virtualmachineinstances"},
		Verbs: []string{"get", "delete", "create", "update", "patch", "list", "watch"}},
	{APIGroups: []string{"snapshot.kubevirt.io"}, Resources: []string{"virtualmachinesnapshots", "virtualmachinesnapshotcontents", "virtualmachinerestores"},
		Verbs: []string{"get", "delete", "create", "update", "patch", "list", "watch"}},
}

// AggregatedEdit is the ClusterRole VMOwner binds: the built-in edit role with the rules of
// every ClusterRole its aggregation rule selects, as kube-controller-manager's clusterrole
// aggregation controller would fill it in. envtest runs no controller manager, so the test
// plays that one controller: the rules come from the roles' labels, the chart's among them.
const AggregatedEdit = "nodewright-test:edit"

var vmOwnerRoles struct {
	once sync.Once
	err  error
}

// VMOwner gives user, a user of no group, the edit role in namespace ns, as a namespace's
// owner has it, and returns their client configuration. The role holds what aggregates into
// edit: KubeVirt's kubevirt.io:edit (KubeVirtEditRules) and the chart's self-service roles
// (charts/nodewright/templates/selfservice-roles.yaml, rendered with helm and its default
// values, once per control plane).
func (e *Env) VMOwner(t testing.TB, ns, user string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	vmOwnerRoles.once.Do(func() { vmOwnerRoles.err = e.aggregateEdit(t) })
	if vmOwnerRoles.err != nil {
		t.Fatalf("the aggregated edit role: %v", vmOwnerRoles.err)
	}
	b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edit-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AggregatedEdit},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	if err := e.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	return e.User(t, user)
}

// aggregateEdit applies the chart's self-service roles and KubeVirt's edit role, and fills in
// AggregatedEdit from edit's aggregation rule.
func (e *Env) aggregateEdit(t testing.TB) error {
	ctx := context.Background()
	roles := []*rbacv1.ClusterRole{{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt.io:edit",
		Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}, Rules: KubeVirtEditRules}}
	for _, o := range RenderChart(t, e.RepoRoot, "nodewright-system", "--show-only", "templates/selfservice-roles.yaml") {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		role := &rbacv1.ClusterRole{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
			return err
		}
		roles = append(roles, role)
	}
	for _, r := range roles {
		if err := e.Client.Create(ctx, r); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ClusterRole %s: %w", r.Name, err)
		}
	}
	edit := &rbacv1.ClusterRole{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: "edit"}, edit); err != nil {
		return err
	}
	if edit.AggregationRule == nil {
		return fmt.Errorf("the built-in edit ClusterRole has no aggregation rule")
	}
	rules := append([]rbacv1.PolicyRule(nil), edit.Rules...)
	for _, sel := range edit.AggregationRule.ClusterRoleSelectors {
		s, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			return err
		}
		var matched rbacv1.ClusterRoleList
		if err := e.Client.List(ctx, &matched, client.MatchingLabelsSelector{Selector: s}); err != nil {
			return err
		}
		for _, m := range matched.Items {
			rules = append(rules, m.Rules...)
		}
	}
	aggregated := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: AggregatedEdit}, Rules: rules}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := e.Client.Create(ctx, aggregated)
		if apierrors.IsAlreadyExists(err) {
			current := &rbacv1.ClusterRole{}
			if err := e.Client.Get(ctx, client.ObjectKey{Name: AggregatedEdit}, current); err != nil {
				return err
			}
			current.Rules = rules
			return e.Client.Update(ctx, current)
		}
		return err
	})
}
