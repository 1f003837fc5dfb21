package clusterspec_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/clusterspec"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

// TestMain starts the control plane, except in a fuzzing worker: it runs only FuzzParse,
// which needs none, and one control plane per worker would be a dozen.
func TestMain(m *testing.M) {
	flag.Parse()
	if w := flag.Lookup("test.fuzzworker"); w != nil && w.Value.String() == "true" {
		os.Exit(m.Run())
	}
	os.Exit(env.Run(m))
}

// wait bounds every wait on observed state: long enough for a busy CI machine, and no
// cost to a passing test, which stops waiting as soon as the state holds.
const wait = 2 * time.Minute

var clusterKey = client.ObjectKey{Name: nwv1.NodewrightClusterName}

// eventually polls check until it returns "" or wait passes, then fails with what it said.
func eventually(t *testing.T, check func() string) {
	t.Helper()
	testenv.Eventually(t, wait, check)
}

// deleteCluster deletes the NodewrightCluster singleton, if any, and waits until it is gone.
func deleteCluster(t *testing.T) {
	t.Helper()
	err := env.Client.Delete(context.Background(), &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName}})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if apierrors.IsNotFound(env.Client.Get(context.Background(), clusterKey, &nwv1.NodewrightCluster{})) {
			return ""
		}
		return "the NodewrightCluster is still there"
	})
}

// start gives the test a namespace and, in it, runs the cluster spec controller for the
// ConfigMap "cluster-spec", alone. The NodewrightCluster is a singleton: the test starts
// without one, and when it ends the controller stops before the cluster is deleted.
func start(t *testing.T) types.NamespacedName {
	t.Helper()
	key, _ := startManager(t)
	return key
}

// startManager is start that also returns the manager, whose cache is the controller's.
func startManager(t *testing.T) (types.NamespacedName, manager.Manager) {
	t.Helper()
	key := types.NamespacedName{Namespace: env.Namespace(t), Name: "cluster-spec"}
	deleteCluster(t)
	t.Cleanup(func() { deleteCluster(t) })
	var m manager.Manager
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		m = mgr
		return (&clusterspec.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("test"), ConfigMap: key}).SetupWithManager(mgr)
	})
	return key, m
}

// write creates or updates the ConfigMap with spec.yaml text, and returns it as stored.
func write(t *testing.T, key types.NamespacedName, text string) *corev1.ConfigMap {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := env.Client.Get(ctx, key, cm)
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: map[string]string{clusterspec.Key: text}}
			return env.Client.Create(ctx, cm)
		}
		if err != nil {
			return err
		}
		cm.Data = map[string]string{clusterspec.Key: text}
		return env.Client.Update(ctx, cm)
	})
	if err != nil {
		t.Fatalf("writing the ConfigMap: %v", err)
	}
	return cm
}

// cluster reads the NodewrightCluster, or returns nil when there is none.
func cluster(t *testing.T) *nwv1.NodewrightCluster {
	t.Helper()
	c := &nwv1.NodewrightCluster{}
	err := env.Client.Get(context.Background(), clusterKey, c)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// stored is spec as the API server stores it: spec.management, which the chart's spec leaves to
// a person, as the CRD defaults it.
func stored(spec nwv1.NodewrightClusterSpec) nwv1.NodewrightClusterSpec {
	if spec.Management == "" {
		spec.Management = nwv1.ManagementObserve
	}
	return spec
}

// specIs waits until the cluster exists with spec want (as stored).
func specIs(t *testing.T, want nwv1.NodewrightClusterSpec) *nwv1.NodewrightCluster {
	t.Helper()
	want = stored(want)
	var c *nwv1.NodewrightCluster
	eventually(t, func() string {
		c = cluster(t)
		if c == nil {
			return "no NodewrightCluster"
		}
		if !reflect.DeepEqual(c.Spec, want) {
			return fmt.Sprintf("spec %+v, want %+v", c.Spec, want)
		}
		return ""
	})
	return c
}

// events lists the Events on cm of type and reason.
func events(t *testing.T, cm *corev1.ConfigMap, eventType, reason string) []corev1.Event {
	t.Helper()
	var list corev1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(cm.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.UID == cm.UID && ev.Type == eventType && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// warned waits for a Warning InvalidClusterSpec Event on cm that says every one of text.
func warned(t *testing.T, cm *corev1.ConfigMap, text ...string) {
	t.Helper()
	eventually(t, func() string {
		var seen []string
		for _, ev := range events(t, cm, corev1.EventTypeWarning, clusterspec.EventInvalid) {
			all := true
			for _, s := range text {
				all = all && strings.Contains(ev.Message, s)
			}
			if all {
				return ""
			}
			seen = append(seen, ev.Message)
		}
		return fmt.Sprintf("no Warning %s Event saying %q; seen %q", clusterspec.EventInvalid, text, seen)
	})
}

// appliedCount counts the Normal ClusterSpecApplied Events on cm (an Event repeated is
// counted, not written again).
func appliedCount(t *testing.T, cm *corev1.ConfigMap) int32 {
	t.Helper()
	var n int32
	for _, ev := range events(t, cm, corev1.EventTypeNormal, clusterspec.EventApplied) {
		n += max(ev.Count, 1)
	}
	return n
}

// owned is the set of field paths (as "spec.legacy.eventComponent") that manager owns in c
// through the operation.
func owned(t *testing.T, c *nwv1.NodewrightCluster, manager string, op metav1.ManagedFieldsOperationType) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			name, ok := strings.CutPrefix(k, "f:")
			if !ok {
				continue
			}
			path := strings.TrimPrefix(prefix+"."+name, ".")
			children, _ := v.(map[string]any)
			leaf := true
			for ck := range children {
				if strings.HasPrefix(ck, "f:") {
					leaf = false
				}
			}
			if leaf {
				out[path] = true
			}
			walk(path, children)
		}
	}
	for _, e := range c.ManagedFields {
		if e.Manager != manager || e.Operation != op || e.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(e.FieldsV1.Raw, &fields); err != nil {
			t.Fatal(err)
		}
		walk("", fields)
	}
	return out
}

