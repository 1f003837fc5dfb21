package operatorrestriction_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// The site's Node carries three NoSchedule taints: notReadyTaint, which the test's EdgeProfile
// names in storage.notReadyTaints, dedicatedTaint (=storage), a site's own that it does not, and
// node-role.kubernetes.io/control-plane, which Kubernetes keeps.
const (
	notReadyTaint  = "storage.example.com/not-ready"
	dedicatedTaint = "example.com/dedicated"
)

// TestOperatorTakesOffAndPutsBackOnlyTheProfilesTaints: as the operator's ServiceAccount, a
// Node's taints are all it may change, never with a NoExecute taint (which evicts every VM, even
// of the profile's key) nor a taint Kubernetes keeps; and once an EdgeProfile names its
// not-ready taints, only those: it may take the profile's taint off a Node and put it back, as a
// ReplicationUpgrade and its rollback do, and not a site's other taint. A node-restriction label,
// an annotation, the unschedulable flag without the flip's annotation are refused, the message
// naming the field; and with
// RBAC widened, creating and deleting a Node and writing its status are refused too.
func TestOperatorTakesOffAndPutsBackOnlyTheProfilesTaints(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	key := client.ObjectKeyFromObject(s.node)
	patch := func(change func(n *corev1.Node)) error {
		t.Helper()
		n := &corev1.Node{}
		if err := s.operator.Get(ctx, key, n); err != nil {
			t.Fatal(err)
		}
		base := n.DeepCopy()
		change(n)
		return s.operator.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	takeOff := func(taint string) func(n *corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taint })
		}
	}
	putOn := func(taint corev1.Taint) func(n *corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taint) }
	}
	notReady := corev1.Taint{Key: notReadyTaint, Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: dedicatedTaint, Value: "storage", Effect: corev1.TaintEffectNoSchedule}

	// Each is refused by nodesPolicy; those marked notInProfile change a taint the profile does
	// not name, which taintsPolicy refuses too once there is one (and either may answer).
	refusals := []struct {
		name, policy string
		change       func(n *corev1.Node)
		rule         string
		notInProfile bool
	}{
		{"a NoExecute taint, evicting every VM", nodesPolicy,
			putOn(corev1.Taint{Key: "example.com/evict", Effect: corev1.TaintEffectNoExecute}),
			"spec.taints: example.com/evict=:NoExecute may not be added: a NoExecute taint evicts the node's VMs", true},
		{"the profile's taint as NoExecute", nodesPolicy,
			putOn(corev1.Taint{Key: notReadyTaint, Value: "x", Effect: corev1.TaintEffectNoExecute}),
			"spec.taints: " + notReadyTaint + "=x:NoExecute may not be added: a NoExecute taint evicts the node's VMs", false},
		{"the control plane's taint taken off", nodesPolicy, takeOff("node-role.kubernetes.io/control-plane"),
			"spec.taints: node-role.kubernetes.io/control-plane=:NoSchedule may not be added or removed: Kubernetes manages that taint", true},
		{"a node-restriction label", nodesPolicy, func(n *corev1.Node) { n.Labels["node-restriction.kubernetes.io/pci-dss"] = "true" },
			"metadata.labels may not change: the operator changes only the not-ready taints of Node", false},
		{"an annotation", nodesPolicy, func(n *corev1.Node) { n.Annotations = map[string]string{"example.com/x": "y"} },
			"metadata.annotations may not change", false},
		{"the node cordoned without the flip's annotation", nodesPolicy, func(n *corev1.Node) { n.Spec.Unschedulable = true },
			"spec.unschedulable may be set on Node " + s.node.Name + " only with the annotation " + cordonedBy, false},
	}
	refuseAll := func(t *testing.T, withProfile bool) {
		t.Helper()
		for _, r := range refusals {
			err := patch(r.change)
			if withProfile && r.notInProfile && refusedByPolicy(err, taintsPolicy) {
				continue
			}
			wantPolicyRefusal(t, "changing Node "+s.node.Name+": "+r.name, err, r.policy, r.rule)
		}
	}

	t.Run("without an EdgeProfile, only taints that keep workloads off may change", func(t *testing.T) {
		refuseAll(t, false)
		// What a cluster without an EdgeProfile leaves possible (docs/install.md): a site's
		// NoSchedule taint taken off and put back.
		if err := patch(takeOff(dedicatedTaint)); err != nil {
			t.Fatalf("taking %s off without an EdgeProfile: %v", dedicatedTaint, err)
		}
		if err := patch(putOn(dedicated)); err != nil {
			t.Fatalf("putting %s back without an EdgeProfile: %v", dedicatedTaint, err)
		}
	})

	profile := &nwv1.EdgeProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "site-" + s.release},
		Spec: nwv1.EdgeProfileSpec{Version: "1.0.0", Topology: nwv1.TopologyThreeNode, OS: nwv1.HostOSKairos,
			Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR, NotReadyTaints: []string{notReadyTaint}},
			Network: nwv1.ProfileNetwork{BondInterface: "bond0", BondMode: nwv1.BondModeActiveBackup}},
	}
	// The chart's webhook configurations are installed, and no operator serves them here: they
	// would refuse the profile.
	for _, cfg := range []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mutatingConfig}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: validatingConfig}}} {
		deleteIgnoringNotFound(t, cfg)
	}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Create(ctx, profile); err != nil {
			return fmt.Sprintf("creating EdgeProfile %s: %v", profile.Name, err)
		}
		return ""
	})
	t.Cleanup(func() {
		deleteIgnoringNotFound(t, profile)
		// The API server lets a deleted parameter go a moment late: wait until the next test
		// would not meet it.
		testenv.Eventually(t, patience, func() string {
			if err := patch(takeOff(dedicatedTaint)); err != nil {
				return fmt.Sprintf("EdgeProfile %s is deleted, and the policy still refuses what it alone refused: %v", profile.Name, err)
			}
			if err := patch(putOn(dedicated)); err != nil {
				t.Fatal(err)
			}
			return ""
		})
	})

	t.Run("with an EdgeProfile, its taint is taken off and put back, and no other", func(t *testing.T) {
		// The policy reads its parameters from the API server's informer: wait for the profile.
		testenv.Eventually(t, patience, func() string {
			if err := patch(takeOff(dedicatedTaint)); !refusedByPolicy(err, taintsPolicy) {
				return fmt.Sprintf("taking %s off with EdgeProfile %s: %v; want it refused by %s", dedicatedTaint, profile.Name, err, taintsPolicy)
			}
			return ""
		})
		wantPolicyRefusal(t, "taking "+dedicatedTaint+" off", patch(takeOff(dedicatedTaint)), taintsPolicy,
			"spec.taints: "+dedicatedTaint+"=storage:NoSchedule may not be added or removed: the operator takes off and puts back only the taints EdgeProfile "+
				profile.Name+" names in storage.notReadyTaints (["+notReadyTaint+"])")
		wantPolicyRefusal(t, "putting on another taint", patch(putOn(corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoSchedule})),
			taintsPolicy, "spec.taints: example.com/drain=:NoSchedule may not be added or removed")
		if err := patch(takeOff(notReadyTaint)); err != nil {
			t.Fatalf("taking the profile's taint off Node %s: %v", s.node.Name, err)
		}
		if err := patch(putOn(notReady)); err != nil {
			t.Fatalf("putting the profile's taint back on Node %s: %v", s.node.Name, err)
		}
		refuseAll(t, true)
	})

	t.Run("a merge patch sent as is is held to the same rules", func(t *testing.T) {
		// The patch of the review: a NoExecute taint on the node, as on every node.
		raw := `{"spec":{"taints":[{"key":"example.com/evict","effect":"NoExecute"}]}}`
		err := s.operator.Patch(ctx, s.node.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(raw)))
		if !refusedByPolicy(err, taintsPolicy) {
			wantPolicyRefusal(t, "the merge patch", err, nodesPolicy, "may not be added")
		}
	})

	t.Run("with RBAC widened, creating and deleting Nodes and writing their status are refused", func(t *testing.T) {
		s.grant(t, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		}, authorizationv1.ResourceAttributes{Verb: "create", Resource: "nodes"})
		const rule = "the operator only updates a Node's not-ready taints and its own cordon; it creates and deletes no Node and writes no Node's status: refused "
		wantPolicyRefusal(t, "creating a Node", s.operator.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rogue-" + s.release}}),
			nodesPolicy, rule+"CREATE of nodes")
		wantPolicyRefusal(t, "deleting Node "+s.node.Name, s.operator.Delete(ctx, s.node.DeepCopy()), nodesPolicy, rule+"DELETE of nodes")
		err := s.operator.Status().Patch(ctx, s.node.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Drained","message":"x"}]}}`)))
		wantPolicyRefusal(t, "writing Node "+s.node.Name+"'s status", err, nodesPolicy, rule+"UPDATE of nodes/status")
	})
}

