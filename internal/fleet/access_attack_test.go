package fleet

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterinventoryv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// trap is a server of the attacker's: it records every connection made to it and the
// Authorization header of every request.
type trap struct {
	URL string
	// CA is the PEM of the certificate its TLS server presents (nil for a plain listener).
	CA []byte

	mu          sync.Mutex
	connections int
	auth        []string
}

// startTLSTrap runs a TLS server that answers every request 200 (or redirects it to
// redirect, when set).
func startTLSTrap(t *testing.T, redirect string) *trap {
	t.Helper()
	tr := &trap{}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.auth = append(tr.auth, r.Header.Get("Authorization"))
		tr.mu.Unlock()
		if redirect != "" {
			http.Redirect(w, r, redirect+r.URL.RequestURI(), http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	}))
	s.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			tr.mu.Lock()
			tr.connections++
			tr.mu.Unlock()
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	tr.URL = s.URL
	tr.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return tr
}

// startListenerTrap accepts TCP connections, records them and closes them: a proxy, or a
// plain HTTP server, of the attacker's.
func startListenerTrap(t *testing.T) *trap {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	tr := &trap{URL: "http://" + l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tr.mu.Lock()
			tr.connections++
			tr.mu.Unlock()
			_ = c.Close()
		}
	}()
	return tr
}

// contacted says what reached the trap, "" when nothing did.
func (tr *trap) contacted() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.connections == 0 && len(tr.auth) == 0 {
		return ""
	}
	return fmt.Sprintf("%s was contacted: %d connections, Authorization headers %q", tr.URL, tr.connections, tr.auth)
}

// refusedWith checks a summary's Reachable False with the reason and a message naming each
// of words.
func refusedWith(reason string, words ...string) func(*fleetv1alpha1.NodewrightClusterSummary) string {
	return func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
			return fmt.Sprintf("Reachable %+v; want False %s", c, reason)
		}
		for _, w := range words {
			if !strings.Contains(c.Message, w) {
				return fmt.Sprintf("the message %q does not say %q", c.Message, w)
			}
		}
		return ""
	}
}

// waitUntouched is waitSummary that fails at once when any trap was contacted.
func waitUntouched(t *testing.T, hub client.Client, name string, traps []*trap, check func(*fleetv1alpha1.NodewrightClusterSummary) string) {
	t.Helper()
	waitSummary(t, hub, name, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		for _, tr := range traps {
			if msg := tr.contacted(); msg != "" {
				t.Fatal(msg)
			}
		}
		return check(s)
	})
}