var legacyFields = []string{
	"spec.legacy.configMapRef.namespace", "spec.legacy.configMapRef.name",
	"spec.legacy.daemonSetRef.namespace", "spec.legacy.daemonSetRef.name", "spec.legacy.eventComponent",
}

func TestTheConfigMapsSpecIsAppliedAndFollowed(t *testing.T) {
	key := start(t)
	cm := write(t, key, validSpec)

	c := specIs(t, parsedSpec)
	fields := owned(t, c, clusterspec.FieldManager, metav1.ManagedFieldsOperationApply)
	for _, f := range append(legacyFields, "spec.heartbeatStaleAfter") {
		if !fields[f] {
			t.Errorf("%s is not owned by %s through Apply; it owns %v", f, clusterspec.FieldManager, fields)
		}
	}
	// The management mode is a person's to switch (kubectl), never the chart's to put back.
	if fields["spec.management"] {
		t.Errorf("spec.management is owned by %s: applying the chart's spec would switch the mode back", clusterspec.FieldManager)
	}
	for _, e := range c.ManagedFields {
		if e.Manager != clusterspec.FieldManager {
			t.Errorf("fields managed by %s (%s) on a cluster only the ConfigMap wrote", e.Manager, e.Operation)
		}
	}
	eventually(t, func() string {
		if n := appliedCount(t, cm); n != 1 {
			return fmt.Sprintf("%d Normal %s Events on the ConfigMap, want 1", n, clusterspec.EventApplied)
		}
		return ""
	})

	// The ConfigMap changes: the cluster follows.
	write(t, key, strings.Replace(validSpec, "heartbeatStaleAfter: 30s\n", "heartbeatStaleAfter: 45s\nprofileRef:\n  name: site-a\n", 1))
	want := parsedSpec
	want.HeartbeatStaleAfter = metav1.Duration{Duration: 45 * time.Second}
	want.ProfileRef = &nwv1.ProfileReference{Name: "site-a"}
	c = specIs(t, want)
	if fields := owned(t, c, clusterspec.FieldManager, metav1.ManagedFieldsOperationApply); !fields["spec.profileRef.name"] {
		t.Errorf("spec.profileRef.name is not owned by %s; it owns %v", clusterspec.FieldManager, fields)
	}

	// A field it no longer sets is removed: it was the ConfigMap's.
	write(t, key, strings.Replace(validSpec, "heartbeatStaleAfter: 30s\n", "heartbeatStaleAfter: 45s\n", 1))
	want.ProfileRef = nil
	specIs(t, want)
	// Updating is not creating: the Normal Event is the creation's alone.
	if n := appliedCount(t, cm); n != 1 {
		t.Errorf("%d Normal %s Events on the ConfigMap after updates, want 1", n, clusterspec.EventApplied)
	}
}

