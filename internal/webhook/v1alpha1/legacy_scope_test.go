package v1alpha1_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	webhookv1alpha1 "github.com/spectrocloud/nodewright/internal/webhook/v1alpha1"
)

// scopedWebhooks serves the package's admission webhooks as an operator started with
// --legacy-namespace=legacyNS serves them (webhookv1alpha1.Options.LegacyNamespace, which
// the operator sets from it), and has the API server call its NodewrightCluster validation
// in addition to the package's operator's until the test ends.
//
// The package's tests share one operator, started once with fixed options and reached at
// the one address the Env's webhook configurations name; a second operator would fight it
// for that address and for the configurations' CA bundle. This server listens elsewhere,
// with envtest's serving certificate, behind a configuration of its own: a request is
// admitted only if both admit it, so a refusal seen here is the scoped webhook's.
func scopedWebhooks(t *testing.T, legacyNS string) {
	t.Helper()
	addr := testenv.FreeAddr(t)
	host, portText, _ := strings.Cut(addr, ":")
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: host, Port: port, CertDir: env.Webhooks.LocalServingCertDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhookv1alpha1.Setup(mgr, webhookv1alpha1.Options{LegacyNamespace: legacyNS}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the scoped webhook server stopped: %v", err)
		}
	})

	url := fmt.Sprintf("https://%s/validate-nodewright-spectrocloud-com-v1alpha1-nodewrightcluster", addr)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "nodewright-test-legacy-scope"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "vnodewrightcluster-legacy-scope.test.nodewright.spectrocloud.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: env.Webhooks.LocalServingCAData},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{nwv1.GroupVersion.Group}, APIVersions: []string{nwv1.GroupVersion.Version}, Resources: []string{"nodewrightclusters"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := env.Client.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	// Registered after the server's cleanup, so run before it: the API server stops calling
	// the server before it goes away.
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), cfg); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the scoped webhook configuration: %v", err)
		}
	})
}

// noCluster deletes the NodewrightCluster singleton, if any, and waits until it is gone:
// other tests of the package create it too.
func noCluster(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Name: nwv1.NodewrightClusterName}
	if err := env.Client.Delete(ctx, &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, "the NodewrightCluster to be gone", func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, key, &nwv1.NodewrightCluster{}))
	})
}

// legacyIn is a NodewrightCluster whose ConfigMap and DaemonSet are in the given namespaces.
func legacyIn(cmNS, dsNS string) *nwv1.NodewrightCluster {
	return &nwv1.NodewrightCluster{
		ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{
			ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: cmNS, Name: "node-init-state"},
			DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: dsNS, Name: "node-init"},
			EventComponent: "node-init",
		}},
	}
}

func TestANodewrightClusterNamingLegacyObjectsOutsideTheLegacyNamespaceIsRefused(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	legacyNS, otherNS := env.Namespace(t), env.Namespace(t)
	alice := as(t, "alice")
	noCluster(t)
	t.Cleanup(func() { noCluster(t) })

	// Stored before the operator read only legacyNS: its legacy objects are elsewhere.
	if err := alice.Create(ctx, legacyIn(otherNS, otherNS)); err != nil {
		t.Fatalf("creating the cluster before the scope: %v", err)
	}
	scopedWebhooks(t, legacyNS)
	// edit changes the stored cluster with change, as a Go client does.
	edit := func(change func(*nwv1.NodewrightCluster), opts ...client.UpdateOption) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := &nwv1.NodewrightCluster{}
			if err := alice.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, c); err != nil {
				return err
			}
			change(c)
			return alice.Update(ctx, c, opts...)
		})
	}
	moveTo := func(ns string, opts ...client.UpdateOption) error {
		return edit(func(c *nwv1.NodewrightCluster) {
			c.Spec.Legacy.ConfigMapRef.Namespace, c.Spec.Legacy.DaemonSetRef.Namespace = ns, ns
		}, opts...)
	}
	// Moving the legacy objects out is refused once the API server calls the scoped server
	// (until then it fails the request, or admits it before it sees the configuration).
	const cmField, dsField = "spec.legacy.configMapRef.namespace", "spec.legacy.daemonSetRef.namespace"
	var err error
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		err = moveTo("kube-system", client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "denied the request") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("moving the legacy objects to kube-system was never refused; last: %v", err)
		}
	}
	refused(t, err, cmField+`: "kube-system" is not read by the operator`)
	if !strings.Contains(err.Error(), fmt.Sprintf("namespace %q", legacyNS)) {
		t.Errorf("the refusal %q does not name the legacy namespace %s", err, legacyNS)
	}

	// An object stored before stays editable while its legacy refs do not change.
	err = edit(func(c *nwv1.NodewrightCluster) {
		c.Spec.HeartbeatStaleAfter = metav1.Duration{Duration: 45 * time.Second}
	})
	if err != nil {
		t.Fatalf("an update leaving the legacy refs of a cluster stored before the scope: %v", err)
	}
	// Moving one ref, the other still out of scope, is refused; moving both is admitted.
	err = edit(func(c *nwv1.NodewrightCluster) { c.Spec.Legacy.ConfigMapRef.Namespace = legacyNS })
	refused(t, err, fmt.Sprintf("%s: %q is not read by the operator", dsField, otherNS))
	if err := moveTo(legacyNS); err != nil {
		t.Fatalf("moving the ConfigMap into the legacy namespace: %v", err)
	}
	noCluster(t)

	// Created naming another namespace: refused, naming the field that does.
	for _, tc := range []struct {
		cluster *nwv1.NodewrightCluster
		field   string
	}{
		{legacyIn(otherNS, legacyNS), cmField},
		{legacyIn(legacyNS, otherNS), dsField},
	} {
		err := alice.Create(ctx, tc.cluster)
		refused(t, err, fmt.Sprintf("%s: %q is not read by the operator", tc.field, otherNS))
		if !strings.Contains(err.Error(), fmt.Sprintf("namespace %q", legacyNS)) {
			t.Errorf("the refusal %q does not name the legacy namespace %s", err, legacyNS)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, &nwv1.NodewrightCluster{}); !apierrors.IsNotFound(err) {
			t.Fatalf("after the refusal, reading the cluster: %v; want NotFound", err)
		}
	}

	// Named in the legacy namespace: admitted.
	if err := alice.Create(ctx, legacyIn(legacyNS, legacyNS)); err != nil {
		t.Fatalf("a cluster whose legacy objects are in the legacy namespace: %v", err)
	}
	// And moving it out again is refused.
	refused(t, moveTo(otherNS), fmt.Sprintf("%s: %q is not read by the operator", cmField, otherNS))
}