// TestClusterProfileAttacks tries the attack the review proved (a ClusterProfile of another
// namespace, named as a member, pointing at a TLS server of the attacker's, got that member's
// token within 6 s) and what else whoever writes ClusterProfiles could try: a profile whose
// token Secret is not there, one that asks for unverified TLS, and the member's own profile
// repointed at the attacker's server. The attacker's server is never contacted, and each
// inventory profile's summary says why it was not engaged. A kubeconfig Secret named as the
// member's ClusterProfile gets a summary of its own: summaries are named by their source.
func TestClusterProfileAttacks(t *testing.T) {
	ctx := context.Background()
	// No inventory namespace, no hub: every namespace is not a default.
	if _, err := New(ctx, &rest.Config{Host: "https://127.0.0.1:1"}, Options{Namespace: hubNS}); err == nil || !strings.Contains(err.Error(), "--clusterprofile-namespace") {
		t.Errorf("a hub without the ClusterProfiles' namespace: %v; want an error naming --clusterprofile-namespace", err)
	}

	hub, members := startFleet(t, 2)
	m1, m2 := members[0], members[1]
	createCluster(t, m1)
	createCluster(t, m2)
	setReadyNodes(t, m2, 1)
	attacker := startTLSTrap(t, "")
	traps := []*trap{attacker}

	// The member prod, from the inventory; a kubeconfig Secret of the same name, for m2.
	registerProfile(t, hub, "prod", m1, m1.hubToken(t, "hub-credential"))
	registerKubeconfig(t, hub, "prod", m2, bearer(m2.hubToken(t, "hub-credential")))

	// The proven attack: tenant-a/prod, pointing at the attacker's server with its CA.
	if err := hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a"}}); err != nil {
		t.Fatal(err)
	}
	at := clientcmdv1.Cluster{Server: attacker.URL, CertificateAuthorityData: attacker.CA}
	createProfile(t, hub, "tenant-a", "prod", at)
	// In the inventory: a profile with no Secret of its own; one asking for unverified TLS
	// (its Secret names the attacker's server, as a careless operator's might).
	createProfile(t, hub, inventoryNS, "evil", at)
	createSecretReaderSecret(t, hub, inventoryNS, "lax", "the-lax-token", attacker.URL, nil)
	createProfile(t, hub, inventoryNS, "lax", clientcmdv1.Cluster{Server: attacker.URL, InsecureSkipTLSVerify: true})

	waitUntouched(t, hub.Client, profileSummary("prod"), traps, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		if s.Status.Nodes.Ready != 2 || !meta.IsStatusConditionTrue(s.Status.Conditions, fleetv1alpha1.ConditionReachable) ||
			s.Spec.Registration != (fleetv1alpha1.Registration{Source: fleetv1alpha1.FromClusterProfile, Namespace: inventoryNS, Name: "prod"}) {
			return fmt.Sprintf("%+v %+v", s.Spec, s.Status)
		}
		return ""
	})
	waitUntouched(t, hub.Client, kubeconfigSummary("prod"), traps, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		if s.Status.Nodes.Ready != 1 || !meta.IsStatusConditionTrue(s.Status.Conditions, fleetv1alpha1.ConditionReachable) ||
			s.Spec.Registration != (fleetv1alpha1.Registration{Source: fleetv1alpha1.FromKubeconfigSecret, Namespace: hubNS, Name: "prod"}) {
			return fmt.Sprintf("%+v %+v", s.Spec, s.Status)
		}
		return ""
	})
	waitUntouched(t, hub.Client, profileSummary("evil"), traps, refusedWith(fleetv1alpha1.ReasonNoUsableAccess, hubNS+"/"+SecretReaderSecretName(inventoryNS, "evil")))
	waitUntouched(t, hub.Client, profileSummary("lax"), traps, refusedWith(fleetv1alpha1.ReasonRegistrationRefused, "insecure-skip-tls-verify", InsecureFlag))

	// Whoever writes the inventory repoints the member's profile at the attacker's server.
	cp := profileOf(t, hub, inventoryNS, "prod")
	cp.Status.AccessProviders[0].Cluster = at
	if err := hub.Client.Status().Update(ctx, cp); err != nil {
		t.Fatal(err)
	}
	waitUntouched(t, hub.Client, profileSummary("prod"), traps, refusedWith(fleetv1alpha1.ReasonRegistrationRefused, attacker.URL, m1.Admin.Host,
		SecretReaderSecretName(inventoryNS, "prod")))

	// The profile of the other namespace has no summary: the hub never read it.
	var list fleetv1alpha1.NodewrightClusterSummaryList
	if err := hub.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Spec.Registration.Namespace == "tenant-a" {
			t.Errorf("the hub engaged %+v", s.Spec.Registration)
		}
	}
	if msg := attacker.contacted(); msg != "" {
		t.Error(msg)
	}
}