func TestFieldsOfOthersAreLeftAndItsOwnPutBack(t *testing.T) {
	key := start(t)
	// No heartbeatStaleAfter: the CRD defaults it, and it is nobody's.
	text := strings.Replace(validSpec, "heartbeatStaleAfter: 30s\n", "", 1)
	write(t, key, text)
	want := parsedSpec // heartbeatStaleAfter as the CRD defaults it: 30s
	c := specIs(t, want)

	// Someone else sets an annotation, a field the ConfigMap does not set, and one it does.
	ctx := context.Background()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/owner":"site-team"}},
		"spec":{"heartbeatStaleAfter":"50s","profileRef":{"name":"by-hand"},"legacy":{"eventComponent":"by-hand"}}}`))
	if err := env.Client.Patch(ctx, c, patch, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	// The field the ConfigMap sets is put back; the others stay.
	want.HeartbeatStaleAfter = metav1.Duration{Duration: 50 * time.Second}
	want.ProfileRef = &nwv1.ProfileReference{Name: "by-hand"}
	c = specIs(t, want)
	if got := c.Annotations["example.com/owner"]; got != "site-team" {
		t.Errorf("annotation example.com/owner = %q, want site-team", got)
	}
	if fields := owned(t, c, "kubectl-edit", metav1.ManagedFieldsOperationUpdate); !fields["spec.heartbeatStaleAfter"] || !fields["spec.profileRef.name"] || fields["spec.legacy.eventComponent"] {
		t.Errorf("kubectl-edit owns %v; want heartbeatStaleAfter and profileRef, not legacy.eventComponent", fields)
	}

	// The ConfigMap changes again: what others set is still left alone.
	write(t, key, strings.Replace(text, "name: node-init-state", "name: node-init-state-2", 1))
	want.Legacy.ConfigMapRef.Name = "node-init-state-2"
	c = specIs(t, want)
	if got := c.Annotations["example.com/owner"]; got != "site-team" {
		t.Errorf("after the ConfigMap changed, annotation example.com/owner = %q, want site-team", got)
	}
}

func TestADeletedClusterIsAppliedAgain(t *testing.T) {
	key := start(t)
	cm := write(t, key, validSpec)
	first := specIs(t, parsedSpec)

	if err := env.Client.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		c := cluster(t)
		if c == nil || c.UID == first.UID {
			return "the NodewrightCluster was not created again"
		}
		if !reflect.DeepEqual(c.Spec, stored(parsedSpec)) {
			return fmt.Sprintf("created again with spec %+v, want %+v", c.Spec, stored(parsedSpec))
		}
		return ""
	})
	eventually(t, func() string {
		if n := appliedCount(t, cm); n != 2 {
			return fmt.Sprintf("%d Normal %s Events on the ConfigMap, want 2: one per creation", n, clusterspec.EventApplied)
		}
		return ""
	})
}

// TestAnInvalidSpecIsReportedAndChangesNothing: a spec that cannot be applied raises a
// Warning on the ConfigMap naming what is wrong, and leaves the cluster as it is.
func TestAnInvalidSpecIsReportedAndChangesNothing(t *testing.T) {
	key := start(t)
	cm := write(t, key, validSpec)
	before := specIs(t, parsedSpec)

	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"not YAML", "legacy: [configMapRef\n", []string{"spec.yaml: ", "yaml: line 1"}},
		{"a typo in a key", strings.Replace(validSpec, "configMapRef:", "configmapref:", 1), []string{"spec.yaml: ", `"legacy.configmapref"`}},
		{"no eventComponent", strings.Replace(validSpec, "  eventComponent: node-init\n", "", 1), []string{"spec.yaml: legacy.eventComponent is required"}},
		{"no spec.yaml", "", []string{"spec.yaml: empty"}},
		// Parse cannot tell; the CRD refuses it. Last: the refusal is retried.
		{"a threshold the CRD refuses", strings.Replace(validSpec, "30s", "2h", 1), []string{"heartbeatStaleAfter", "2h0m0s is not between 1s and 1h"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(t, key, tc.text)
			warned(t, cm, tc.want...)
			after := cluster(t)
			if after == nil || after.ResourceVersion != before.ResourceVersion || !reflect.DeepEqual(after.Spec, stored(parsedSpec)) {
				t.Errorf("the cluster changed: %+v", after)
			}
		})
	}
}

func TestDeletingTheConfigMapLeavesTheCluster(t *testing.T) {
	ctx := context.Background()
	key, mgr := startManager(t)
	cm := write(t, key, validSpec)
	c := specIs(t, parsedSpec)
	if err := env.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	// Until its cache has seen the deletion the controller applies what it last read; once it
	// has, and the reconciles that may have read the ConfigMap before are done, nothing can
	// put an edit back but a controller that applies with no ConfigMap.
	eventually(t, func() string {
		if err := mgr.GetCache().Get(ctx, key, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the controller's cache still reads the ConfigMap (%v)", err)
		}
		return ""
	})
	eventually(t, func() string {
		if n := testenv.ControllerMetric(t, "controller_runtime_active_workers", "clusterspec"); n != 0 {
			return fmt.Sprintf("%v reconciles still running", n)
		}
		return ""
	})
	// The edit wakes the controller: it stays once the controller has reconciled since.
	reconciled := testenv.ControllerMetric(t, "controller_runtime_reconcile_total", "clusterspec")
	edit := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"legacy":{"eventComponent":"by-hand"}}}`))
	if err := env.Client.Patch(ctx, c.DeepCopy(), edit, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatalf("editing the cluster with no ConfigMap: %v", err)
	}
	eventually(t, func() string {
		if testenv.ControllerMetric(t, "controller_runtime_reconcile_total", "clusterspec") == reconciled || testenv.ControllerMetric(t, "controller_runtime_active_workers", "clusterspec") != 0 {
			return "the controller has not reconciled since the edit"
		}
		return ""
	})
	if after := cluster(t); after == nil || after.UID != c.UID {
		t.Fatalf("the NodewrightCluster is gone with its ConfigMap: %+v", after)
	} else if after.Spec.Legacy.EventComponent != "by-hand" {
		t.Errorf("the edit did not stay with no ConfigMap: %+v", after.Spec)
	}
}

