package fleet

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// kubeconfigWith is a kubeconfig of one cluster "m" and one user "m", changed by change.
func kubeconfigWith(t testing.TB, change func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, kc *clientcmdapi.Config)) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	c := &clientcmdapi.Cluster{Server: "https://member.example:6443", CertificateAuthorityData: []byte("ca")}
	u := &clientcmdapi.AuthInfo{Token: "member-token"}
	kc.Clusters["m"], kc.AuthInfos["m"] = c, u
	kc.Contexts["m"] = &clientcmdapi.Context{Cluster: "m", AuthInfo: "m"}
	kc.CurrentContext = "m"
	if change != nil {
		change(c, u, kc)
	}
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestKubeconfigAccess(t *testing.T) {
	type change = func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, kc *clientcmdapi.Config)
	for _, tc := range []struct {
		name   string
		change change
		policy AccessPolicy
		// refused is the field named in the refusal; "" for an accepted kubeconfig.
		refused string
	}{
		{name: "inline token", change: nil},
		{name: "inline client certificate", change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.Token, u.ClientCertificateData, u.ClientKeyData = "", []byte("cert"), []byte("key")
		}},
		{name: "tls-server-name and a namespace", change: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, kc *clientcmdapi.Config) {
			c.TLSServerName, kc.Contexts["m"].Namespace = "kubernetes", "default"
		}},
		{name: "insecure with the hub's opt-in", policy: AccessPolicy{AllowInsecure: true}, change: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil
		}},

		{name: "exec", refused: `users["m"].exec`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}
		}},
		{name: "exec in a user no context uses", refused: `users["other"].exec`, change: func(_ *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, kc *clientcmdapi.Config) {
			kc.AuthInfos["other"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}}
		}},
		{name: "auth-provider", refused: `users["m"].auth-provider`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{"idp-issuer-url": "https://idp.example"}}
		}},
		{name: "tokenFile", refused: `users["m"].tokenFile`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.Token, u.TokenFile = "", "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}},
		{name: "tokenFile beside a token", refused: `users["m"].tokenFile`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}},
		{name: "client-certificate file", refused: `users["m"].client-certificate`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.ClientCertificate, u.ClientKeyData = "/etc/hub/tls.crt", []byte("key")
		}},
		{name: "client-key file", refused: `users["m"].client-key`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.ClientCertificateData, u.ClientKey = []byte("cert"), "/etc/hub/tls.key"
		}},
		{name: "act-as", refused: `users["m"].act-as`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.Impersonate = "admin"
		}},
		{name: "act-as-groups", refused: `users["m"].act-as`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.ImpersonateGroups = []string{"system:masters"}
		}},
		{name: "act-as-uid", refused: `users["m"].act-as`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.ImpersonateUID = "0"
		}},
		{name: "act-as-user-extra", refused: `users["m"].act-as`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.ImpersonateUserExtra = map[string][]string{"scopes": {"all"}}
		}},
		{name: "username and password", refused: `users["m"].username`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.Username, u.Password = "admin", "secret"
		}},
		{name: "certificate-authority file", refused: `clusters["m"].certificate-authority`, change: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			c.CertificateAuthority = "/etc/hub/ca.crt"
		}},
		{name: "proxy-url", refused: `clusters["m"].proxy-url`, change: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			c.ProxyURL = "http://proxy.example:3128"
		}},
		{name: "proxy-url in a cluster no context uses", refused: `clusters["other"].proxy-url`, change: func(_ *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, kc *clientcmdapi.Config) {
			kc.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://other.example", ProxyURL: "http://proxy.example:3128"}
		}},
		{name: "insecure without the opt-in", refused: `clusters["m"].insecure-skip-tls-verify`, change: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil
		}},
		{name: "plain http", refused: `clusters["m"].server`, change: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			c.Server = "http://member.example:8080"
		}},
		{name: "no scheme", refused: `clusters["m"].server`, change: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			c.Server = "member.example:6443"
		}},
		{name: "credentials in the URL", refused: `clusters["m"].server`, change: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			c.Server = "https://admin:secret@member.example:6443"
		}},
		{name: "no credential", refused: `users["m"].token`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.Token = ""
		}},
		{name: "a certificate without its key", refused: `users["m"].client-key-data`, change: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
			u.ClientCertificateData = []byte("cert")
		}},
		{name: "no current context", refused: "current-context", change: func(_ *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, kc *clientcmdapi.Config) {
			kc.CurrentContext = ""
		}},
		{name: "a current context that is not there", refused: "current-context", change: func(_ *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, kc *clientcmdapi.Config) {
			kc.CurrentContext = "elsewhere"
		}},
		{name: "a context's cluster that is not there", refused: `contexts["m"].cluster`, change: func(_ *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo, kc *clientcmdapi.Config) {
			kc.Contexts["m"].Cluster = "elsewhere"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := kubeconfigAccess(kubeconfigWith(t, tc.change), tc.policy)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.BearerTokenFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" ||
					cfg.Proxy != nil || cfg.Impersonate.UserName != "" || cfg.Username != "" {
					t.Errorf("the access holds more than a server and inline credentials: %+v", cfg)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || r.Field != tc.refused || r.Why == "" {
				t.Fatalf("got %v (%#v); want a refusal of %s", err, err, tc.refused)
			}
			if got := refusalOf(err); got.Reason != fleetv1alpha1.ReasonRegistrationRefused || !strings.Contains(got.Message, tc.refused) {
				t.Errorf("summary's reason %+v; want %s naming %s", got, fleetv1alpha1.ReasonRegistrationRefused, tc.refused)
			}
		})
	}
	t.Run("not a kubeconfig", func(t *testing.T) {
		var r *Refusal
		if _, err := kubeconfigAccess([]byte("{not yaml"), AccessPolicy{}); !errors.As(err, &r) || r.Field != "kubeconfig" {
			t.Errorf("got %v; want a refusal of the kubeconfig", err)
		}
	})
}

