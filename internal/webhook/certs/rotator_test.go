package certs_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/webhook/certs"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

func rotator(t *testing.T, ns string) *certs.Rotator {
	t.Helper()
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &certs.Rotator{Client: c, Reader: c, Watcher: c,
		Secret:             types.NamespacedName{Namespace: ns, Name: "webhook-cert"},
		Subject:            certs.Subject{IPs: []net.IP{net.ParseIP("127.0.0.1")}},
		ValidatingWebhooks: []string{"certs-test-" + ns}, MutatingWebhooks: []string{"certs-test-" + ns}}
}

// configured is the CA bundle the validating and mutating configurations trust, when both
// agree.
func configured(t *testing.T, name string) []byte {
	t.Helper()
	ctx := context.Background()
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, v); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, m.Webhooks[0].ClientConfig.CABundle) {
		return nil
	}
	return v.Webhooks[0].ClientConfig.CABundle
}

// trusted: the certificate r serves verifies against bundle.
func trusted(t *testing.T, r *certs.Rotator, bundle []byte) bool {
	t.Helper()
	cert, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool})
	return err == nil
}

func TestReplicasAgreeOnTheCAWhenTheSecretIsReplaced(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	name := "certs-test-" + ns
	hook := func() admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/x")}
	}
	none := admissionregistrationv1.SideEffectClassNone
	if err := env.Client.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "v.certs.test", ClientConfig: hook(), SideEffects: &none,
			AdmissionReviewVersions: []string{"v1"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "m.certs.test", ClientConfig: hook(), SideEffects: &none,
			AdmissionReviewVersions: []string{"v1"}}}}); err != nil {
		t.Fatal(err)
	}

	// Two replicas start: the first creates the Secret and writes its CA, the second serves
	// the same.
	a, b := rotator(t, ns), rotator(t, ns)
	if err := a.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	first := configured(t, name)
	if len(first) == 0 || !trusted(t, a, first) || !trusted(t, b, first) {
		t.Fatal("the replicas' certificates are not trusted by the configured CA bundle")
	}
	if a.Injected(nil) != nil {
		t.Fatal("not ready although the CA bundle is written")
	}
	done := make(chan error, 2)
	go func() { done <- a.Start(ctx) }()
	go func() { done <- b.Start(ctx) }()

	// Someone deletes the Secret: the replicas make one new CA between them, write it into
	// the configurations, and both serve certificates it signed.
	if err := env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-cert"}}); err != nil {
		t.Fatal(err)
	}
	var second []byte
	deadline := time.Now().Add(2 * time.Minute)
	for {
		secret := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webhook-cert"}, secret); err == nil {
			second = secret.Data[certs.KeyCABundle]
			if !bytes.Equal(second, first) && bytes.Equal(configured(t, name), second) && trusted(t, a, second) && trusted(t, b, second) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the replicas did not agree on the new CA within 2m")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Asked to write the bundle back (as the leader's controller is when the configurations
	// change), a replica writes what the Secret holds.
	if err := a.Inject(ctx); err != nil {
		t.Fatal(err)
	}
	if got := configured(t, name); !bytes.Equal(got, second) {
		t.Fatal("a replica wrote back a CA the Secret no longer holds")
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
