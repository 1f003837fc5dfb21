package agentstatus_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/yaml"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/controller/agentstatus"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// wait bounds every wait on observed state: long enough for a busy CI machine, and no
// cost to a passing test, which goes on as soon as the state holds.
const wait = 2 * time.Minute

func agent(t *testing.T, name string) (*nwv1.NodewrightAgentStatus, bool) {
	t.Helper()
	as := &nwv1.NodewrightAgentStatus{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, as)
	if err != nil {
		return nil, false
	}
	return as, true
}

func agentNames(t *testing.T, prefix string) []string {
	t.Helper()
	var list nwv1.NodewrightAgentStatusList
	if err := env.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, as := range list.Items {
		if strings.HasPrefix(as.Name, prefix) {
			names = append(names, as.Name)
		}
	}
	sort.Strings(names)
	return names
}

// TestNodesComeAndGo checks that each managed node gets a status object owned by the cluster,
// filled from the ConfigMap, and that nodes leaving the list lose theirs.
func TestNodesComeAndGo(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1), f.Node(2))
	f.Transition(legacy.MultiNodeReady)

	want := func(nodes ...string) func() string {
		return func() string {
			if got := agentNames(t, f.Namespace); strings.Join(got, ",") != strings.Join(nodes, ",") {
				return fmt.Sprintf("agent statuses %v, want %v", got, nodes)
			}
			return ""
		}
	}
	bt.Eventually(t, wait, want(f.Node(1), f.Node(2)))
	bt.Eventually(t, wait, func() string {
		as, _ := agent(t, f.Node(1))
		if as == nil || as.Status.Role != nwv1.NodeRolePrimary || as.Status.Network.BondMode != nwv1.BondMode8023AD ||
			as.Status.Storage == nil || as.Status.Storage.UpToDate != 2 || as.Status.Heartbeat.Stale || as.Status.Heartbeat.LastSeen == nil {
			return fmt.Sprintf("node 1 status %+v", as)
		}
		if ref := metav1.GetControllerOf(as); ref == nil || ref.UID != f.Cluster.UID {
			return fmt.Sprintf("node 1 is not owned by the cluster: %+v", as.OwnerReferences)
		}
		if c := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionStorageHealthy); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Sprintf("StorageHealthy %+v", c)
		}
		return ""
	})

	f.SetNodes(f.Node(2), f.Node(3))
	bt.Eventually(t, wait, want(f.Node(2), f.Node(3)))

	// A status deleted by hand comes back.
	as, _ := agent(t, f.Node(3))
	if err := env.Client.Delete(context.Background(), as); err != nil {
		t.Fatal(err)
	}
	bt.Eventually(t, wait, func() string {
		if again, ok := agent(t, f.Node(3)); !ok || again.UID == as.UID {
			return "node 3's status was not recreated"
		}
		return ""
	})
}

// TestNodeStalenessAndDRBD lets a node's heartbeat go stale (no write wakes the controller)
// and degrades its DRBD report.
func TestNodeStalenessAndDRBD(t *testing.T) {
	f := bt.New(t, env, 2*time.Second)
	env.StartManager(t, operator.SetupControllers)
	f.SetNodes(f.Node(1))
	f.Transition(legacy.SingleNodeReady)

	bt.Eventually(t, wait, func() string {
		as, ok := agent(t, f.Node(1))
		if !ok {
			return "no status for node 1"
		}
		c := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionHeartbeatFresh)
		if !as.Status.Heartbeat.Stale || c == nil || c.Reason != nwv1.ReasonHeartbeatStale {
			return fmt.Sprintf("node 1 not stale yet: %+v", as)
		}
		return ""
	})
	bt.Eventually(t, wait, func() string {
		var events corev1.EventList
		_ = env.Client.List(context.Background(), &events)
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == f.Node(1) && ev.Reason == "HeartbeatStale" && ev.Type == corev1.EventTypeWarning {
				return ""
			}
		}
		return "no HeartbeatStale Event on node 1"
	})

	f.Data[legacy.NodeKey(f.Node(1), legacy.FieldDRBD)] = `{"resources":2,"connected":1,"upToDate":1,"outOfSyncKiB":4096}`
	f.EventuallyFresh(wait, func() string {
		as, _ := agent(t, f.Node(1))
		c := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionStorageHealthy)
		if as.Status.Heartbeat.Stale || c == nil || c.Status != metav1.ConditionFalse ||
			c.Message != "DRBD: 1 of 2 connected, 1 up to date, 4096 KiB out of sync" {
			return fmt.Sprintf("node 1: stale %v StorageHealthy %+v", as.Status.Heartbeat.Stale, c)
		}
		return ""
	}, f.Node(1))
}

