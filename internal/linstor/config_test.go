package linstor_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	secret := &linstor.SecretRef{Namespace: linstor.DefaultNamespace, Name: linstor.DefaultClientSecret}
	pemCA := []byte("-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n")
	cases := []struct {
		name  string
		cfg   linstor.Config
		field string
		why   string
	}{
		{"no url", linstor.Config{}, "url", "empty"},
		{"not a url", linstor.Config{URL: "http://[::1"}, "url", "not a URL"},
		{"scheme", linstor.Config{URL: "linstor://host:3370"}, "url", "http or https"},
		{"no host", linstor.Config{URL: "https://:3371"}, "url", "no host"},
		{"no port", linstor.Config{URL: "https://linstor-controller.piraeus-datastore.svc"}, "url", "no port"},
		{"path", linstor.Config{URL: "https://h:3371/v1"}, "url", "path"},
		{"credentials", linstor.Config{URL: "https://u:p@h:3371"}, "url", "credentials"},
		{"certificates over http", linstor.Config{URL: "http://h:3370", CA: pemCA}, "url", "not https"},
		{"cert without key", linstor.Config{URL: "https://h:3371", ClientCert: pemCA}, "clientKey", "both or neither"},
		{"key without cert", linstor.Config{URL: "https://h:3371", ClientKey: pemCA}, "clientCert", "both or neither"},
		{"ca not pem", linstor.Config{URL: "https://h:3371", CA: []byte("ca")}, "ca", "no PEM certificate"},
		{"pair not a pair", linstor.Config{URL: "https://h:3371", ClientCert: pemCA, ClientKey: []byte("k")}, "clientCert", "not a certificate and key pair"},
		{"secret without name", linstor.Config{URL: linstor.DefaultURL, ClientSecret: &linstor.SecretRef{Namespace: "ns"}}, "clientSecret.name", "empty"},
		{"secret without namespace", linstor.Config{URL: linstor.DefaultURL, ClientSecret: &linstor.SecretRef{Name: "s"}}, "clientSecret.namespace", "empty"},
		{"secret over http", linstor.Config{URL: "http://h:3370", ClientSecret: secret}, "clientSecret", "https"},
		{"secret and certificates", linstor.Config{URL: linstor.DefaultURL, ClientSecret: secret, CA: pemCA}, "clientSecret", "not both"},
		{"negative timeout", linstor.Config{URL: linstor.DefaultURL, RequestTimeout: -1}, "requestTimeout", "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			var ce *linstor.ConfigError
			if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(ce.Reason, c.why) {
				t.Fatalf("Validate: %v, want a ConfigError on %s saying %q", err, c.field, c.why)
			}
			if _, err := linstor.New(c.cfg); err == nil {
				t.Fatal("New took a configuration Validate refuses")
			}
		})
	}
	for _, ok := range []linstor.Config{
		{URL: linstor.DefaultURL},
		{URL: "http://linstor-controller.piraeus-datastore.svc:3370"},
		{URL: "https://[fd00::1]:3371/"},
		{URL: linstor.DefaultURL, ClientSecret: secret},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// A named Secret must be read before the client is made, and the Secret's errors name its
// key.
func TestTheClientSecretIsPiraeus(t *testing.T) {
	ref := &linstor.SecretRef{Namespace: linstor.DefaultNamespace, Name: linstor.DefaultClientSecret}
	cfg := linstor.Config{URL: linstor.DefaultURL, ClientSecret: ref}
	if _, err := linstor.New(cfg); err == nil || !strings.Contains(err.Error(), "not read yet") {
		t.Fatalf("New with an unread Secret: %v", err)
	}
	sim := linstorsim.Start(t, linstorsim.Options{TLS: true})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name},
		Type:       corev1.SecretTypeTLS,
		Data:       sim.ClientSecret(),
	}
	missing := secret.DeepCopy()
	delete(missing.Data, "ca.crt")
	delete(missing.Data, "tls.key")
	if _, err := cfg.WithSecret(missing); err == nil || !strings.Contains(err.Error(), "tls.key, ca.crt") || !strings.Contains(err.Error(), "piraeus-datastore/linstor-client-tls") {
		t.Fatalf("a Secret without tls.key and ca.crt: %v", err)
	}
	other := secret.DeepCopy()
	other.Name = "other"
	if _, err := cfg.WithSecret(other); err == nil || !strings.Contains(err.Error(), "not the one named") {
		t.Fatalf("another Secret: %v", err)
	}
	broken := secret.DeepCopy()
	broken.Data["ca.crt"] = []byte("not pem")
	if _, err := cfg.WithSecret(broken); err == nil || !strings.Contains(err.Error(), "linstor-client-tls: ca.crt") {
		t.Fatalf("a Secret whose ca.crt is not PEM: %v", err)
	}

	// Over TLS, with the client certificate, against the stand-in's HTTPS.
	cfg.URL = sim.URL
	filled, err := cfg.WithSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, filled).Version(ctxFor(t)); err != nil {
		t.Fatalf("over TLS with the client Secret: %v", err)
	}
	// Without the client certificate the controller refuses the handshake.
	if _, err := newClient(t, linstor.Config{URL: sim.URL, CA: secret.Data["ca.crt"]}).Version(ctxFor(t)); err == nil {
		t.Fatal("the controller took a client without a certificate")
	}
	// Without the CA the client does not trust the controller.
	if _, err := newClient(t, linstor.Config{URL: sim.URL, ClientCert: secret.Data["tls.crt"], ClientKey: secret.Data["tls.key"]}).Version(ctxFor(t)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a controller certificate from an unknown CA: %v", err)
	}
}

// golinstor reads LS_* environment variables; the configuration overrides them.
func TestTheEnvironmentDoesNotConfigure(t *testing.T) {
	t.Setenv("LS_CONTROLLERS", "http://127.0.0.1:1")
	s := newSite(t, linstorsim.Options{})
	if _, err := s.client.Version(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
}