// TestCheckConfig: the last check before a member is engaged refuses whatever client-go would
// act on beyond a server and inline credentials, whichever source built the access.
func TestCheckConfig(t *testing.T) {
	base := func() *rest.Config {
		return &rest.Config{Host: "https://member.example", BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	}
	for _, tc := range []struct {
		name    string
		change  func(*rest.Config)
		exec    bool
		policy  AccessPolicy
		refused string
	}{
		{name: "inline", change: func(*rest.Config) {}},
		{name: "the provider file's exec plugin", exec: true, change: func(c *rest.Config) { c.ExecProvider = &clientcmdapi.ExecConfig{Command: "plugin"} }},
		{name: "exec", refused: "exec", change: func(c *rest.Config) { c.ExecProvider = &clientcmdapi.ExecConfig{Command: "plugin"} }},
		{name: "auth-provider", refused: "auth-provider", change: func(c *rest.Config) { c.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"} }},
		{name: "token file", refused: "tokenFile", change: func(c *rest.Config) { c.BearerTokenFile = "/token" }},
		{name: "CA file", refused: "certificate files", change: func(c *rest.Config) { c.CAFile = "/ca" }},
		{name: "cert file", refused: "certificate files", change: func(c *rest.Config) { c.CertFile = "/crt" }},
		{name: "key file", refused: "certificate files", change: func(c *rest.Config) { c.KeyFile = "/key" }},
		{name: "impersonation", refused: "impersonation", change: func(c *rest.Config) { c.Impersonate.Groups = []string{"system:masters"} }},
		{name: "basic auth", refused: "username", change: func(c *rest.Config) { c.Password = "p" }},
		{name: "insecure", refused: "insecure-skip-tls-verify", change: func(c *rest.Config) { c.Insecure, c.CAData = true, nil }},
		{name: "insecure, opted in", policy: AccessPolicy{AllowInsecure: true}, change: func(c *rest.Config) { c.Insecure, c.CAData = true, nil }},
		{name: "insecure beside a CA", policy: AccessPolicy{AllowInsecure: true}, refused: "insecure-skip-tls-verify", change: func(c *rest.Config) { c.Insecure = true }},
		{name: "plain http", refused: "server", change: func(c *rest.Config) { c.Host = "http://member.example" }},
		{name: "a transport", refused: "transport", change: func(c *rest.Config) { c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return rt } }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.change(cfg)
			err := checkConfig(cfg, tc.policy, tc.exec)
			var r *Refusal
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (!errors.As(err, &r) || r.Field != tc.refused):
				t.Errorf("got %v; want a refusal of %s", err, tc.refused)
			}
		})
	}
}

// TestCheckCluster: what a ClusterProfile's access provider may say.
func TestCheckCluster(t *testing.T) {
	const prefix = `status.accessProviders["secretreader"].cluster.`
	for _, tc := range []struct {
		name    string
		cluster clientcmdv1.Cluster
		policy  AccessPolicy
		refused string
	}{
		{name: "server and CA", cluster: clientcmdv1.Cluster{Server: "https://m.example", CertificateAuthorityData: []byte("ca")}},
		{name: "CA file", cluster: clientcmdv1.Cluster{Server: "https://m.example", CertificateAuthority: "/ca"}, refused: "certificate-authority"},
		{name: "proxy", cluster: clientcmdv1.Cluster{Server: "https://m.example", ProxyURL: "http://p.example"}, refused: "proxy-url"},
		{name: "insecure", cluster: clientcmdv1.Cluster{Server: "https://m.example", InsecureSkipTLSVerify: true}, refused: "insecure-skip-tls-verify"},
		{name: "insecure, opted in", cluster: clientcmdv1.Cluster{Server: "https://m.example", InsecureSkipTLSVerify: true}, policy: AccessPolicy{AllowInsecure: true}},
		{name: "no server", cluster: clientcmdv1.Cluster{}, refused: "server"},
		{name: "http", cluster: clientcmdv1.Cluster{Server: "http://m.example"}, refused: "server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkCluster(prefix, tc.cluster, tc.policy)
			var r *Refusal
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (!errors.As(err, &r) || r.Field != prefix+tc.refused):
				t.Errorf("got %v; want a refusal of %s", err, prefix+tc.refused)
			}
		})
	}
}