// TestBridgeOnlyReadsTheLegacyObjects runs the controllers as a user holding exactly the
// generated operator roles, the legacy namespace's Role bound in the test's namespace, drives
// the legacy ConfigMap through changes, and checks that the roles grant nothing but reads on
// the legacy kinds, nothing on them cluster-wide, and that the operator never wrote them.
func TestBridgeOnlyReadsTheLegacyObjects(t *testing.T) {
	ctx := context.Background()
	f := bt.New(t, env, time.Minute)
	user := "bridge-under-test"
	// The generated roles name the chart's default legacy namespace; here it is the test's.
	bindGeneratedRoles(t, user, map[string]string{"node-init": f.Namespace})

	env.StartManagerAsWithCache(t, env.User(t, user),
		operator.CacheOptions(operator.Scope{Legacy: f.Namespace, Own: []string{"nodewright-system"}, Workflows: "nodewright-system"}),
		operator.SetupControllersReading(f.Namespace))
	f.SetNodes(f.Node(1), f.Node(2))
	f.Transition(legacy.SingleNodeReady)
	f.Transition(legacy.Failed) // forbidden: raises a Warning Event
	bt.Eventually(t, wait, func() string {
		c := f.Status()
		if c.Status.LegacyState != legacy.Failed || len(agentNames(t, f.Namespace)) != 2 {
			return fmt.Sprintf("the restricted operator did not catch up: %+v", c.Status)
		}
		return ""
	})

	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: bt.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	for _, mf := range cm.ManagedFields {
		if mf.Manager != "agentstatus.test" {
			t.Errorf("the legacy ConfigMap has fields managed by %q", mf.Manager)
		}
	}
}

// TestStaleEventOnceWhenTheWriteConflicts makes the status write that records a stale
// heartbeat fail once, as it does when the cache was stale, and expects the retry not to raise
// the HeartbeatStale Event a second time.
func TestStaleEventOnceWhenTheWriteConflicts(t *testing.T) {
	f := bt.New(t, env, 3*time.Second) // heartbeats have whole seconds: fresh for 2 to 3 s
	recorder := record.NewFakeRecorder(100)
	var conflicting *bt.ConflictingStatus
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		conflicting = &bt.ConflictingStatus{Client: mgr.GetClient()}
		return (&agentstatus.Reconciler{Client: conflicting, Recorder: recorder}).SetupWithManager(mgr)
	})
	f.SetNodes(f.Node(1))
	f.Transition(legacy.SingleNodeReady)
	f.EventuallyFresh(wait, func() string {
		if as, _ := agent(t, f.Node(1)); as == nil || as.Status.Heartbeat.LastSeen == nil || as.Status.Heartbeat.Stale {
			return fmt.Sprintf("node 1 not fresh yet: %+v", as)
		}
		return ""
	}, f.Node(1))

	conflicting.FailNextStatusPatches(1)
	bt.Eventually(t, wait, func() string {
		if as, _ := agent(t, f.Node(1)); as == nil || !as.Status.Heartbeat.Stale {
			return fmt.Sprintf("node 1 not stale yet: %+v", as)
		}
		return ""
	})
	// The Event follows the write; a duplicate from the failed attempt would precede it.
	var seen []string
	count := func() int {
		return bt.CountEvents(recorder.Events, &seen, corev1.EventTypeWarning, agentstatus.EventHeartbeatStale)
	}
	bt.Eventually(t, wait, func() string {
		if count() == 0 {
			return "no HeartbeatStale Event"
		}
		return ""
	})
	if n := count(); n != 1 {
		t.Errorf("the stale heartbeat raised %d HeartbeatStale Events, want 1: %q", n, seen)
	}
}

// bindGeneratedRoles creates the roles of config/rbac/role.yaml, with namespaces renamed by
// rename, and binds them to user. It checks on the way that the legacy kinds are only read,
// and only in a namespace.
func bindGeneratedRoles(t *testing.T, user string, rename map[string]string) {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(env.RepoRoot + "/config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	suffix := "-" + strings.ToLower(t.Name())
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	create := func(obj client.Object) {
		t.Helper()
		if err := env.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind == "" {
			continue
		}
		switch meta.Kind {
		case "ClusterRole":
			role := &rbacv1.ClusterRole{}
			if err := yaml.Unmarshal([]byte(doc), role); err != nil {
				t.Fatal(err)
			}
			for _, rule := range role.Rules {
				for _, res := range rule.Resources {
					if res == "configmaps" || res == "daemonsets" || res == "secrets" {
						t.Errorf("the operator's ClusterRole grants %v on %s in every namespace", rule.Verbs, res)
					}
				}
			}
			role.Name += suffix
			create(role)
			create(&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}})
		case "Role":
			role := &rbacv1.Role{}
			if err := yaml.Unmarshal([]byte(doc), role); err != nil {
				t.Fatal(err)
			}
			if role.Namespace == "node-init" {
				for _, rule := range role.Rules {
					if strings.Join(rule.Verbs, ",") != "get,list,watch" {
						t.Errorf("the legacy namespace's Role grants %v on %v; the bridge may only read", rule.Verbs, rule.Resources)
					}
				}
			}
			if ns, ok := rename[role.Namespace]; ok {
				role.Namespace = ns
			}
			// Namespaces are left: envtest has no namespace controller to finish deleting them.
			if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: role.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			role.Name += suffix
			create(role)
			create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}})
		default:
			t.Fatalf("config/rbac/role.yaml has a %s", meta.Kind)
		}
	}
}
