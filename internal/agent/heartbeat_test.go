package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// renewedAfter waits until the Lease ns/node is renewed after since, and returns it.
func renewedAfter(t *testing.T, ns, node string, since time.Time) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: node}, l); err != nil {
			return err.Error()
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(since) {
			return fmt.Sprintf("the Lease was last renewed at %v, not after %s", l.Spec.RenewTime, since)
		}
		return ""
	})
	return l
}

// TestTheHeartbeatKeepsItsLease: the Lease is created held by the node for four intervals,
// renewed, owned by the Node once there is one; a write by someone else (a Conflict for the
// heartbeat's next renewal) is kept and the renewals go on; a Lease deleted is made again.
func TestTheHeartbeatKeepsItsLease(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	const node = "heartbeat-edge-1"
	run(t, (&agent.Heartbeat{Client: env.LiteClient(t), Node: node, Namespace: ns, Interval: time.Second}).Run)

	first := renewedAfter(t, ns, node, time.Time{})
	if ptr.Deref(first.Spec.HolderIdentity, "") != node || ptr.Deref(first.Spec.LeaseDurationSeconds, 0) != 4 || len(first.OwnerReferences) != 0 {
		t.Errorf("the first Lease: %+v, owners %v; want held by %s for 4s, no owner (no Node)", first.Spec, first.OwnerReferences, node)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	testenv.Eventually(t, patience, func() string {
		l := renewedAfter(t, ns, node, time.Time{})
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != n.UID || l.OwnerReferences[0].Kind != "Node" {
			return fmt.Sprintf("owned by %v; want the Node", l.OwnerReferences)
		}
		return ""
	})

	// Someone else writes it: the heartbeat's Lease is stale, and its renewal conflicts.
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: node}, l); err != nil {
		t.Fatal(err)
	}
	l.Annotations = map[string]string{"example.com/seen": "yes"}
	if err := env.Client.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	after := renewedAfter(t, ns, node, l.Spec.RenewTime.Time)
	if after.Annotations["example.com/seen"] != "yes" || after.UID != first.UID {
		t.Errorf("after another writer: %+v; want the same Lease, their annotation kept", after.ObjectMeta)
	}
	after = renewedAfter(t, ns, node, after.Spec.RenewTime.Time)

	if err := env.Client.Delete(ctx, after); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, patience, func() string {
		again := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: node}, again); err != nil {
			return err.Error()
		}
		if again.UID == first.UID {
			return "still the deleted Lease"
		}
		return ""
	})
}

// TestTheHeartbeatWithoutReadingNodes: as the chart's role grants it, the agent may not read
// Nodes; its Lease is renewed without an owner.
func TestTheHeartbeatWithoutReadingNodes(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	const node = "heartbeat-edge-2"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	user := "agent-" + ns
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leases"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leases"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leases"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	c := testenv.LiteClient(t, env.User(t, user))
	run(t, (&agent.Heartbeat{Client: c, Node: node, Namespace: ns, Interval: time.Second}).Run)
	first := renewedAfter(t, ns, node, time.Time{})
	again := renewedAfter(t, ns, node, first.Spec.RenewTime.Time)
	if len(again.OwnerReferences) != 0 {
		t.Errorf("owned by %v, by an agent that may not read its Node", again.OwnerReferences)
	}
}