func TestSummaryName(t *testing.T) {
	reg := func(source fleetv1alpha1.RegistrationSource, ns, name string) fleetv1alpha1.Registration {
		return fleetv1alpha1.Registration{Source: source, Namespace: ns, Name: name}
	}
	long := strings.Repeat("a", 250)
	names := map[string]fleetv1alpha1.Registration{}
	for _, tc := range []struct {
		reg  fleetv1alpha1.Registration
		want string
	}{
		{reg(fleetv1alpha1.FromKubeconfigSecret, "nodewright-fleet", "prod"), "kubeconfig.prod"},
		{reg(fleetv1alpha1.FromClusterProfile, "inventory", "prod"), "clusterprofile.inventory.prod"},
		// A namespace holds no dot: "a.b" / "c" and "a" / "b.c" differ.
		{reg(fleetv1alpha1.FromClusterProfile, "tenant-a", "prod"), "clusterprofile.tenant-a.prod"},
		{reg(fleetv1alpha1.FromClusterProfile, "tenant", "a.prod"), "clusterprofile.tenant.a.prod"},
		{reg(fleetv1alpha1.FromKubeconfigSecret, "nodewright-fleet", "clusterprofile.inventory.prod"), "kubeconfig.clusterprofile.inventory.prod"},
		{reg(fleetv1alpha1.FromClusterProfile, "inventory", long), ""},
		{reg(fleetv1alpha1.FromClusterProfile, "inventory", long+"b"), ""},
		{reg(fleetv1alpha1.FromClusterProfile, "inventory", strings.Repeat("a.", 125)+"a"), ""},
	} {
		got := SummaryName(tc.reg)
		if tc.want != "" && got != tc.want {
			t.Errorf("%+v: %q; want %q", tc.reg, got, tc.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("%+v: %q is no object name: %v", tc.reg, got, errs)
		}
		if other, ok := names[got]; ok {
			t.Errorf("%+v and %+v share the summary %q", tc.reg, other, got)
		}
		names[got] = tc.reg
	}
}

// FuzzKubeconfigAccess: whatever a kubeconfig Secret holds, the hub answers with an access
// that holds only a server and inline credentials, or a refusal; never a panic.
func FuzzKubeconfigAccess(f *testing.F) {
	f.Add(kubeconfigWith(f, nil), false)
	f.Add(kubeconfigWith(f, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
		u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", Args: []string{"-c", "id"}, APIVersion: "client.authentication.k8s.io/v1"}
	}), false)
	f.Add(kubeconfigWith(f, func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo, _ *clientcmdapi.Config) {
		c.ProxyURL, u.TokenFile = "http://p", "/t"
	}), true)
	f.Add([]byte("apiVersion: v1\nkind: Config\nclusters: [{name: m, cluster: {server: 'https://x', insecure-skip-tls-verify: true}}]\nusers: [{name: m, user: {token: t}}]\ncontexts: [{name: m, context: {cluster: m, user: m}}]\ncurrent-context: m\n"), true)
	f.Add([]byte(`{"users":[{"name":"m","user":{"auth-provider":{"name":"gcp"}}}]}`), false)
	f.Add([]byte(""), false)
	f.Fuzz(func(t *testing.T, data []byte, insecure bool) {
		cfg, err := kubeconfigAccess(data, AccessPolicy{AllowInsecure: insecure})
		if err != nil {
			return
		}
		if cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.BearerTokenFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" ||
			cfg.CAFile != "" || cfg.Proxy != nil || cfg.Impersonate.UserName != "" || len(cfg.Impersonate.Groups) > 0 || cfg.Username != "" ||
			cfg.Password != "" || (cfg.Insecure && !insecure) || !strings.HasPrefix(cfg.Host, "https://") {
			t.Fatalf("accepted %q as %+v", data, cfg)
		}
		if cfg.BearerToken == "" && len(cfg.CertData) == 0 {
			t.Fatalf("accepted %q without a credential", data)
		}
	})
}