func profileOf(t *testing.T, hub *apiServer, namespace, name string) *clusterinventoryv1alpha1.ClusterProfile {
	t.Helper()
	cp := &clusterinventoryv1alpha1.ClusterProfile{}
	if err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestKubeconfigAttacks: kubeconfig Secrets that would have the hub run a program (exec, an
// auth provider), read its own files (a tokenFile, certificate, key and CA files: its own
// ServiceAccount token is one), go through a proxy, act as someone else, or send a
// credential unencrypted or unverified. Each is refused before the member is engaged, and
// its summary names the field: the exec plugin never runs (it would write a marker file),
// and neither the attacker's server, its proxy nor its plain HTTP listener is ever
// contacted. A member (or whatever answers at its address) that redirects the hub gets no
// request followed to where it points. An allowed kubeconfig, registered after them all, is
// engaged.
func TestKubeconfigAttacks(t *testing.T) {
	hub, members := startFleet(t, 1)
	m := members[0]
	createCluster(t, m)
	attacker, proxy, plain := startTLSTrap(t, ""), startListenerTrap(t), startListenerTrap(t)
	redirected := startTLSTrap(t, "")
	redirector := startTLSTrap(t, redirected.URL)
	traps := []*trap{attacker, proxy, plain, redirected}

	dir := t.TempDir()
	marker := filepath.Join(dir, "the-exec-plugin-ran")
	file := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cert, key := testCertificate(t)
	tokenFile := file("token", []byte("the-hubs-own-serviceaccount-token"))
	certFile, keyFile, caFile := file("tls.crt", cert), file("tls.key", key), file("ca.crt", attacker.CA)
	execCredential := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-the-exec-plugin"}}`

	for _, tc := range []struct {
		name, field string
		change      func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo)
	}{
		{"exec", "exec", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token = ""
			u.Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/sh", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
				Args: []string{"-c", `touch "$0"; echo "$1"`, marker, execCredential}}
		}},
		{"auth-provider", "auth-provider", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token = ""
			u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{"idp-issuer-url": attacker.URL, "client-id": "hub", "id-token": "x"}}
		}},
		{"token-file", "tokenFile", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.Token, u.TokenFile = "", tokenFile }},
		{"certificate-files", "client-certificate", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificate, u.ClientKey = "", certFile, keyFile
		}},
		{"key-file", "client-key", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificateData, u.ClientKey = "", cert, keyFile
		}},
		{"ca-file", "certificate-authority", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.CertificateAuthorityData, c.CertificateAuthority = nil, caFile
		}},
		{"proxy", "proxy-url", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.ProxyURL = proxy.URL }},
		{"impersonation", "act-as", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Impersonate, u.ImpersonateGroups = "admin", []string{"system:masters"}
		}},
		{"basic-auth", "username", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.Username, u.Password = "", "admin", "secret"
		}},
		{"insecure", "insecure-skip-tls-verify", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.CertificateAuthorityData, c.InsecureSkipTLSVerify = nil, true
		}},
		{"plain-http", "server", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.Server, c.CertificateAuthorityData = plain.URL, nil
		}},
	} {
		kc := clientcmdapi.NewConfig()
		c := &clientcmdapi.Cluster{Server: attacker.URL, CertificateAuthorityData: attacker.CA}
		u := &clientcmdapi.AuthInfo{Token: "a-member-token"}
		tc.change(c, u)
		kc.Clusters["m"], kc.AuthInfos["m"], kc.Contexts["m"], kc.CurrentContext = c, u, &clientcmdapi.Context{Cluster: "m", AuthInfo: "m"}, "m"
		data, err := clientcmd.Write(*kc)
		if err != nil {
			t.Fatal(err)
		}
		createKubeconfigSecret(t, hub, tc.name, data)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s: %s", tc.name, data)
			}
		})
	}
	// A member that redirects every request elsewhere, with a credential the hub accepts.
	redirecting := clientcmdapi.NewConfig()
	redirecting.Clusters["m"] = &clientcmdapi.Cluster{Server: redirector.URL, CertificateAuthorityData: redirector.CA}
	redirecting.AuthInfos["m"] = &clientcmdapi.AuthInfo{Token: "the-redirecting-members-token"}
	redirecting.Contexts["m"], redirecting.CurrentContext = &clientcmdapi.Context{Cluster: "m", AuthInfo: "m"}, "m"
	data, err := clientcmd.Write(*redirecting)
	if err != nil {
		t.Fatal(err)
	}
	createKubeconfigSecret(t, hub, "redirecting", data)
	registerKubeconfig(t, hub, "allowed", m, bearer(m.hubToken(t, "hub-credential")))

	waitUntouched(t, hub.Client, "allowed", traps, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		if s.Status.Phase != "MultiNode" || !meta.IsStatusConditionTrue(s.Status.Conditions, fleetv1alpha1.ConditionReachable) {
			return fmt.Sprintf("%+v", s.Status)
		}
		return ""
	})
	for name, field := range map[string]string{"exec": "exec", "auth-provider": "auth-provider", "token-file": "tokenFile",
		"certificate-files": "client-certificate", "key-file": "client-key", "ca-file": "certificate-authority", "proxy": "proxy-url",
		"impersonation": "act-as", "basic-auth": "username", "insecure": "insecure-skip-tls-verify", "plain-http": "server"} {
		waitUntouched(t, hub.Client, name, traps, refusedWith(fleetv1alpha1.ReasonRegistrationRefused, field))
	}
	// The redirecting member is engaged and asked again and again (its health checks, its
	// watches); none of its redirects is followed.
	testenv.Eventually(t, patience, func() string {
		for _, tr := range traps {
			if msg := tr.contacted(); msg != "" {
				t.Fatal(msg)
			}
		}
		redirector.mu.Lock()
		defer redirector.mu.Unlock()
		if len(redirector.auth) < 10 {
			return fmt.Sprintf("the redirecting member was asked %d times", len(redirector.auth))
		}
		return ""
	})
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the exec plugin ran: %v", err)
	}
	for _, tr := range traps {
		if msg := tr.contacted(); msg != "" {
			t.Error(msg)
		}
	}
	// The redirecting member itself was asked, with its own credential only.
	redirector.mu.Lock()
	for _, a := range redirector.auth {
		if a != "Bearer the-redirecting-members-token" {
			t.Errorf("the redirecting member got Authorization %q", a)
		}
	}
	redirector.mu.Unlock()
}