// cordonedBy is the annotation a flip's cordon carries (internal/bondflip.AnnotationCordonedBy).
const cordonedBy = "nodewright.spectrocloud.com/cordoned-by"

// TestOperatorUncordonsOnlyTheNodesItCordoned: as the operator's ServiceAccount, a Node an
// administrator cordoned cannot be uncordoned: not directly, not with the flip's annotation
// added in the same update, and not in two updates (the annotation added first, then the
// uncordon as the flip's), each refused naming why; the node stays cordoned and unannotated.
// The flip's own cordon and uncordon pass: spec.unschedulable set with the annotation on a
// schedulable node, cleared with it removed; either half alone is refused.
func TestOperatorUncordonsOnlyTheNodesItCordoned(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	key := client.ObjectKeyFromObject(s.node)
	const flip = "bondmodeflipplan/to-lacp"
	change := func(c client.Client, f func(n *corev1.Node)) error {
		t.Helper()
		n := &corev1.Node{}
		if err := c.Get(ctx, key, n); err != nil {
			t.Fatal(err)
		}
		base := n.DeepCopy()
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		f(n)
		return c.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	asOperator := func(f func(n *corev1.Node)) error { return change(s.operator, f) }
	node := func() *corev1.Node {
		t.Helper()
		n := &corev1.Node{}
		if err := env.Client.Get(ctx, key, n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	uncordon := func(n *corev1.Node) { n.Spec.Unschedulable = false }
	mark := func(value string) func(n *corev1.Node) {
		return func(n *corev1.Node) { n.Annotations[cordonedBy] = value }
	}
	unmark := func(n *corev1.Node) { delete(n.Annotations, cordonedBy) }
	both := func(fs ...func(n *corev1.Node)) func(n *corev1.Node) {
		return func(n *corev1.Node) {
			for _, f := range fs {
				f(n)
			}
		}
	}

	// The administrator cordons the node (kubectl cordon: spec.unschedulable alone).
	if err := change(env.Client, func(n *corev1.Node) { n.Spec.Unschedulable = true }); err != nil {
		t.Fatal(err)
	}
	notOurs := "spec.unschedulable may not be cleared on Node " + s.node.Name + ": it was not cordoned by the operator"
	wantPolicyRefusal(t, "uncordoning the node the administrator cordoned", asOperator(uncordon), nodesPolicy, notOurs)
	wantPolicyRefusal(t, "uncordoning it, adding the flip's annotation in the same update", asOperator(both(uncordon, mark(flip))), nodesPolicy, notOurs)
	alreadyCordoned := "metadata.annotations[" + cordonedBy + "] may be added or changed on Node " + s.node.Name +
		" only in the update that cordons it, and only while it is schedulable: it is already cordoned, by someone else"
	wantPolicyRefusal(t, "adding the flip's annotation to the cordoned node, to uncordon it as the flip's next", asOperator(mark(flip)), nodesPolicy, alreadyCordoned)
	if n := node(); !n.Spec.Unschedulable || n.Annotations[cordonedBy] != "" {
		t.Fatalf("after the attacks Node %s is unschedulable=%v, annotated %q; want it cordoned as the administrator left it, unannotated",
			s.node.Name, n.Spec.Unschedulable, n.Annotations[cordonedBy])
	}

	// The administrator uncordons it: the flip's cordon and uncordon.
	if err := change(env.Client, uncordon); err != nil {
		t.Fatal(err)
	}
	wantPolicyRefusal(t, "cordoning the node with an annotation that names no flip", asOperator(both(func(n *corev1.Node) { n.Spec.Unschedulable = true }, mark("someone"))),
		nodesPolicy, "spec.unschedulable may be set on Node "+s.node.Name+" only with the annotation "+cordonedBy)
	wantPolicyRefusal(t, "the flip's annotation without the cordon", asOperator(mark(flip)), nodesPolicy, "the update does not cordon it")
	if err := asOperator(both(func(n *corev1.Node) { n.Spec.Unschedulable = true }, mark(flip))); err != nil {
		t.Fatalf("the flip's cordon of Node %s: %v", s.node.Name, err)
	}
	wantPolicyRefusal(t, "the flip's annotation removed, the node left cordoned", asOperator(unmark), nodesPolicy,
		"metadata.annotations["+cordonedBy+"] may be removed from Node "+s.node.Name+" only in the update that uncordons it")
	wantPolicyRefusal(t, "the node uncordoned, the flip's annotation kept", asOperator(uncordon), nodesPolicy,
		"spec.unschedulable may not be cleared on Node "+s.node.Name+": the update must remove its annotation "+cordonedBy+" too")
	wantPolicyRefusal(t, "the flip's annotation changed on the node it cordoned", asOperator(mark("bondmodeflipplan/other")), nodesPolicy,
		"metadata.annotations["+cordonedBy+"] may be added or changed on Node "+s.node.Name+" only in the update that cordons it")
	if err := asOperator(both(uncordon, unmark)); err != nil {
		t.Fatalf("the flip's uncordon of Node %s: %v", s.node.Name, err)
	}
	if n := node(); n.Spec.Unschedulable || n.Annotations[cordonedBy] != "" {
		t.Fatalf("after the flip's uncordon Node %s is unschedulable=%v, annotated %q", s.node.Name, n.Spec.Unschedulable, n.Annotations[cordonedBy])
	}
}
