package fleet

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
)

// AccessPolicy is what the hub accepts in a member's access, whoever registered it.
//
// A registration is data that others write: a kubeconfig Secret in the hub's namespace, a
// ClusterProfile in the inventory namespace. The hub takes from it only a server and inline
// credentials: it runs no program a registration names (exec, auth-provider), reads no file
// (tokenFile, certificate and key files, a CA file: the hub's own ServiceAccount token is a
// file), sends nothing through a proxy a registration names, acts as no other identity than
// the credential's own (impersonation), and speaks only TLS, verified unless the hub's
// operator opted in to unverified servers.
type AccessPolicy struct {
	// AllowInsecure accepts insecure-skip-tls-verify (--allow-insecure-skip-tls-verify): the
	// member's credential then goes to whoever answers at its server's address.
	AllowInsecure bool
}

// InsecureFlag is the flag that sets AccessPolicy.AllowInsecure.
const InsecureFlag = "--allow-insecure-skip-tls-verify"

// Refusal is why the hub does not engage a member: the registration asks for something the
// hub does not do. Its message names the field.
type Refusal struct {
	// Field is the refused field, as the registration spells it.
	Field string
	Why   string
}

func (r *Refusal) Error() string { return r.Field + ": " + r.Why }

func refuse(field, why string, args ...any) *Refusal {
	return &Refusal{Field: field, Why: fmt.Sprintf(why, args...)}
}

// The reasons, one per field the hub refuses; the same words for a kubeconfig and a
// ClusterProfile.
const (
	whyExec         = "the hub runs no program a registration names; give an inline token or client certificate"
	whyAuthProvider = "the hub runs no auth provider plugin a registration names; give an inline token or client certificate"
	whyFile         = "the hub reads no file a registration names (its own credentials are files); give the data inline (%s)"
	whyProxy        = "the hub sends a member's traffic through no proxy a registration names"
	whyImpersonate  = "the hub reads as the credential's own identity, the one the member's roles grant; impersonation is refused"
	whyBasicAuth    = "basic authentication is refused (Kubernetes API servers do not accept it); give an inline token or client certificate"
	whyInsecure     = "the hub sends no credential to a server whose certificate it does not verify; give certificate-authority-data, or start the hub with " + InsecureFlag
)

