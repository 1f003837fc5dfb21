package kubelite_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/kubelite"
)

// pki is a CA and a client certificate it signed, in PEM.
type pki struct{ ca, cert, key []byte }

func newPKI(t testing.TB) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "agent"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pki{
		ca:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// kubeconfigOf is a kubeconfig with one context, "agent", of cluster and user (the
// entries' fields, indented under cluster: and user:).
func kubeconfigOf(cluster, user string) string {
	return "apiVersion: v1\nkind: Config\ncurrent-context: agent\n" +
		"clusters:\n- name: site\n  cluster:\n" + indent(cluster) +
		"contexts:\n- name: agent\n  context:\n    cluster: site\n    user: agent\n" +
		"users:\n- name: agent\n  user:\n" + indent(user)
}

func indent(fields string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(fields), "\n") {
		if line != "" {
			b.WriteString("    " + line + "\n")
		}
	}
	if b.Len() == 0 {
		return "    {}\n"
	}
	return b.String()
}

func TestParseKubeconfig(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "pki", "ca.crt"), p.ca)
	write(t, filepath.Join(dir, "pki", "agent.crt"), p.cert)
	write(t, filepath.Join(dir, "pki", "agent.key"), p.key)
	write(t, filepath.Join(dir, "token"), []byte("file-token\n"))
	write(t, filepath.Join(dir, "empty-token"), []byte(" \n"))
	write(t, filepath.Join(dir, "not-pem"), []byte("not a certificate"))

	for _, tc := range []struct {
		name  string
		data  string
		check func(*kubelite.Config) string
		err   string
	}{
		{
			name: "certificates inline, base64",
			data: kubeconfigOf("server: https://127.0.0.1:6443\ncertificate-authority-data: "+b64(p.ca),
				"client-certificate-data: "+b64(p.cert)+"\nclient-key-data: "+b64(p.key)),
			check: func(c *kubelite.Config) string {
				if c.Host != "https://127.0.0.1:6443" || !bytes.Equal(c.CAData, p.ca) || !bytes.Equal(c.CertData, p.cert) || !bytes.Equal(c.KeyData, p.key) || c.Token != "" {
					return "the server, the CA, the certificate and the key as given"
				}
				return ""
			},
		},
		{
			name: "files relative to the kubeconfig's folder, a token file",
			data: kubeconfigOf("server: https://api.example:6443/prefix/\ncertificate-authority: pki/ca.crt\ntls-server-name: kubernetes",
				"client-certificate: pki/agent.crt\nclient-key: "+filepath.Join(dir, "pki", "agent.key")+"\ntokenFile: token"),
			check: func(c *kubelite.Config) string {
				if !bytes.Equal(c.CAData, p.ca) || !bytes.Equal(c.CertData, p.cert) || !bytes.Equal(c.KeyData, p.key) || c.ServerName != "kubernetes" {
					return "the files' contents and the server name"
				}
				if c.Token != "file-token" || c.TokenFile != filepath.Join(dir, "token") {
					return "the token read from the file, and the file kept to be read again"
				}
				return ""
			},
		},
		{
			name: "a token, and the data winning over a file",
			data: kubeconfigOf("server: https://127.0.0.1:6443\ncertificate-authority: missing.crt\ncertificate-authority-data: "+b64(p.ca)+"\nproxy-url: http://proxy:3128",
				"token: inline-token"),
			check: func(c *kubelite.Config) string {
				if c.Token != "inline-token" || c.TokenFile != "" || !bytes.Equal(c.CAData, p.ca) || c.ProxyURL != "http://proxy:3128" {
					return "the token, the CA's data (its file not read) and the proxy"
				}
				return ""
			},
		},
		{
			name: "insecure, no user",
			data: "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1\n    insecure-skip-tls-verify: true\ncontexts:\n- name: x\n  context:\n    cluster: c\n",
			check: func(c *kubelite.Config) string {
				if !c.Insecure || c.Token != "" || c.CertData != nil {
					return "insecure, no credentials"
				}
				return ""
			},
		},
		{name: "not YAML", data: "clusters: [", err: "not a kubeconfig"},
		{name: "a list where a map is", data: "clusters: {a: b}", err: "not a kubeconfig"},
		{name: "no current context", data: "clusters: []\n", err: "current-context is not set"},
		{name: "current context missing", data: "current-context: gone\n", err: `current-context "gone": no context of that name in contexts`},
		{name: "context without a body", data: "current-context: x\ncontexts:\n- name: x\n", err: `contexts["x"].context is missing`},
		{name: "context without a cluster", data: "current-context: x\ncontexts:\n- name: x\n  context:\n    user: u\n", err: `contexts["x"].context.cluster is not set`},
		{name: "cluster missing", data: "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n", err: `contexts["x"].context.cluster "c": no cluster of that name in clusters`},
		{name: "user missing", data: "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://a\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n", err: `contexts["x"].context.user "u": no user of that name in users`},
		{name: "no server", data: kubeconfigOf("certificate-authority-data: "+b64(p.ca), "token: x"), err: `clusters["site"].cluster.server is not set`},
		{name: "server of another scheme", data: kubeconfigOf("server: ftp://a", "token: x"), err: `clusters["site"].cluster.server: the server "ftp://a": the scheme must be https or http`},
		{name: "server not a URL", data: kubeconfigOf("server: 'https://a b:%zz'", "token: x"), err: `clusters["site"].cluster.server: the server "https://a b:%zz" is not a URL`},
		{name: "server without a host", data: kubeconfigOf("server: https://", "token: x"), err: `clusters["site"].cluster.server: the server "https://" names no host`},
		{name: "plain http with TLS settings", data: kubeconfigOf("server: http://a\ninsecure-skip-tls-verify: true", ""), err: `the server http://a is plain http`},
		{name: "a proxy of another scheme", data: kubeconfigOf("server: https://a\nproxy-url: ftp://p", ""), err: `clusters["site"].cluster.proxy-url: "ftp://p": the scheme must be http, https or socks5`},
		{name: "CA data not base64", data: kubeconfigOf("server: https://a\ncertificate-authority-data: '!!!'", ""), err: `clusters["site"].cluster.certificate-authority-data: not base64`},
		{name: "CA data not PEM", data: kubeconfigOf("server: https://a\ncertificate-authority-data: "+b64([]byte("junk")), ""), err: `clusters["site"].cluster.certificate-authority: no PEM certificate in it`},
		{name: "CA file missing", data: kubeconfigOf("server: https://a\ncertificate-authority: missing.crt", ""), err: `clusters["site"].cluster.certificate-authority: open ` + filepath.Join(dir, "missing.crt")},
		{name: "CA file not PEM", data: kubeconfigOf("server: https://a\ncertificate-authority: not-pem", ""), err: `clusters["site"].cluster.certificate-authority: no PEM certificate in it`},
		{name: "insecure with a CA", data: kubeconfigOf("server: https://a\ninsecure-skip-tls-verify: true\ncertificate-authority-data: "+b64(p.ca), ""), err: `clusters["site"].cluster: insecure-skip-tls-verify with a certificate authority`},
		{name: "insecure not a boolean", data: kubeconfigOf("server: https://a\ninsecure-skip-tls-verify: maybe", ""), err: `insecure-skip-tls-verify`},
		{name: "certificate without key", data: kubeconfigOf("server: https://a", "client-certificate-data: "+b64(p.cert)), err: `users["agent"].user: a client-certificate without a client-key`},
		{name: "key without certificate", data: kubeconfigOf("server: https://a", "client-key: pki/agent.key"), err: `users["agent"].user: a client-key without a client-certificate`},
		{name: "key data not base64", data: kubeconfigOf("server: https://a", "client-certificate-data: "+b64(p.cert)+"\nclient-key-data: x"), err: `users["agent"].user.client-key-data: not base64`},
		{name: "certificate and key that do not match", data: kubeconfigOf("server: https://a", "client-certificate-data: "+b64(p.ca)+"\nclient-key-data: "+b64(p.key)), err: `contexts["agent"].context: the client certificate and key: tls: private key does not match public key`},
		{name: "token file missing", data: kubeconfigOf("server: https://a", "tokenFile: nowhere"), err: `users["agent"].user.tokenFile: open ` + filepath.Join(dir, "nowhere")},
		{name: "token file empty", data: kubeconfigOf("server: https://a", "tokenFile: empty-token"), err: `users["agent"].user.tokenFile: ` + filepath.Join(dir, "empty-token") + ` is empty`},
		{name: "an exec plugin", data: kubeconfigOf("server: https://a", "exec:\n  command: aws"), err: `users["agent"].user.exec is not supported: give a client certificate, a token or a tokenFile`},
		{name: "an auth provider", data: kubeconfigOf("server: https://a", "auth-provider:\n  name: oidc"), err: `users["agent"].user.auth-provider is not supported`},
		{name: "basic authentication", data: kubeconfigOf("server: https://a", "username: admin\npassword: secret"), err: `users["agent"].user.username is not supported`},
		{name: "impersonation", data: kubeconfigOf("server: https://a", "token: x\nas: someone"), err: `users["agent"].user.as is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := kubelite.ParseKubeconfig([]byte(tc.data), dir)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v; want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(cfg); msg != "" {
				t.Errorf("%+v: want %s", cfg, msg)
			}
		})
	}
}

// TestLoadKubeconfigMerges: files listed as in $KUBECONFIG are merged, the first to set a
// value winning, each file's relative paths taken from its own folder; files that do not
// exist are skipped, but not all of them.
func TestLoadKubeconfigMerges(t *testing.T) {
	p := newPKI(t)
	first, second := t.TempDir(), t.TempDir()
	write(t, filepath.Join(second, "ca.crt"), p.ca)
	write(t, filepath.Join(first, "config"), []byte("current-context: agent\nusers:\n- name: agent\n  user:\n    token: first\n"))
	write(t, filepath.Join(second, "config"), []byte(kubeconfigOf("server: https://second:6443\ncertificate-authority: ca.crt", "token: second")+
		"- name: other\n  user:\n    token: other\n"))
	cfg, err := kubelite.LoadKubeconfig(filepath.Join(first, "config"), filepath.Join(first, "missing"), filepath.Join(second, "config"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://second:6443" || cfg.Token != "first" || !bytes.Equal(cfg.CAData, p.ca) {
		t.Errorf("merged: %+v; want the second file's server and CA (from its folder) and the first's token", cfg)
	}
	if cfg.Source != filepath.Join(first, "config")+":"+filepath.Join(second, "config") {
		t.Errorf("source %q", cfg.Source)
	}
	if _, err := kubelite.LoadKubeconfig(filepath.Join(first, "missing"), filepath.Join(second, "missing")); err == nil || !strings.Contains(err.Error(), "no kubeconfig: none of") {
		t.Errorf("no file: %v", err)
	}
	if _, err := kubelite.LoadKubeconfig(filepath.Join(first, "missing")); err == nil || !strings.Contains(err.Error(), "reading the kubeconfig: open") {
		t.Errorf("the one file missing: %v", err)
	}
	write(t, filepath.Join(first, "bad"), []byte("current-context: x\n"))
	if _, err := kubelite.LoadKubeconfig(filepath.Join(first, "bad")); err == nil || !strings.Contains(err.Error(), "kubeconfig "+filepath.Join(first, "bad")+": current-context") {
		t.Errorf("a bad file: %v; want its path named", err)
	}
}

// TestLoadOrder: --kubeconfig, then $KUBECONFIG, then the in-cluster service account, then
// ~/.kube/config.
func TestLoadOrder(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	flagFile, envFile, home := filepath.Join(dir, "flag"), filepath.Join(dir, "env"), filepath.Join(dir, "home")
	write(t, flagFile, []byte(kubeconfigOf("server: https://flag", "token: flag")))
	write(t, envFile, []byte(kubeconfigOf("server: https://env", "token: env")))
	write(t, filepath.Join(home, ".kube", "config"), []byte(kubeconfigOf("server: https://home", "token: home")))
	sa := filepath.Join(dir, "serviceaccount")
	write(t, filepath.Join(sa, "token"), []byte("in-cluster"))
	write(t, filepath.Join(sa, "ca.crt"), p.ca)
	t.Cleanup(kubelite.SetServiceAccountDir(sa))
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", envFile)
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")

	for _, step := range []struct {
		flag, want string
		before     func()
	}{
		{flag: flagFile, want: "https://flag"},
		{want: "https://env"},
		{want: "https://10.96.0.1:443", before: func() { t.Setenv("KUBECONFIG", "") }},
		{want: "https://home", before: func() { t.Setenv("KUBERNETES_SERVICE_PORT", "") }},
	} {
		if step.before != nil {
			step.before()
		}
		cfg, err := kubelite.Load(step.flag)
		if err != nil {
			t.Fatalf("want %s: %v", step.want, err)
		}
		if cfg.Host != step.want {
			t.Errorf("loaded %s (%s); want %s", cfg.Host, cfg.Source, step.want)
		}
	}
	t.Setenv("HOME", dir)
	if _, err := kubelite.Load(""); err == nil || !strings.Contains(err.Error(), "no kubeconfig: no --kubeconfig, no $KUBECONFIG, not in a cluster") {
		t.Errorf("nothing to load: %v", err)
	}
}

func TestInCluster(t *testing.T) {
	p := newPKI(t)
	sa := t.TempDir()
	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "6443")
	if _, err := kubelite.InClusterAt(sa); err == nil || !strings.Contains(err.Error(), "the service account's token: open") {
		t.Errorf("without a token: %v", err)
	}
	write(t, filepath.Join(sa, "token"), []byte("t0ken\n"))
	if _, err := kubelite.InClusterAt(sa); err == nil || !strings.Contains(err.Error(), "the cluster's CA: open") {
		t.Errorf("without a CA: %v", err)
	}
	write(t, filepath.Join(sa, "ca.crt"), []byte("junk"))
	if _, err := kubelite.InClusterAt(sa); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("with a CA that is not PEM: %v", err)
	}
	write(t, filepath.Join(sa, "ca.crt"), p.ca)
	cfg, err := kubelite.InClusterAt(sa)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://[fd00::1]:6443" || cfg.Token != "t0ken" || cfg.TokenFile != filepath.Join(sa, "token") || !bytes.Equal(cfg.CAData, p.ca) {
		t.Errorf("%+v", cfg)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := kubelite.InClusterAt(sa); !errors.Is(err, kubelite.ErrNotInCluster) {
		t.Errorf("out of a pod: %v", err)
	}
}

// FuzzParseKubeconfig: whatever the text, a clear error or a Config a client can be made of;
// never a panic.
func FuzzParseKubeconfig(f *testing.F) {
	p := newPKI(f)
	for _, seed := range []string{
		kubeconfigOf("server: https://127.0.0.1:6443\ncertificate-authority-data: "+b64(p.ca), "client-certificate-data: "+b64(p.cert)+"\nclient-key-data: "+b64(p.key)),
		kubeconfigOf("server: https://a:1/p\ninsecure-skip-tls-verify: true\ntls-server-name: k", "token: abc"),
		kubeconfigOf("server: http://a", "tokenFile: t"),
		kubeconfigOf("server: https://a\nproxy-url: socks5://p:1080", "exec:\n  command: x"),
		"current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\nclusters:\n- name: c\n  cluster:\n    server: a:443\n",
		"{}", "", "- a\n- b\n", "current-context: [1]\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	write(f, filepath.Join(dir, "t"), []byte("token"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := kubelite.ParseKubeconfig(data, dir)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if cfg.Host == "" {
			t.Fatalf("no server, no error: %+v", cfg)
		}
		if _, err := kubelite.New(cfg); err != nil {
			t.Fatalf("a Config that parsed, and no client of it: %v", err)
		}
	})
}