// TestARefusedSpecIsAppliedOnceItsProfileExists: admission refuses the spec while the
// EdgeProfile it names is missing (here a ValidatingAdmissionPolicy whose parameter is that
// profile plays the operator's webhook); creating the profile gets it applied at once, with
// the steady retry an hour away, so only the EdgeProfile watch can have done it.
func TestARefusedSpecIsAppliedOnceItsProfileExists(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: env.Namespace(t), Name: "cluster-spec"}
	deleteCluster(t)
	t.Cleanup(func() { deleteCluster(t) })

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "clusterspec-test-needs-profile"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: nwv1.GroupVersion.String(), Kind: "EdgeProfile"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{nwv1.GroupVersion.Group}, APIVersions: []string{"v1alpha1"},
						Resources: []string{"nodewrightclusters"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "site-a", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	profile := &nwv1.EdgeProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "site-a"},
		Spec: nwv1.EdgeProfileSpec{
			Version: "1.0.0", Topology: nwv1.TopologyTwoNodeTiebreaker, OS: nwv1.HostOSKairos,
			Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR},
			Network: nwv1.ProfileNetwork{BondInterface: "bond0", BondMode: "active-backup"},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	probe := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName}, Spec: parsedSpec}
	// admitted says whether a dry run of the cluster gets through admission: AlreadyExists
	// comes after admission.
	admitted := func() (bool, error) {
		err := env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err == nil || apierrors.IsAlreadyExists(err), err
	}
	// The API server sees a deletion a moment late: until it has let the policy go, the next
	// test's cluster would be refused. Without its profile the policy refuses everything, so
	// once the profile is gone, a dry run that gets through proves the policy is gone too
	// (with the profile still seen, it would get through either way).
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, profile)
		eventually(t, func() string {
			if ok, _ := admitted(); ok {
				return "the policy still sees the deleted EdgeProfile"
			}
			return ""
		})
		for _, obj := range []client.Object{binding, policy} {
			_ = env.Client.Delete(ctx, obj)
		}
		eventually(t, func() string {
			if ok, err := admitted(); !ok {
				return fmt.Sprintf("the deleted admission policy still refuses: %v", err)
			}
			return ""
		})
	})
	// The policy is in force once it refuses a dry run.
	eventually(t, func() string {
		if err := env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll); err == nil {
			return "the admission policy does not refuse yet"
		}
		return ""
	})

	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		return (&clusterspec.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("test"), ConfigMap: key,
			RetryRefused: time.Hour}).SetupWithManager(mgr)
	})
	cm := write(t, key, validSpec+"profileRef:\n  name: site-a\n")
	warned(t, cm, "applying NodewrightCluster nodewright", "no params found")
	if c := cluster(t); c != nil {
		t.Fatalf("the refused spec was applied: %+v", c.Spec)
	}

	if err := env.Client.Create(ctx, profile); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if c := cluster(t); c == nil || c.Spec.ProfileRef == nil || c.Spec.ProfileRef.Name != "site-a" {
			return fmt.Sprintf("no NodewrightCluster naming site-a after the profile was created: %+v", c)
		}
		return ""
	})
}