// kubeconfigAccess parses a kubeconfig Secret's kubeconfig and returns the member's access:
// the current context's server, TLS settings and inline credentials, and nothing else. Any
// field the hub refuses, in any cluster or user of the kubeconfig (used or not), refuses the
// whole kubeconfig: one that asks the hub to run a program is not a registration to engage.
func kubeconfigAccess(data []byte, p AccessPolicy) (*rest.Config, error) {
	kc, err := clientcmd.Load(data) // decodes only: reads no file, runs nothing
	if err != nil {
		return nil, refuse("kubeconfig", "does not parse: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(kc.AuthInfos)) {
		if err := checkUser(name, kc.AuthInfos[name]); err != nil {
			return nil, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(kc.Clusters)) {
		c := kc.Clusters[name]
		if c == nil {
			continue
		}
		if err := checkCluster(fmt.Sprintf("clusters[%q].", name), clusterOf(c), p); err != nil {
			return nil, err
		}
	}
	ctx := kc.Contexts[kc.CurrentContext]
	switch {
	case kc.CurrentContext == "":
		return nil, refuse("current-context", "is not set")
	case ctx == nil:
		return nil, refuse("current-context", "names context %q, which the kubeconfig does not have", kc.CurrentContext)
	}
	c, u := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]
	if c == nil {
		return nil, refuse(fmt.Sprintf("contexts[%q].cluster", kc.CurrentContext), "names cluster %q, which the kubeconfig does not have", ctx.Cluster)
	}
	if u == nil {
		return nil, refuse(fmt.Sprintf("contexts[%q].user", kc.CurrentContext), "names user %q, which the kubeconfig does not have", ctx.AuthInfo)
	}
	field := fmt.Sprintf("users[%q].", ctx.AuthInfo)
	switch {
	case u.Token == "" && len(u.ClientCertificateData) == 0:
		return nil, refuse(field+"token", "the user has no inline credential: give token, or client-certificate-data and client-key-data")
	case len(u.ClientCertificateData) > 0 && len(u.ClientKeyData) == 0:
		return nil, refuse(field+"client-key-data", "a client certificate needs its key inline")
	case len(u.ClientKeyData) > 0 && len(u.ClientCertificateData) == 0:
		return nil, refuse(field+"client-certificate-data", "a client key needs its certificate inline")
	}
	cfg := &rest.Config{Host: c.Server, BearerToken: u.Token, TLSClientConfig: rest.TLSClientConfig{
		ServerName: c.TLSServerName, Insecure: c.InsecureSkipTLSVerify, CAData: c.CertificateAuthorityData,
		CertData: u.ClientCertificateData, KeyData: u.ClientKeyData}}
	if err := checkConfig(cfg, p, false); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkUser refuses every user field but the inline token and client certificate and key.
func checkUser(name string, u *clientcmdapi.AuthInfo) error {
	if u == nil {
		return nil
	}
	field := fmt.Sprintf("users[%q].", name)
	switch {
	case u.Exec != nil:
		return refuse(field+"exec", whyExec)
	case u.AuthProvider != nil:
		return refuse(field+"auth-provider", whyAuthProvider)
	case u.TokenFile != "":
		return refuse(field+"tokenFile", whyFile, "token")
	case u.ClientCertificate != "":
		return refuse(field+"client-certificate", whyFile, "client-certificate-data")
	case u.ClientKey != "":
		return refuse(field+"client-key", whyFile, "client-key-data")
	case u.Impersonate != "", u.ImpersonateUID != "", len(u.ImpersonateGroups) > 0, len(u.ImpersonateUserExtra) > 0:
		return refuse(field+"act-as", whyImpersonate)
	case u.Username != "", u.Password != "":
		return refuse(field+"username", whyBasicAuth)
	}
	return nil
}

// clusterOf is the kubeconfig's cluster in the form a ClusterProfile's access provider uses.
func clusterOf(c *clientcmdapi.Cluster) clientcmdv1.Cluster {
	return clientcmdv1.Cluster{Server: c.Server, TLSServerName: c.TLSServerName, InsecureSkipTLSVerify: c.InsecureSkipTLSVerify,
		CertificateAuthority: c.CertificateAuthority, CertificateAuthorityData: c.CertificateAuthorityData, ProxyURL: c.ProxyURL}
}

// checkCluster refuses a cluster the hub would reach other than over verified TLS to its
// server alone: a CA file, a proxy, plain HTTP, unverified TLS without the hub's opt-in.
// prefix names the cluster in the registration ("clusters[\"x\"]." or
// "status.accessProviders[\"secretreader\"].cluster.").
func checkCluster(prefix string, c clientcmdv1.Cluster, p AccessPolicy) error {
	switch {
	case c.CertificateAuthority != "":
		return refuse(prefix+"certificate-authority", whyFile, "certificate-authority-data")
	case c.ProxyURL != "":
		return refuse(prefix+"proxy-url", whyProxy)
	case c.InsecureSkipTLSVerify && !p.AllowInsecure:
		return refuse(prefix+"insecure-skip-tls-verify", whyInsecure)
	}
	return checkServer(prefix+"server", c.Server)
}

// checkServer accepts an https URL of a host, with no credentials in it.
func checkServer(field, server string) error {
	u, err := url.Parse(server)
	switch {
	case server == "":
		return refuse(field, "is empty")
	case err != nil:
		return refuse(field, "is not a URL: %v", err)
	case u.Scheme != "https":
		return refuse(field, "%q is not an https URL: the hub sends a credential over TLS only", server)
	case u.Host == "":
		return refuse(field, "%q names no host", server)
	case u.User != nil:
		return refuse(field, "%q holds credentials; give them as the user's token", server)
	}
	return nil
}

// checkConfig is the last check of every member access before the hub engages it, from
// either source: only a server, TLS settings and inline credentials, or else an exec plugin
// the hub's own provider file configured (execAllowed). It refuses what client-go would
// otherwise act on: a file, a program, a proxy, impersonation, unverified TLS.
func checkConfig(cfg *rest.Config, p AccessPolicy, execAllowed bool) error {
	switch {
	case cfg.ExecProvider != nil && !execAllowed:
		return refuse("exec", whyExec)
	case cfg.AuthProvider != nil:
		return refuse("auth-provider", whyAuthProvider)
	case cfg.BearerTokenFile != "":
		return refuse("tokenFile", whyFile, "token")
	case cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "":
		return refuse("certificate files", whyFile, "the certificate and key data")
	case cfg.Impersonate.UserName != "" || cfg.Impersonate.UID != "" || len(cfg.Impersonate.Groups) > 0 || len(cfg.Impersonate.Extra) > 0:
		return refuse("impersonation", whyImpersonate)
	case cfg.Username != "" || cfg.Password != "":
		return refuse("username", whyBasicAuth)
	case cfg.Insecure && !p.AllowInsecure:
		return refuse("insecure-skip-tls-verify", whyInsecure)
	case cfg.Insecure && len(cfg.CAData) > 0:
		return refuse("insecure-skip-tls-verify", "and certificate-authority-data both set: one or the other")
	case cfg.Dial != nil || cfg.Transport != nil || cfg.WrapTransport != nil:
		return refuse("transport", "a member's access sets no transport of its own")
	}
	return checkServer("server", cfg.Host)
}

// memberConfig is the member's access as the hub uses it: its own copy, with a proxy only
// from the hub's environment, and redirects not followed (newMemberCluster); requests at
// most memberQPS a second (and memberBurst at once) per client, as Kubernetes' controller
// manager, rather than client-go's default 5 (a member's workflows are read a page a
// request).
func memberConfig(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Proxy = nil // the upstream ClusterProfile credentials set one from the profile
	if out.QPS == 0 {
		out.QPS, out.Burst = memberQPS, memberBurst
	}
	return out
}

const (
	memberQPS   = 20
	memberBurst = 30
)

// trimURL is a server URL as the hub compares them: without a trailing slash.
func trimURL(s string) string { return strings.TrimRight(s, "/") }
