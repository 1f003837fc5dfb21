package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/linstorgate"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/webhook/certs"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// servingCertificate writes a certificate for 127.0.0.1 and its key into dir.
func servingCertificate(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	b, err := certs.Bundle{}.Renew(time.Now(), certs.Subject{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, certs.DefaultLifetimes)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, b.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, b.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func build(t *testing.T) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "nodewright-linstor-gate")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the gate: %v\n%s", err, out)
	}
	return binary
}

// TestRefusesBadFlags: without a LINSTOR URL, a certificate or a valid ServiceAccount, the gate
// does not start, and says which flag.
func TestRefusesBadFlags(t *testing.T) {
	binary := build(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--linstor-url: empty"},
		{[]string{"--linstor-url=https://linstor:3371"}, "--tls-cert-file, --tls-key-file"},
		{[]string{"--linstor-url=http://linstor:3370", "--linstor-client-secret=piraeus-datastore/linstor-client-tls"}, "https"},
		{[]string{"--linstor-url=https://linstor:3371", "--operator-serviceaccount=nodewright-operator"}, "--operator-serviceaccount"},
	} {
		out, err := exec.Command(binary, c.args...).CombinedOutput()
		if err == nil {
			t.Errorf("%v: the gate started:\n%s", c.args, out)
			continue
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%v: the refusal does not say %q:\n%s", c.args, c.want, out)
		}
	}
}

// TestServes: the binary, with its flags, serves its probes and refuses a request without the
// operator's token, recording the refusal on standard output.
func TestServes(t *testing.T) {
	binary := build(t)
	sim := linstorsim.Start(t, linstorsim.Options{})
	dir := t.TempDir()
	cert, key := servingCertificate(t, dir)
	listen, probes := testenv.FreeAddr(t), testenv.FreeAddr(t)
	log := &testenv.SyncBuffer{}
	cmd := exec.Command(binary, "--kubeconfig", env.Kubeconfig(t), "--listen", listen, "--health-probe-bind-address", probes,
		"--tls-cert-file", cert, "--tls-key-file", key, "--linstor-url", sim.URL, "--operator-serviceaccount", "nodewright-system/nodewright-operator",
		"--audit-dir", filepath.Join(dir, "audit"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the gate's output:\n%s", log)
		}
	})
	testenv.Eventually(t, 2*time.Minute, func() string {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err != nil {
			return err.Error()
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.Status
		}
		return ""
	})
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test checks the refusal, not the certificate
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+listen+"/v1/controller/version", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var r linstorgate.Refusal
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusUnauthorized || r.Rule != linstorgate.ReasonUnauthenticated {
		t.Fatalf("a request without a token: %d %+v (%v)", resp.StatusCode, r, err)
	}
	testenv.Eventually(t, 2*time.Minute, func() string {
		if !strings.Contains(log.String(), `"to":"Refused"`) {
			return "the refusal is not on standard output"
		}
		return ""
	})
}
