package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/multicluster-runtime/providers/kubeconfig"

	clusterinventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

const patience = 3 * time.Minute

// TestFleet runs a hub and two members, each its own kube-apiserver on one etcd: one member
// registered by a kubeconfig Secret (and again while it does not answer), one by a
// ClusterProfile, all with the member chart's read-only roles for the hub.
func TestFleet(t *testing.T) {
	hub, members := startFleet(t, 2)
	m1, m2 := members[0], members[1]
	ctx := context.Background()
	for _, m := range members {
		createCluster(t, m)
	}
	token1 := m1.hubToken(t, "hub-credential")
	secret := registerKubeconfig(t, hub, "site-a", m1, bearer(token1))
	cp := registerProfile(t, hub, "site-b", m2, m2.hubToken(t, "hub-credential"))

	for _, name := range []string{"site-a", profileSummary("site-b")} {
		waitSummary(t, hub.Client, name, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
			if s.Status.Phase != "MultiNode" || s.Status.Nodes.Ready != 2 || s.Status.Nodes.Total != 3 || s.Status.Management != "Observe" {
				return fmt.Sprintf("status %+v", s.Status)
			}
			if !meta.IsStatusConditionTrue(s.Status.Conditions, fleetv1alpha1.ConditionReachable) || s.Status.KubernetesVersion == "" {
				return fmt.Sprintf("not reachable or no version: %+v", s.Status)
			}
			return ""
		})
	}

	// A change on the member reaches the summary through the watch.
	setReadyNodes(t, m2, 3)
	waitSummary(t, hub.Client, profileSummary("site-b"), func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		if s.Status.Nodes.Ready != 3 {
			return fmt.Sprintf("nodes %+v", s.Status.Nodes)
		}
		return ""
	})

	// m1 stops answering: Reachable turns False, the summary stays; it comes back.
	m1.stop(t)
	waitSummary(t, hub.Client, "site-a", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable)
		if c == nil || c.Status != metav1.ConditionFalse || s.Status.Phase != "MultiNode" {
			return fmt.Sprintf("reachable %+v, phase %q", c, s.Status.Phase)
		}
		return ""
	})
	// A member registered while it does not answer has a summary that says so, and shows
	// nothing it did not read; once it answers, all of it.
	again := registerKubeconfig(t, hub, "site-a-again", m1, bearer(token1))
	waitSummary(t, hub.Client, "site-a-again", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != fleetv1alpha1.ReasonNotAnswering || s.Status.Phase != "" {
			return fmt.Sprintf("reachable %+v, phase %q", c, s.Status.Phase)
		}
		return ""
	})
	m1.start(t)
	for _, name := range []string{"site-a", "site-a-again"} {
		waitSummary(t, hub.Client, name, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
			if !meta.IsStatusConditionTrue(s.Status.Conditions, fleetv1alpha1.ConditionReachable) || s.Status.Phase != "MultiNode" {
				return fmt.Sprintf("phase %q, conditions %+v", s.Status.Phase, s.Status.Conditions)
			}
			return ""
		})
	}

	// Removing the registrations removes the summaries.
	if err := hub.Client.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := hub.Client.Delete(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if err := hub.Client.Delete(ctx, again); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{kubeconfigSummary("site-a"), profileSummary("site-b"), kubeconfigSummary("site-a-again")} {
		testenv.Eventually(t, patience, func() string {
			var s fleetv1alpha1.NodewrightClusterSummary
			if err := hub.Client.Get(ctx, types.NamespacedName{Name: name}, &s); err == nil {
				return name + " still exists"
			}
			return ""
		})
	}
}

// The hub's namespace (its kubeconfig Secrets and the Secret Reader's Secrets) and the
// inventory's (its ClusterProfiles).
const (
	hubNS       = "nodewright-fleet"
	inventoryNS = "fleet-inventory"
)

// startFleet starts an etcd, the hub's kube-apiserver and the members', each under its own
// etcd prefix, and the hub on its own API server; the hub's health checks run every 300ms.
func startFleet(t *testing.T, members int) (*apiServer, []*apiServer) {
	t.Helper()
	return startFleetWith(t, members, nil)
}

// startFleetWith is startFleet with the hub's options changed by configure.
func startFleetWith(t *testing.T, members int, configure func(*Options)) (*apiServer, []*apiServer) {
	t.Helper()
	root, bin := assets(t)
	etcd := startEtcd(t, bin)
	hub := startAPIServer(t, bin, etcd, "/hub", filepath.Join(root, "config", "crd", "fleet"), clusterProfileCRDs(t))
	ms := startMembers(t, root, bin, etcd, members)
	ctx := context.Background()
	for _, ns := range []string{hubNS, inventoryNS} {
		if err := hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{Namespace: hubNS, ClusterProfileNamespace: inventoryNS, MemberNamespace: memberNS,
		Health: HealthOptions{Interval: 300 * time.Millisecond, Timeout: 5 * time.Second, FailureThreshold: 2},
		// Each test runs a hub of its own in the one process: the controllers' names repeat.
		Manager: manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Controller: config.Controller{SkipNameValidation: ptr.To(true)}}}
	if configure != nil {
		configure(&opts)
	}
	mgr, err := New(ctx, hub.Admin, opts)
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return hub, ms
}

