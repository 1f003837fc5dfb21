package noderestriction_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	nwagent "github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/kubelite"
	"github.com/spectrocloud/nodewright/internal/profile"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
)

// The policy's rules, as its messages say them.
func statusRule(node, otherNode string) string {
	return fmt.Sprintf("the agent of node %s may write only its own node's NodewrightAgentStatus, not that of %s", node, otherNode)
}

func leaseRule(node, otherNode string) string {
	return fmt.Sprintf("the agent of node %s may write only its own node's Lease, not the Lease %s", node, otherNode)
}

func operationRule(node, operation, otherNode string) string {
	return fmt.Sprintf("the agent of node %s may write only its own node's NodeOperations, not %s, which is for node %s", node, operation, otherNode)
}

func noNodeRule(operation, kind string) string {
	return fmt.Sprintf("the agent's token is not bound to a pod on a node (no authentication.kubernetes.io/node-name), and the agent may write only its own node's objects: refused %s of %s", operation, kind)
}

// TestAgentMayTouchOnlyItsOwnNode: with tokens the API server binds to a pod on edge-1 and one
// on edge-2, each agent creates and updates its own node's NodewrightAgentStatus and Lease and
// reports on its own node's NodeOperation; the chart's policy refuses each agent every write
// to the other node's, naming the rule; RBAC refuses creating, changing and deleting a
// NodeOperation; and a token of the same ServiceAccount that names no node (bound to no pod,
// or to a pod on no node) is refused every write.
func TestAgentMayTouchOnlyItsOwnNode(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()

	t.Run("creating the other node's NodewrightAgentStatus or Lease is refused", func(t *testing.T) {
		for _, node := range nodes {
			a, otherNode := s.agents[node], other(node)
			err := a.client.Create(ctx, &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: otherNode}})
			wantPolicyRefusal(t, node+" creates NodewrightAgentStatus "+otherNode, err, statusRule(node, otherNode))
			err = a.client.Create(ctx, lease(s.ns, otherNode))
			wantPolicyRefusal(t, node+" creates Lease "+otherNode, err, leaseRule(node, otherNode))
		}
		for _, obj := range []client.Object{&nwv1.NodewrightAgentStatus{}, &coordinationv1.Lease{}} {
			for _, node := range nodes {
				err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespaceOf(obj, s.ns), Name: node}, obj)
				if !apierrors.IsNotFound(err) {
					t.Errorf("%T %s exists after the refused creates (%v)", obj, node, err)
				}
			}
		}
	})

	t.Run("each agent writes its own node's objects", func(t *testing.T) {
		for _, node := range nodes {
			a := s.agents[node]
			seen := metav1.NewTime(time.Now().Truncate(time.Second))

			status := &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}}
			if err := a.client.Create(ctx, status); err != nil {
				t.Fatalf("%s creates its NodewrightAgentStatus: %v", node, err)
			}
			status.Labels = map[string]string{"example.com/reported-by": node}
			if err := a.client.Update(ctx, status); err != nil {
				t.Fatalf("%s updates its NodewrightAgentStatus: %v", node, err)
			}
			status.Status.Role = nwv1.NodeRolePrimary
			if err := a.client.Status().Update(ctx, status); err != nil {
				t.Fatalf("%s updates its NodewrightAgentStatus's status: %v", node, err)
			}
			before := status.DeepCopy()
			status.Status.Heartbeat.LastSeen = &seen
			if err := a.client.Status().Patch(ctx, status, client.MergeFrom(before)); err != nil {
				t.Fatalf("%s patches its NodewrightAgentStatus's status: %v", node, err)
			}

			l := lease(s.ns, node)
			if err := a.client.Create(ctx, l); err != nil {
				t.Fatalf("%s creates its Lease: %v", node, err)
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: seen.Add(time.Second)}
			if err := a.client.Update(ctx, l); err != nil {
				t.Fatalf("%s renews its Lease: %v", node, err)
			}
			beforeLease := l.DeepCopy()
			l.Spec.LeaseTransitions = ptr.To[int32](1)
			if err := a.client.Patch(ctx, l, client.MergeFrom(beforeLease)); err != nil {
				t.Fatalf("%s patches its Lease: %v", node, err)
			}

			op := &nwv1.NodeOperation{}
			if err := a.client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.operation[node]}, op); err != nil {
				t.Fatalf("%s reads its NodeOperation: %v", node, err)
			}
			beforeOp := op.DeepCopy()
			op.Status.Phase = nwv1.OperationRunning
			op.Status.StartTime = &seen
			if err := a.client.Status().Patch(ctx, op, client.MergeFrom(beforeOp)); err != nil {
				t.Fatalf("%s patches its NodeOperation's status: %v", node, err)
			}
			op.Status.Phase = nwv1.OperationSucceeded
			op.Status.CompletionTime = &seen
			if err := a.client.Status().Update(ctx, op); err != nil {
				t.Fatalf("%s updates its NodeOperation's status: %v", node, err)
			}

			// The agent's own report, as cmd/agent writes it: a server-side apply of its
			// fields of the status.
			reporter := &nwagent.Reporter{Client: a.lite, Node: node, Observer: &nwagent.HostObserver{}}
			if err := reporter.Report(ctx); err != nil {
				t.Fatalf("%s reports its node: %v", node, err)
			}
			// It follows its own object (a list and watch by name) and answers the operator's
			// report request there, long before its next periodic report.
			reporter.Interval = time.Hour
			follow, stop := context.WithCancel(ctx)
			following, running := make(chan error, 1), make(chan error, 1)
			go func() { following <- reporter.FollowRequests(follow) }()
			go func() { running <- reporter.Run(follow) }()
			request := "request-for-" + node
			if err := env.Client.Patch(ctx, &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, nwv1.AnnotationReportRequest, request))); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, patience, func() string {
				answered := &nwv1.NodewrightAgentStatus{}
				if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, answered); err != nil {
					return err.Error()
				}
				if answered.Status.ReportRequest != request {
					return fmt.Sprintf("%s's agent has not answered its report request (status.reportRequest %q)", node, answered.Status.ReportRequest)
				}
				return ""
			})
			stop()
			if err := <-following; err != nil {
				t.Errorf("%s follows its report requests: %v", node, err)
			}
			<-running

			// What the API server holds now.
			got := &nwv1.NodewrightAgentStatus{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Reporter != nwv1.ReporterAgent {
				t.Errorf("NodewrightAgentStatus %s is reported by %q after its agent's report", node, got.Status.Reporter)
			}
			if got.Labels["example.com/reported-by"] != node || got.Status.Role != nwv1.NodeRolePrimary ||
				got.Status.Heartbeat.LastSeen == nil || !got.Status.Heartbeat.LastSeen.Equal(&seen) {
				t.Errorf("NodewrightAgentStatus %s holds labels %v and status %+v, not what its agent wrote", node, got.Labels, got.Status)
			}
			gotLease := &coordinationv1.Lease{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: node}, gotLease); err != nil {
				t.Fatal(err)
			}
			if ptr.Deref(gotLease.Spec.HolderIdentity, "") != node || ptr.Deref(gotLease.Spec.LeaseTransitions, 0) != 1 ||
				gotLease.Spec.RenewTime == nil || !gotLease.Spec.RenewTime.Time.Equal(seen.Add(time.Second)) {
				t.Errorf("Lease %s holds %+v, not what its agent wrote", node, gotLease.Spec)
			}
			gotOp := &nwv1.NodeOperation{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.operation[node]}, gotOp); err != nil {
				t.Fatal(err)
			}
			if gotOp.Status.Phase != nwv1.OperationSucceeded || gotOp.Status.StartTime == nil || gotOp.Status.CompletionTime == nil {
				t.Errorf("NodeOperation %s holds status %+v, not what its agent wrote", gotOp.Name, gotOp.Status)
			}
		}
	})

	t.Run("writing the other node's objects is refused", func(t *testing.T) {
		for _, node := range nodes {
			a, otherNode := s.agents[node], other(node)
			otherOp := s.operation[otherNode]
			versions := s.resourceVersions(t, otherNode)

			// Reading is allowed (admission never sees a read): the writes below are refused by
			// the policy, not for want of the object.
			status := &nwv1.NodewrightAgentStatus{}
			if err := a.client.Get(ctx, client.ObjectKey{Name: otherNode}, status); err != nil {
				t.Fatalf("%s reads NodewrightAgentStatus %s: %v", node, otherNode, err)
			}
			before := status.DeepCopy()
			status.Labels = map[string]string{"example.com/reported-by": node}
			wantPolicyRefusal(t, node+" updates NodewrightAgentStatus "+otherNode, a.client.Update(ctx, status.DeepCopy()), statusRule(node, otherNode))
			wantPolicyRefusal(t, node+" patches NodewrightAgentStatus "+otherNode, a.client.Patch(ctx, status.DeepCopy(), client.MergeFrom(before)), statusRule(node, otherNode))
			status = before.DeepCopy()
			status.Status.Role = nwv1.NodeRoleTiebreaker
			wantPolicyRefusal(t, node+" updates the status of NodewrightAgentStatus "+otherNode, a.client.Status().Update(ctx, status.DeepCopy()), statusRule(node, otherNode))
			wantPolicyRefusal(t, node+" patches the status of NodewrightAgentStatus "+otherNode, a.client.Status().Patch(ctx, status.DeepCopy(), client.MergeFrom(before)), statusRule(node, otherNode))
			// An agent told the other node's name (--node-name is not trusted) reports it: its
			// apply is refused.
			liar := &nwagent.Reporter{Client: a.lite, Node: otherNode, Observer: &nwagent.HostObserver{}}
			wantPolicyRefusal(t, node+" reports node "+otherNode, liar.Report(ctx), statusRule(node, otherNode))

			l := &coordinationv1.Lease{}
			if err := a.client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: otherNode}, l); err != nil {
				t.Fatalf("%s reads Lease %s: %v", node, otherNode, err)
			}
			beforeLease := l.DeepCopy()
			l.Spec.HolderIdentity = ptr.To(node)
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			wantPolicyRefusal(t, node+" takes Lease "+otherNode, a.client.Update(ctx, l.DeepCopy()), leaseRule(node, otherNode))
			wantPolicyRefusal(t, node+" patches Lease "+otherNode, a.client.Patch(ctx, l.DeepCopy(), client.MergeFrom(beforeLease)), leaseRule(node, otherNode))

			op := &nwv1.NodeOperation{}
			if err := a.client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: otherOp}, op); err != nil {
				t.Fatalf("%s reads NodeOperation %s: %v", node, otherOp, err)
			}
			beforeOp := op.DeepCopy()
			// A write the schema allows (an ended operation keeps its phase): only the policy
			// stands in its way.
			op.Status.Error = &nwv1.OperationError{Reason: "Unsupported", Message: "not this node's"}
			wantPolicyRefusal(t, node+" patches the status of NodeOperation "+otherOp, a.client.Status().Patch(ctx, op.DeepCopy(), client.MergeFrom(beforeOp)), operationRule(node, otherOp, otherNode))
			wantPolicyRefusal(t, node+" updates the status of NodeOperation "+otherOp, a.client.Status().Update(ctx, op.DeepCopy()), operationRule(node, otherOp, otherNode))

			if after := s.resourceVersions(t, otherNode); after != versions {
				t.Errorf("%s's objects changed under the refused writes of %s's agent: resource versions %v, then %v", otherNode, node, versions, after)
			}
		}
	})

	t.Run("an agent cannot create, change or delete a NodeOperation", func(t *testing.T) {
		for _, node := range nodes {
			a := s.agents[node]
			created := &nwv1.NodeOperation{
				ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "self-made-" + node},
				Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationDRBDVerify, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
					DRBDVerify: &nwv1.DRBDResourceOperation{Resource: "pvc-1"}},
			}
			wantRBACRefusal(t, node+" creates a NodeOperation for its node", a.client.Create(ctx, created), "create")

			op := &nwv1.NodeOperation{}
			if err := a.client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.operation[node]}, op); err != nil {
				t.Fatal(err)
			}
			op.Labels = map[string]string{"example.com/touched": "yes"}
			wantRBACRefusal(t, node+" updates its NodeOperation", a.client.Update(ctx, op.DeepCopy()), "update")
			wantRBACRefusal(t, node+" deletes its NodeOperation", a.client.Delete(ctx, op.DeepCopy()), "delete")
		}
		ops := &nwv1.NodeOperationList{}
		if err := env.Client.List(ctx, ops, client.InNamespace(s.ns)); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, op := range ops.Items {
			names = append(names, op.Name)
			if op.Labels["example.com/touched"] != "" {
				t.Errorf("NodeOperation %s was changed by an agent: labels %v", op.Name, op.Labels)
			}
		}
		if want := []string{s.operation[nodes[0]], s.operation[nodes[1]]}; strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("NodeOperations %v after the refused creates and deletes, want %v", names, want)
		}
	})

	t.Run("an agent reads the profile in force and its keys, and nothing else", func(t *testing.T) {
		ctx := context.Background()
		priv, _, err := profile.GenerateKeyPair(nil)
		if err != nil {
			t.Fatal(err)
		}
		key, err := profile.LoadPrivateKey(priv, nil)
		if err != nil {
			t.Fatal(err)
		}
		keys := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: "nodewright-profile-keys"},
			Data: map[string]string{"cosign.pub": string(key.Public().PEM())}}
		floor := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: "nodewright-profile-floor"},
			Data: map[string]string{"version": "1.0.0"}}
		p := &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: "restricted-site"}, Spec: nwv1.EdgeProfileSpec{Version: "1.0.0",
			Topology: nwv1.TopologyTwoNodeTiebreaker, OS: nwv1.HostOSSystemdNetworkd, Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR},
			Network: nwv1.ProfileNetwork{BondInterface: "bond0", BondMode: nwv1.BondModeActiveBackup}}}
		if p.Signature, err = profile.Sign(p.Spec, key); err != nil {
			t.Fatal(err)
		}
		nwc := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
			Spec: nwv1.NodewrightClusterSpec{ProfileRef: &nwv1.ProfileReference{Name: p.Name}, Legacy: nwv1.LegacySource{
				ConfigMapRef: nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"},
				DaemonSetRef: nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"}, EventComponent: "absent"}}}
		for _, obj := range []client.Object{keys, floor, p, nwc} {
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deleteIgnoringNotFound(t, obj) })
		}
		for _, node := range nodes {
			a := s.agents[node]
			// The agent's own check, with its own client and nothing but the chart's grants.
			signed := &nwagent.SignedProfile{Client: a.lite, Keys: types.NamespacedName{Namespace: releaseNS, Name: keys.Name}, StateDir: t.TempDir()}
			if got, err := signed.InForce(ctx); err != nil || got.Name != p.Name {
				t.Errorf("%s reads the profile in force: %v, %v; want %s, verified", node, got, err, p.Name)
			}
			for _, tc := range []struct {
				what string
				do   func() error
			}{
				{"reads another ConfigMap of the release's namespace", func() error {
					return a.lite.Get(ctx, nwagent.ConfigMaps.Path(releaseNS, floor.Name), &corev1.ConfigMap{})
				}},
				{"lists the ConfigMaps of the release's namespace", func() error {
					return a.lite.List(ctx, nwagent.ConfigMaps.Path(releaseNS, ""), kubelite.ListOptions{}, &corev1.ConfigMapList{})
				}},
				{"rewrites the trusted keys", func() error {
					return a.lite.MergePatch(ctx, nwagent.ConfigMaps.Path(releaseNS, keys.Name), []byte(`{"data":{"mine.pub":"x"}}`), nil)
				}},
				{"points the NodewrightCluster at another profile", func() error {
					return a.lite.MergePatch(ctx, nwagent.NodewrightClusters.Path("", nwc.Name), []byte(`{"spec":{"profileRef":{"name":"other"}}}`), nil)
				}},
				{"changes the EdgeProfile", func() error {
					return a.lite.MergePatch(ctx, nwagent.EdgeProfiles.Path("", p.Name), []byte(`{"spec":{"network":{"allowedBondModes":["balance-rr"]}}}`), nil)
				}},
				{"lists the EdgeProfiles", func() error {
					return a.lite.List(ctx, nwagent.EdgeProfiles.Path("", ""), kubelite.ListOptions{}, &nwv1.EdgeProfileList{})
				}},
			} {
				if err := tc.do(); !kubelite.IsForbidden(err) || !strings.Contains(err.Error(), " cannot ") {
					t.Errorf("%s %s: %v; want RBAC's Forbidden", node, tc.what, err)
				}
			}
		}
	})

	t.Run("an agent reads the BootRecoveryPolicy's units, and cannot change it", func(t *testing.T) {
		ctx := context.Background()
		p := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName},
			Spec: nwv1.BootRecoveryPolicySpec{PostBootHealth: nwv1.PostBootHealth{SystemdUnits: []nwv1.SystemdUnitName{"k3s.service"}}}}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteIgnoringNotFound(t, p) })
		played := &kairosplay.Host{Root: t.TempDir(), Dir: t.TempDir()}
		if err := played.SetUnit("k3s.service", &kairosplay.UnitState{ActiveState: "active", SubState: "running"}); err != nil {
			t.Fatal(err)
		}
		for _, node := range nodes {
			a := s.agents[node]
			// The agent's own read, with its own client and nothing but the chart's grants.
			units := &nwagent.SystemdUnits{Client: a.lite, Runner: kairosplay.Runner{Host: played}, Systemctl: []string{"systemctl"}}
			if got, err := units.Observe(ctx); err != nil || len(got) != 1 || got[0].ActiveState != "active" {
				t.Errorf("%s reads the units the policy names: %+v, %v; want k3s.service active", node, got, err)
			}
			for _, tc := range []struct {
				what string
				do   func() error
			}{
				{"changes the BootRecoveryPolicy", func() error {
					return a.lite.MergePatch(ctx, nwagent.BootRecoveryPolicies.Path("", p.Name), []byte(`{"spec":{"postBootHealth":{"systemdUnits":[]}}}`), nil)
				}},
				{"acknowledges a fallback", func() error {
					return a.lite.MergePatch(ctx, nwagent.BootRecoveryPolicies.Path("", p.Name), []byte(`{"metadata":{"annotations":{"nodewright.spectrocloud.com/acknowledge-fallback":"edge-1@x"}}}`), nil)
				}},
				{"lists the BootRecoveryPolicies", func() error {
					return a.lite.List(ctx, nwagent.BootRecoveryPolicies.Path("", ""), kubelite.ListOptions{}, &nwv1.BootRecoveryPolicyList{})
				}},
			} {
				if err := tc.do(); !kubelite.IsForbidden(err) || !strings.Contains(err.Error(), " cannot ") {
					t.Errorf("%s %s: %v; want RBAC's Forbidden", node, tc.what, err)
				}
			}
		}
	})

	t.Run("a token that names no node is refused every write", func(t *testing.T) {
		admin := kubernetes.NewForConfigOrDie(env.Config)
		// A pod the scheduler has not placed: a token bound to it names the pod, not a node.
		unscheduled := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "agent-unscheduled"},
			Spec: corev1.PodSpec{
				ServiceAccountName: agentSA,
				Containers:         []corev1.Container{{Name: "agent", Image: "registry.invalid/nodewright-agent:test"}},
			},
		}
		if err := env.Client.Create(ctx, unscheduled); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name  string
			bound *authenticationv1.BoundObjectReference
		}{
			{"bound to no object", nil},
			{"bound to a pod on no node", &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: unscheduled.Name, UID: unscheduled.UID}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				token, err := admin.CoreV1().ServiceAccounts(s.ns).CreateToken(ctx, agentSA, &authenticationv1.TokenRequest{
					Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: tc.bound},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				a := newAgent(t, "", token.Status.Token)
				user := whoAmI(t, a.kube)
				if want := "system:serviceaccount:" + s.ns + ":" + agentSA; user.Username != want {
					t.Fatalf("the token authenticates as %q, want the agent's ServiceAccount %q", user.Username, want)
				}
				if got, ok := user.Extra[nodeNameExtra]; ok {
					t.Fatalf("the token carries %s=%v: this case needs one that names no node", nodeNameExtra, got)
				}

				node := nodes[0]
				status := &nwv1.NodewrightAgentStatus{}
				if err := a.client.Get(ctx, client.ObjectKey{Name: node}, status); err != nil {
					t.Fatal(err)
				}
				before := status.DeepCopy()
				status.Status.Role = nwv1.NodeRoleSecondary
				wantPolicyRefusal(t, "patching the status of NodewrightAgentStatus "+node, a.client.Status().Patch(ctx, status, client.MergeFrom(before)), noNodeRule("UPDATE", "NodewrightAgentStatus"))
				err = a.client.Create(ctx, &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: "edge-3"}})
				wantPolicyRefusal(t, "creating NodewrightAgentStatus edge-3", err, noNodeRule("CREATE", "NodewrightAgentStatus"))

				l := &coordinationv1.Lease{}
				if err := a.client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: node}, l); err != nil {
					t.Fatal(err)
				}
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				wantPolicyRefusal(t, "renewing Lease "+node, a.client.Update(ctx, l), noNodeRule("UPDATE", "Lease"))
				wantPolicyRefusal(t, "creating Lease edge-3", a.client.Create(ctx, lease(s.ns, "edge-3")), noNodeRule("CREATE", "Lease"))

				op := &nwv1.NodeOperation{}
				if err := a.client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.operation[node]}, op); err != nil {
					t.Fatal(err)
				}
				beforeOp := op.DeepCopy()
				op.Status.Error = &nwv1.OperationError{Reason: "Unsupported", Message: "no node's"}
				wantPolicyRefusal(t, "patching the status of NodeOperation "+op.Name, a.client.Status().Patch(ctx, op, client.MergeFrom(beforeOp)), noNodeRule("UPDATE", "NodeOperation"))
			})
		}
	})
}

