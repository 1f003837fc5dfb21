// Package linstorgatetest runs the LINSTOR gate for a test, as a real HTTPS server in front of
// a LINSTOR controller (test/site/linstorsim), on a real API server: the gate reviews the
// operator's token with a TokenReview, reads LINSTOR's client Secret and the Nodes from the
// API server, and keeps its audit trail in a folder the test reads.
package linstorgatetest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/linstorgate"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/webhook/certs"
)

// OperatorServiceAccount is the name of the operator's ServiceAccount in the gate's tests.
const OperatorServiceAccount = "nodewright-operator"

// Options say what the gate forwards to.
type Options struct {
	// URL is LINSTOR's base URL (the stand-in's).
	URL string
	// ClientSecret, when set, is the data of LINSTOR's client Secret (the stand-in's
	// ClientSecret()): the test writes it into the API server, and the gate reads it there.
	ClientSecret map[string][]byte
	// RegisterNodes turns node registration on (--register-nodes).
	RegisterNodes bool
}

// Gate is a running gate and the operator's identity for it.
type Gate struct {
	// URL is the gate's (https://127.0.0.1:port).
	URL string
	// CA is the PEM of the CA of the gate's serving certificate: what the operator trusts.
	CA []byte
	// Namespace holds the operator's ServiceAccount and pod, and the client Secret.
	Namespace string
	// TokenFile holds the operator's token for the gate: its ServiceAccount's, bound to its
	// pod, for the gate's audience, as the kubelet projects it.
	TokenFile string
	// AuditDir holds the gate's audit trail, whose checkpoints AuditKey signs.
	AuditDir string
	AuditKey ed25519.PublicKey
	// Options are the gate's flags; Handler its handler.
	Options linstorgate.Options
	Handler *linstorgate.Gate

	env *testenv.Env
	pod *corev1.Pod
}

// Start runs a gate for the test's life, in a namespace of its own.
func Start(t testing.TB, env *testenv.Env, o Options) *Gate {
	t.Helper()
	ctx := context.Background()
	ns := env.Namespace(t)
	g := &Gate{Namespace: ns, env: env}
	kube := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: OperatorServiceAccount}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The operator's pod: the API server binds a token to it, as to the projected token of
	// the Deployment's pods. No kubelet runs it.
	pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nodewright-operator-0"},
		Spec: corev1.PodSpec{ServiceAccountName: OperatorServiceAccount, NodeName: "gate-test",
			Containers: []corev1.Container{{Name: "operator", Image: "registry.example.com/nodewright-operator:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.pod = pod
	dir := t.TempDir()
	g.TokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(g.TokenFile, []byte(g.Token(t, OperatorServiceAccount, linstorgate.DefaultAudience, true)), 0o600); err != nil {
		t.Fatal(err)
	}

	bundle, err := certs.Bundle{}.Renew(time.Now(), certs.Subject{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, certs.DefaultLifetimes)
	if err != nil {
		t.Fatal(err)
	}
	g.CA = bundle.CACert
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	private, public, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if g.AuditKey, err = audit.ParsePublicKey(public); err != nil {
		t.Fatal(err)
	}
	g.AuditDir = filepath.Join(dir, "audit")
	g.Options = linstorgate.Options{
		Listen: "127.0.0.1:0", ProbeAddr: "127.0.0.1:0",
		TLSCertFile: write("tls.crt", bundle.Cert), TLSKeyFile: write("tls.key", bundle.Key),
		LINSTORURL: o.URL, RequestTimeout: 30 * time.Second,
		Operator: ns + "/" + OperatorServiceAccount, Audience: linstorgate.DefaultAudience,
		RegisterNodes: o.RegisterNodes,
		AuditDir:      g.AuditDir, AuditKeyFile: write("audit.key", private),
	}
	if o.ClientSecret != nil {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "linstor-client-tls"}, Type: corev1.SecretTypeTLS, Data: o.ClientSecret}
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		g.Options.LINSTORClientSecret = ns + "/" + secret.Name
	}
	log := ctrl.Log.WithName("linstor-gate")
	handler, trail, err := linstorgate.New(env.Config, g.Options, log)
	if err != nil {
		t.Fatal(err)
	}
	g.Handler = handler
	ln, probes, err := g.Options.Listeners()
	if err != nil {
		t.Fatal(err)
	}
	g.URL = "https://" + ln.Addr().String()
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- linstorgate.Serve(serveCtx, handler, g.Options, ln, probes) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the LINSTOR gate: %v", err)
		}
		if err := trail.Close(); err != nil {
			t.Errorf("closing the gate's audit trail: %v", err)
		}
	})
	return g
}

// Config is the operator's LINSTOR configuration: the gate's URL, its CA, and the token.
func (g *Gate) Config() linstor.Config {
	return linstor.Config{URL: g.URL, CA: g.CA, TokenFile: g.TokenFile}
}

// Token is a token of ServiceAccount sa in the gate's namespace (made when missing) for
// audience (empty: the API server's), bound to the operator's pod when bound.
func (g *Gate) Token(t testing.TB, sa, audience string, bound bool) string {
	t.Helper()
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(g.env.Config)
	if _, err := kube.CoreV1().ServiceAccounts(g.Namespace).Get(ctx, sa, metav1.GetOptions{}); err != nil {
		if _, err := kube.CoreV1().ServiceAccounts(g.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if audience != "" {
		req.Spec.Audiences = []string{audience}
	}
	if bound {
		pod := g.pod
		if sa != OperatorServiceAccount {
			p, err := kube.CoreV1().Pods(g.Namespace).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-"},
				Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: "gate-test",
					Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/other:test"}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod = p
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := kube.CoreV1().ServiceAccounts(g.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of %s/%s: %v", g.Namespace, sa, err)
	}
	return tr.Status.Token
}

// Records reads the gate's audit trail, after verifying it (chain and signatures) with the
// gate's key; it fails the test if it does not verify.
func (g *Gate) Records(t testing.TB) []audit.Record {
	t.Helper()
	files, err := audit.ChainFiles(g.AuditDir)
	if err != nil {
		t.Fatal(err)
	}
	report, err := audit.VerifyFiles(audit.VerifyOptions{PublicKeys: []ed25519.PublicKey{g.AuditKey}}, files...)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK {
		t.Fatalf("the gate's audit trail does not verify: %v", report.Problems)
	}
	var out []audit.Record
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			e, err := audit.ParseLine(line)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if e.Record != nil {
				out = append(out, *e.Record)
			}
		}
	}
	return out
}
