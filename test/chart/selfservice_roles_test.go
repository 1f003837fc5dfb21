package chart_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// The self-service roles (templates/selfservice-roles.yaml, docs/install.md "Self-service
// roles").
const (
	vmOperatorRole = "nodewright:vm-operator"
	viewRole       = "nodewright:view"
	selfServiceTpl = "templates/selfservice-roles.yaml"
	nwGroup        = "nodewright.spectrocloud.com"
)

// The labels by which the built-in user-facing roles aggregate others.
const (
	toAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
	toEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	toView  = "rbac.authorization.k8s.io/aggregate-to-view"
)

// selfServiceRoles returns the self-service ClusterRoles objs holds, by name.
func selfServiceRoles(t *testing.T, objs []object) map[string]rbacv1.ClusterRole {
	t.Helper()
	roles := map[string]rbacv1.ClusterRole{}
	for _, o := range objs {
		if o.Kind != "ClusterRole" || (o.Metadata.Name != vmOperatorRole && o.Metadata.Name != viewRole) {
			continue
		}
		if o.Source != "nodewright/"+selfServiceTpl {
			t.Errorf("%s: rendered from %s, not %s", o, o.Source, selfServiceTpl)
		}
		var cr rbacv1.ClusterRole
		o.decode(t, &cr)
		roles[cr.Name] = cr
	}
	return roles
}

// grants is every grant of a role's rules, as lines of the reviewed list without a scope:
// "<group> <resource> <verb> [name]", sorted.
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, rule := range rules {
		for _, line := range grantLines("x", rule) {
			out = append(out, strings.TrimPrefix(line, "x "))
		}
	}
	sort.Strings(out)
	return out
}

// wantVMOperator is what nodewright:vm-operator grants with these operations.
func wantVMOperator(ops ...string) []string {
	out := []string{}
	for _, verb := range []string{"create", "get", "list", "watch"} {
		out = append(out, nwGroup+" vmoperationrequests "+verb)
	}
	for _, op := range ops {
		out = append(out, nwGroup+" vmoperationrequests/"+strings.ToLower(op)+" create")
	}
	for _, resource := range []string{"vmvolumemigrations", "vmsnapshotpolicies"} {
		for _, verb := range []string{"get", "list", "watch"} {
			out = append(out, nwGroup+" "+resource+" "+verb)
		}
	}
	sort.Strings(out)
	return out
}

// wantView is what nodewright:view grants.
func wantView() []string {
	var out []string
	for _, resource := range []string{"vmoperationrequests", "vmvolumemigrations", "vmsnapshotpolicies"} {
		for _, verb := range []string{"get", "list", "watch"} {
			out = append(out, nwGroup+" "+resource+" "+verb)
		}
	}
	sort.Strings(out)
	return out
}

// TestSelfServiceRoles: nodewright:vm-operator and nodewright:view grant exactly their rules
// (no update, patch or delete of a request, nothing on SelfServicePolicies or a cluster-scoped
// kind), carry the labels by which edit and admin (and view, for nodewright:view) aggregate
// them, follow selfService.operations, and are gone with selfService.aggregateRoles off. The
// aggregation itself is the kube-controller-manager's, which the API server test below does
// not run: the labels are checked here.
func TestSelfServiceRoles(t *testing.T) {
	// The default: every operation (TestSelfServiceSchema checks the API has no other).
	allOps := []string{"SnapshotNow", "Restore", "Restart", "MigrateVolume"}
	for _, tc := range []struct {
		name string
		args []string
		ops  []string // the operations nodewright:vm-operator grants; nil: no roles rendered
	}{
		{"defaults", nil, allOps},
		{"all-on", []string{"-f", allOn}, allOps},
		{"restore-only", []string{"--set", "selfService.operations={Restore}"}, []string{"Restore"}},
		{"snapshot-and-restart", []string{"--set", "selfService.operations={Restart,SnapshotNow}"}, []string{"Restart", "SnapshotNow"}},
		{"off", []string{"--set", "selfService.aggregateRoles=false"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			roles := selfServiceRoles(t, render(t, tc.args...))
			if tc.ops == nil {
				for name := range roles {
					t.Errorf("selfService.aggregateRoles false renders ClusterRole %s", name)
				}
				return
			}
			for _, c := range []struct {
				name   string
				grants []string
				labels map[string]string // the aggregation labels it must carry; the others it must not
			}{
				{vmOperatorRole, wantVMOperator(tc.ops...), map[string]string{toEdit: "true", toAdmin: "true"}},
				{viewRole, wantView(), map[string]string{toView: "true", toEdit: "true", toAdmin: "true"}},
			} {
				cr, ok := roles[c.name]
				if !ok {
					t.Errorf("no ClusterRole %s", c.name)
					continue
				}
				if got := grants(cr.Rules); !reflect.DeepEqual(got, c.grants) {
					t.Errorf("%s grants\n  %s\nwant\n  %s", c.name, strings.Join(got, "\n  "), strings.Join(c.grants, "\n  "))
				}
				if cr.AggregationRule != nil {
					t.Errorf("%s aggregates other ClusterRoles", c.name)
				}
				for _, label := range []string{toAdmin, toEdit, toView} {
					got, has := cr.Labels[label]
					want, wanted := c.labels[label]
					if has != wanted || got != want {
						t.Errorf("%s: label %s=%q (set: %v); want %q (set: %v)", c.name, label, got, has, want, wanted)
					}
				}
			}
		})
	}
}