// createKubeconfigSecret creates a labelled kubeconfig Secret holding data as it is.
func createKubeconfigSecret(t *testing.T, hub *apiServer, name string, data []byte) {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: name, Labels: map[string]string{KubeconfigLabel: "true"}},
		Data: map[string][]byte{KubeconfigKey: data}}
	if err := hub.Client.Create(context.Background(), secret); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// testCertificate is a client certificate and key (PEM) that client-go can load.
func testCertificate(t *testing.T) (cert, key []byte) {
	t.Helper()
	s := httptest.NewUnstartedServer(nil)
	defer s.Close()
	s.StartTLS()
	c := s.TLS.Certificates[0]
	cert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// TestAProfilesOwnCAIsNotTrusted: whoever writes the inventory cannot vouch for a server. A
// profile names, at the address its Secret Reader's Secret names (a member's, where the
// attacker answers: DNS or a position on the path), a CA of its own, and the Secret pins none:
// the hub trusts the system's roots, not the profile's CA, so it gets no further than a TLS
// handshake, and the token never reaches the attacker.
func TestAProfilesOwnCAIsNotTrusted(t *testing.T) {
	hub, _ := startFleet(t, 0)
	impostor := startTLSTrap(t, "")
	createSecretReaderSecret(t, hub, inventoryNS, "shadow", "the-shadow-token", impostor.URL, nil)
	createProfile(t, hub, inventoryNS, "shadow", clientcmdv1.Cluster{Server: impostor.URL, CertificateAuthorityData: impostor.CA})
	// The hub tries, and tries again: each time the handshake is all it does.
	testenv.Eventually(t, patience, func() string {
		impostor.mu.Lock()
		defer impostor.mu.Unlock()
		if len(impostor.auth) > 0 {
			t.Fatalf("the hub sent the impostor a request, trusting the profile's CA: Authorization %q", impostor.auth)
		}
		if impostor.connections < 2 {
			return fmt.Sprintf("the hub has tried the impostor's address %d times", impostor.connections)
		}
		return ""
	})
}