// createCluster creates the member's NodewrightCluster: MultiNode, 2 of 3 nodes ready, Observe.
func createCluster(t *testing.T, m *apiServer) {
	t.Helper()
	ctx := context.Background()
	nwc := &nodewrightv1alpha1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: "nodewright"},
		Spec: nodewrightv1alpha1.NodewrightClusterSpec{Legacy: nodewrightv1alpha1.LegacySource{
			ConfigMapRef:   nodewrightv1alpha1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-state"},
			DaemonSetRef:   nodewrightv1alpha1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-init"},
			EventComponent: "node-init"}}}
	if err := m.Client.Create(ctx, nwc); err != nil {
		t.Fatal(err)
	}
	nwc.Status.Phase = "MultiNode"
	nwc.Status.Nodes = nodewrightv1alpha1.NodeCounts{Ready: 2, Total: 3}
	nwc.Status.Management = nodewrightv1alpha1.ManagementMode("Observe")
	if err := m.Client.Status().Update(ctx, nwc); err != nil {
		t.Fatal(err)
	}
}

// setReadyNodes changes the member's NodewrightCluster's ready nodes.
func setReadyNodes(t *testing.T, m *apiServer, ready int32) {
	t.Helper()
	ctx := context.Background()
	var nwc nodewrightv1alpha1.NodewrightCluster
	if err := m.Client.Get(ctx, types.NamespacedName{Name: "nodewright"}, &nwc); err != nil {
		t.Fatal(err)
	}
	nwc.Status.Nodes.Ready = ready
	if err := m.Client.Status().Update(ctx, &nwc); err != nil {
		t.Fatal(err)
	}
}

func bearer(token string) *rest.Config { return &rest.Config{BearerToken: token} }

// registerKubeconfig registers the member on the hub through a kubeconfig Secret with the
// credentials of cfg.
func registerKubeconfig(t *testing.T, hub *apiServer, name string, m *apiServer, cfg *rest.Config) *corev1.Secret {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: name,
		Labels: map[string]string{kubeconfig.DefaultKubeconfigSecretLabel: "true"}},
		Data: map[string][]byte{"kubeconfig": m.kubeconfig(t, cfg)}}
	if err := hub.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return secret
}

// registerProfile registers the member on the hub through a ClusterProfile of the inventory
// served by the Secret Reader, with the token: the Secret Reader's Secret holds it and the
// member's server.
func registerProfile(t *testing.T, hub *apiServer, name string, m *apiServer, token string) *clusterinventoryv1alpha1.ClusterProfile {
	t.Helper()
	createSecretReaderSecret(t, hub, inventoryNS, name, token, m.Admin.Host, m.Admin.CAData)
	return createProfile(t, hub, inventoryNS, name, clientcmdv1.Cluster{Server: m.Admin.Host, CertificateAuthorityData: m.Admin.CAData})
}

// createSecretReaderSecret creates the Secret Reader's Secret of the ClusterProfile
// namespace/name: the token, for the server, whose certificate ca signs (none: the system's
// roots).
func createSecretReaderSecret(t *testing.T, hub *apiServer, namespace, name, token, server string, ca []byte) *corev1.Secret {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: SecretReaderSecretName(namespace, name)},
		Data: map[string][]byte{SecretReaderTokenKey: []byte(token), SecretReaderServerKey: []byte(server)}}
	if len(ca) > 0 {
		secret.Data[SecretReaderCAKey] = ca
	}
	if err := hub.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return secret
}