// TestSelfServiceSchema: the values schema offers exactly the API's operations
// (api/v1alpha1's VMOperation), values.yaml grants all of them by default, and the schema refuses an unknown operation, one
// in another case, one twice, none, and an aggregateRoles that is not a boolean, naming the
// value.
func TestSelfServiceSchema(t *testing.T) {
	root, _ := tools(t)
	data, err := os.ReadFile(filepath.Join(root, chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			SelfService struct {
				Properties struct {
					Operations struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"operations"`
				} `json:"properties"`
			} `json:"selfService"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	apiOps := testenv.EnumValues(t, "VMOperation")
	if got := schema.Properties.SelfService.Properties.Operations.Items.Enum; !reflect.DeepEqual(got, apiOps) {
		t.Errorf("values.schema.json offers the operations %v; the API has %v", got, apiOps)
	}
	var values struct {
		SelfService struct {
			Operations []string `json:"operations"`
		} `json:"selfService"`
	}
	data, err = os.ReadFile(filepath.Join(root, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(values.SelfService.Operations, apiOps) {
		t.Errorf("values.yaml grants the operations %v by default; want all of the API's, %v", values.SelfService.Operations, apiOps)
	}

	const schemaError = "values don't meet the specifications of the schema"
	empty := filepath.Join(t.TempDir(), "no-operations.yaml")
	if err := os.WriteFile(empty, []byte("selfService:\n  operations: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		names string
	}{
		{[]string{"--set", "selfService.operations={Reboot}"}, "at '/selfService/operations/0'"},
		{[]string{"--set", "selfService.operations={Restore,Migrate}"}, "at '/selfService/operations/1'"},
		{[]string{"--set", "selfService.operations={restore}"}, "at '/selfService/operations/0'"},
		{[]string{"--set", "selfService.operations={Restore,Restore}"}, "at '/selfService/operations'"},
		{[]string{"-f", empty}, "at '/selfService/operations'"},
		{[]string{"--set", "selfService.operations=null"}, "at '/selfService': missing property 'operations'"},
		{[]string{"--set", "selfService.aggregateRoles=yes"}, "at '/selfService/aggregateRoles'"},
		{[]string{"--set", "selfService.roles=true"}, "at '/selfService': additional properties 'roles' not allowed"},
	} {
		name := strings.Join(tc.args, " ")
		if tc.args[0] == "-f" {
			name = "selfService.operations=[]"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"template", "nodewright", chartDir, "--namespace", releaseNS, "--kube-version", kubeVersion}, tc.args...)
			_, stderr, err := helm(t, args...)
			if err == nil {
				t.Fatalf("helm accepted %s", strings.Join(tc.args, " "))
			}
			if !strings.Contains(stderr, schemaError) || !strings.Contains(stderr, tc.names) {
				t.Fatalf("helm refused %s, but not with a schema error naming it (%q):\n%s", strings.Join(tc.args, " "), tc.names, stderr)
			}
		})
	}
}

// TestSelfServiceRolesOnAPIServer applies the rendered roles to a real API server, binds
// nodewright:vm-operator to alice in team-a with a RoleBinding (as a namespace's edit role
// reaches its owner) and nodewright:view to bob, and asks the API server's authorizer with
// SubjectAccessReviews, as the admission webhook does: alice may make and follow requests and
// ask for each operation in team-a only, and may not change, approve or delete a request, nor
// read the SelfServicePolicy; with selfService.operations narrowed to Restore, only Restore
// is left. envtest runs no kube-controller-manager, so the cluster role aggregation controller
// does not fill edit, admin and view: the roles are bound directly here, and their aggregation
// labels are checked by TestSelfServiceRoles.
func TestSelfServiceRolesOnAPIServer(t *testing.T) {
	env := testenv.New()
	env.StartForTest(t)
	ctx := context.Background()
	c := env.Client

	apply := func(args ...string) {
		t.Helper()
		roles := selfServiceRoles(t, render(t, append([]string{"--show-only", selfServiceTpl}, args...)...))
		if len(roles) != 2 {
			t.Fatalf("rendered %d self-service roles, want 2", len(roles))
		}
		for _, cr := range roles {
			existing := &rbacv1.ClusterRole{}
			switch err := c.Get(ctx, client.ObjectKey{Name: cr.Name}, existing); {
			case err == nil:
				existing.Rules, existing.Labels = cr.Rules, cr.Labels
				if err := c.Update(ctx, existing); err != nil {
					t.Fatalf("updating ClusterRole %s: %v", cr.Name, err)
				}
			case apierrors.IsNotFound(err):
				obj := cr
				if err := c.Create(ctx, &obj); err != nil {
					t.Fatalf("creating ClusterRole %s: %v", cr.Name, err)
				}
			default:
				t.Fatal(err)
			}
		}
	}
	apply()
	for _, ns := range []string{"team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for user, role := range map[string]string{"alice": vmOperatorRole, "bob": viewRole} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: user + "-self-service"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		}
		if err := c.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}

	// allowed asks the API server's authorizer about a with a SubjectAccessReview, as the
	// admission webhook asks about a request's requester.
	allowed := func(t *testing.T, a access) (bool, string) {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: a.user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: a.ns, Verb: a.verb, Group: nwGroup,
				Resource: a.resource, Subresource: a.subresource, Name: a.name},
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview %s: %v", a, err)
		}
		return sar.Status.Allowed, sar.Status.Reason
	}
	check := func(t *testing.T, list []access, want bool) {
		t.Helper()
		for _, a := range list {
			if got, reason := allowed(t, a); got != want {
				t.Errorf("%s: allowed %v, want %v (%s)", a, got, want, reason)
			}
		}
	}
	// RBAC's authorizer reads the roles and bindings from its cache: wait until it has them,
	// or every refusal below would hold for nothing.
	testenv.Eventually(t, time.Minute, func() string {
		for _, a := range []access{{user: "alice", verb: "create", ns: "team-a", resource: "vmoperationrequests", subresource: "restart", name: "web"},
			{user: "bob", verb: "list", ns: "team-a", resource: "vmoperationrequests"}} {
			if ok, reason := allowed(t, a); !ok {
				return fmt.Sprintf("%s: refused (%s)", a, reason)
			}
		}
		return ""
	})

	var aliceMay, aliceMayNot []access
	for _, verb := range []string{"create", "get", "list", "watch"} {
		aliceMay = append(aliceMay, access{user: "alice", verb: verb, ns: "team-a", resource: "vmoperationrequests"})
	}
	for _, op := range []string{"snapshotnow", "restore", "restart"} {
		aliceMay = append(aliceMay, access{user: "alice", verb: "create", ns: "team-a", resource: "vmoperationrequests", subresource: op, name: "web"})
	}
	for _, resource := range []string{"vmvolumemigrations", "vmsnapshotpolicies"} {
		for _, verb := range []string{"get", "list", "watch"} {
			aliceMay = append(aliceMay, access{user: "alice", verb: verb, ns: "team-a", resource: resource})
		}
	}
	for _, a := range aliceMay {
		a.ns = "team-b"
		aliceMayNot = append(aliceMayNot, a)
	}
	for _, verb := range []string{"update", "patch", "delete", "deletecollection"} {
		aliceMayNot = append(aliceMayNot, access{user: "alice", verb: verb, ns: "team-a", resource: "vmoperationrequests", name: "restore-web"})
	}
	aliceMayNot = append(aliceMayNot,
		access{user: "alice", verb: "update", ns: "team-a", resource: "vmoperationrequests", subresource: "status", name: "restore-web"},
		access{user: "alice", verb: "patch", ns: "team-a", resource: "vmoperationrequests", subresource: "status", name: "restore-web"},
		// Any other operation than the three the chart grants.
		access{user: "alice", verb: "create", ns: "team-a", resource: "vmoperationrequests", subresource: "reboot", name: "web"},
		access{user: "alice", verb: "create", ns: "team-a", resource: "vmvolumemigrations"},
		access{user: "alice", verb: "create", ns: "team-a", resource: "vmsnapshotpolicies"},
		access{user: "alice", verb: "update", ns: "team-a", resource: "vmsnapshotpolicies", name: "nightly"})
	for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
		aliceMayNot = append(aliceMayNot, access{user: "alice", verb: verb, resource: "selfservicepolicies", name: "default"})
	}
	aliceMayNot = append(aliceMayNot, access{user: "alice", verb: "get", ns: "team-a", resource: "selfservicepolicies", name: "default"})
	t.Run("alice-in-team-a", func(t *testing.T) { check(t, aliceMay, true) })
	t.Run("alice-elsewhere-and-beyond", func(t *testing.T) { check(t, aliceMayNot, false) })

	var bobMay, bobMayNot []access
	for _, resource := range []string{"vmoperationrequests", "vmvolumemigrations", "vmsnapshotpolicies"} {
		for _, verb := range []string{"get", "list", "watch"} {
			bobMay = append(bobMay, access{user: "bob", verb: verb, ns: "team-a", resource: resource})
			bobMayNot = append(bobMayNot, access{user: "bob", verb: verb, ns: "team-b", resource: resource})
		}
	}
	bobMayNot = append(bobMayNot, access{user: "bob", verb: "create", ns: "team-a", resource: "vmoperationrequests"},
		access{user: "bob", verb: "create", ns: "team-a", resource: "vmoperationrequests", subresource: "restore", name: "web"},
		access{user: "bob", verb: "get", resource: "selfservicepolicies", name: "default"})
	t.Run("bob-views", func(t *testing.T) {
		check(t, bobMay, true)
		check(t, bobMayNot, false)
	})

	// Narrowed to Restore: alice may no longer ask for a snapshot or a restart.
	apply("--set", "selfService.operations={Restore}")
	snapshot := access{user: "alice", verb: "create", ns: "team-a", resource: "vmoperationrequests", subresource: "snapshotnow", name: "web"}
	testenv.Eventually(t, time.Minute, func() string {
		if ok, _ := allowed(t, snapshot); ok {
			return snapshot.String() + ": still allowed with selfService.operations [Restore]"
		}
		return ""
	})
	t.Run("restore-only", func(t *testing.T) {
		check(t, []access{{user: "alice", verb: "create", ns: "team-a", resource: "vmoperationrequests"},
			{user: "alice", verb: "create", ns: "team-a", resource: "vmoperationrequests", subresource: "restore", name: "web"}}, true)
		check(t, []access{snapshot, {user: "alice", verb: "create", ns: "team-a", resource: "vmoperationrequests", subresource: "restart", name: "web"}}, false)
	})
}

// access is one question to the authorizer: may user verb resource[/subresource] named name
// in ns (cluster-wide when empty), of Nodewright's API group.
type access struct {
	user, verb, ns, resource, subresource, name string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	r += "." + nwGroup
	if a.name != "" {
		r += " " + a.name
	}
	where := "cluster-wide"
	if a.ns != "" {
		where = "in " + a.ns
	}
	return fmt.Sprintf("%s: %s %s %s", a.user, a.verb, r, where)
}