// wantPolicyRefusal fails the test unless err is the chart's policy refusing the write with
// the rule's message.
func wantPolicyRefusal(t *testing.T, what string, err error, rule string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted; want it refused by ValidatingAdmissionPolicy %s: %s", what, policyName, rule)
		return
	}
	if !refusedByPolicy(err) || !strings.Contains(err.Error(), rule) {
		t.Errorf("%s: %v\nwant a Forbidden from ValidatingAdmissionPolicy %s saying %q", what, err, policyName, rule)
	}
}

// wantRBACRefusal fails the test unless err is RBAC refusing the verb on NodeOperations (before
// admission: the policy never sees it).
func wantRBACRefusal(t *testing.T, what string, err error, verb string) {
	t.Helper()
	want := fmt.Sprintf("cannot %s resource %q", verb, "nodeoperations")
	if err == nil {
		t.Errorf("%s: admitted; want RBAC to refuse it (%s)", what, want)
		return
	}
	if !refusedByRBAC(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v\nwant RBAC's Forbidden saying %q", what, err, want)
	}
}

// resourceVersions are the resource versions of the node's NodewrightAgentStatus, Lease and
// NodeOperation, as the administrator reads them.
func (s *site) resourceVersions(t *testing.T, node string) [3]string {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{&nwv1.NodewrightAgentStatus{}, &coordinationv1.Lease{}, &nwv1.NodeOperation{}}
	names := []string{node, node, s.operation[node]}
	var versions [3]string
	for i, obj := range objs {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespaceOf(obj, s.ns), Name: names[i]}, obj); err != nil {
			t.Fatalf("reading %T %s: %v", obj, names[i], err)
		}
		versions[i] = obj.GetResourceVersion()
	}
	return versions
}

// namespaceOf is ns for the namespaced kinds here, and "" for the cluster-scoped
// NodewrightAgentStatus.
func namespaceOf(obj client.Object, ns string) string {
	if _, ok := obj.(*nwv1.NodewrightAgentStatus); ok {
		return ""
	}
	return ns
}

// lease is the heartbeat Lease of the node's agent.
func lease(ns, node string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: node},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(node),
			LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
}