// createProfile creates the ClusterProfile namespace/name whose Secret Reader access is cluster.
func createProfile(t *testing.T, hub *apiServer, namespace, name string, cluster clientcmdv1.Cluster) *clusterinventoryv1alpha1.ClusterProfile {
	t.Helper()
	ctx := context.Background()
	cp := &clusterinventoryv1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: clusterinventoryv1alpha1.ClusterProfileSpec{ClusterManager: clusterinventoryv1alpha1.ClusterManager{Name: "test"}}}
	if err := hub.Client.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	cp.Status.AccessProviders = []clusterinventoryv1alpha1.AccessProvider{{Name: SecretReaderProvider, Cluster: cluster}}
	if err := hub.Client.Status().Update(ctx, cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// kubeconfigSummary and profileSummary are the summary names of a kubeconfig Secret's member
// and of an inventory ClusterProfile's.
func kubeconfigSummary(secret string) string {
	return SummaryName(fleetv1alpha1.Registration{Source: fleetv1alpha1.FromKubeconfigSecret, Namespace: hubNS, Name: secret})
}

func profileSummary(name string) string {
	return SummaryName(fleetv1alpha1.Registration{Source: fleetv1alpha1.FromClusterProfile, Namespace: inventoryNS, Name: name})
}

// waitSummary waits until check finds the summary as it wants it. name is the summary's
// name, or a kubeconfig Secret's name alone (no dot), as most tests register members.
func waitSummary(t *testing.T, hub client.Client, name string, check func(*fleetv1alpha1.NodewrightClusterSummary) string) {
	t.Helper()
	if !strings.Contains(name, ".") {
		name = kubeconfigSummary(name)
	}
	testenv.Eventually(t, patience, func() string {
		var s fleetv1alpha1.NodewrightClusterSummary
		if err := hub.Get(context.Background(), types.NamespacedName{Name: name}, &s); err != nil {
			return err.Error()
		}
		if msg := check(&s); msg != "" {
			return name + ": " + msg
		}
		return ""
	})
}

// TestTheHubAnswersItsProbes: the chart probes /healthz and /readyz; the hub answers both, ready
// once its cache has synced (a hub without them would never be Ready, and be restarted).
func TestTheHubAnswersItsProbes(t *testing.T) {
	probes := testenv.FreeAddr(t)
	startFleetWith(t, 0, func(o *Options) { o.Manager.HealthProbeBindAddress = probes })
	for _, path := range []string{"/healthz", "/readyz"} {
		testenv.Eventually(t, 2*time.Minute, func() string {
			res, err := http.Get("http://" + probes + path)
			if err != nil {
				return err.Error()
			}
			_ = res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return fmt.Sprintf("%s: %s", path, res.Status)
			}
			return ""
		})
	}
}

// TestAnUnreadMembersSummarySaysWhetherItAnswers: notRead, the summary of a member whose
// objects are not read yet, on the hub's real API server with the Checker's verdicts set by
// hand. A new summary of a member that answers is not written (the start-up's writes stay two
// a member); one that does not answer is said so; once it answers again, and a refused
// registration's once its member answers, the summary says so while the objects still cannot
// be read. The read's error is returned each time.
func TestAnUnreadMembersSummarySaysWhetherItAnswers(t *testing.T) {
	root, bin := assets(t)
	hub := startAPIServer(t, bin, startEtcd(t, bin), "/hub", filepath.Join(root, "config", "crd", "fleet"))
	ctx := context.Background()
	checker := NewChecker(HealthOptions{Interval: time.Hour})
	r := &SummaryReconciler{Hub: hub.Client, Checker: checker}
	verdict := func(h Health) {
		checker.mu.Lock()
		defer checker.mu.Unlock()
		checker.members["m"] = &memberHealth{name: "m", ctx: ctx, index: -1, health: h}
	}
	newSummary := func(name string, conds ...metav1.Condition) *fleetv1alpha1.NodewrightClusterSummary {
		t.Helper()
		s := &fleetv1alpha1.NodewrightClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: fleetv1alpha1.NodewrightClusterSummarySpec{Registration: fleetv1alpha1.Registration{Source: fleetv1alpha1.FromKubeconfigSecret, Namespace: hubNS, Name: name}}}
		if err := hub.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		if len(conds) > 0 {
			s.Status.Conditions = conds
			if err := hub.Client.Status().Update(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	readErr := errors.New("the member's NodewrightClusters: forbidden")
	notRead := func(s *fleetv1alpha1.NodewrightClusterSummary) (*metav1.Condition, string) {
		t.Helper()
		if err := r.notRead(ctx, s, "m", readErr); !errors.Is(err, readErr) {
			t.Fatalf("notRead returned %v; want the read's error", err)
		}
		var got fleetv1alpha1.NodewrightClusterSummary
		if err := hub.Client.Get(ctx, types.NamespacedName{Name: s.Name}, &got); err != nil {
			t.Fatal(err)
		}
		*s = got
		return meta.FindStatusCondition(got.Status.Conditions, fleetv1alpha1.ConditionReachable), got.ResourceVersion
	}

	fresh := newSummary("fresh")
	verdict(answering)
	if c, rv := notRead(fresh); c != nil || rv != fresh.ResourceVersion {
		t.Errorf("a new summary of a member that answers, not read: Reachable %+v, resourceVersion %s (was %s); want no write", c, rv, fresh.ResourceVersion)
	}
	verdict(Health{Known: true, Reason: fleetv1alpha1.ReasonNotAnswering, Message: "The member's API server does not answer"})
	if c, _ := notRead(fresh); c == nil || c.Status != metav1.ConditionFalse || c.Reason != fleetv1alpha1.ReasonNotAnswering {
		t.Errorf("a member that does not answer, not read: Reachable %+v; want False, NotAnswering", c)
	}
	verdict(answering)
	if c, _ := notRead(fresh); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("a member that answers again, still not read: Reachable %+v; want True", c)
	}
	refused := newSummary("refused", metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionFalse,
		Reason: fleetv1alpha1.ReasonRegistrationRefused, Message: "refused", LastTransitionTime: metav1.Now()})
	if c, _ := notRead(refused); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("a refused registration's member, engaged and answering, not read: Reachable %+v; want True", c)
	}
}
