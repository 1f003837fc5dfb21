package kubelite

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the part of a kubeconfig file (kubectl's clientcmd v1 Config) the client
// reads. Fields it cannot honour are read too, to refuse them by name rather than ignore them.
type kubeconfig struct {
	CurrentContext string         `json:"current-context"`
	Clusters       []namedCluster `json:"clusters"`
	Contexts       []namedContext `json:"contexts"`
	Users          []namedUser    `json:"users"`
}

type namedCluster struct {
	Name    string        `json:"name"`
	Cluster *clusterEntry `json:"cluster"`
}

type clusterEntry struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData string `json:"certificate-authority-data"`
	ProxyURL                 string `json:"proxy-url"`
}

type namedContext struct {
	Name    string        `json:"name"`
	Context *contextEntry `json:"context"`
}

type contextEntry struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

type namedUser struct {
	Name string    `json:"name"`
	User *authInfo `json:"user"`
}

type authInfo struct {
	ClientCertificate     string `json:"client-certificate"`
	ClientCertificateData string `json:"client-certificate-data"`
	ClientKey             string `json:"client-key"`
	ClientKeyData         string `json:"client-key-data"`
	Token                 string `json:"token"`
	TokenFile             string `json:"tokenFile"`

	// Not supported: refused by name.
	Username     string         `json:"username"`
	Password     string         `json:"password"`
	Impersonate  string         `json:"as"`
	AsUID        string         `json:"as-uid"`
	AsGroups     []string       `json:"as-groups"`
	AsUserExtra  map[string]any `json:"as-user-extra"`
	AuthProvider map[string]any `json:"auth-provider"`
	Exec         map[string]any `json:"exec"`
}

// LoadKubeconfig reads the kubeconfig files at paths and returns the Config of their current
// context. Several files are merged as kubectl merges $KUBECONFIG: the first to set the
// current context, or to define a cluster, context or user of a name, wins, and files that do
// not exist are skipped (but one must). Relative paths in a file are relative to its folder.
func LoadKubeconfig(paths ...string) (*Config, error) {
	var merged kubeconfig
	var read []string
	for _, path := range paths {
		if path == "" {
			continue
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) && len(paths) > 1 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig: %w", err)
		}
		kc, err := parseKubeconfig(data)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		kc.resolvePaths(filepath.Dir(path))
		merged.merge(kc)
		read = append(read, path)
	}
	if len(read) == 0 {
		return nil, fmt.Errorf("no kubeconfig: none of %s exists", strings.Join(paths, ", "))
	}
	cfg, err := merged.config()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", strings.Join(read, ":"), err)
	}
	cfg.Source = strings.Join(read, ":")
	return cfg, nil
}

// ParseKubeconfig reads one kubeconfig file's content and returns the Config of its current
// context, relative paths in it taken from dir. Every error names the field at fault.
func ParseKubeconfig(data []byte, dir string) (*Config, error) {
	kc, err := parseKubeconfig(data)
	if err != nil {
		return nil, err
	}
	kc.resolvePaths(dir)
	return kc.config()
}

func parseKubeconfig(data []byte) (*kubeconfig, error) {
	kc := &kubeconfig{}
	if err := yaml.Unmarshal(data, kc); err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	return kc, nil
}

// resolvePaths makes the file paths of kc absolute, from dir.
func (kc *kubeconfig) resolvePaths(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for _, c := range kc.Clusters {
		if c.Cluster != nil {
			abs(&c.Cluster.CertificateAuthority)
		}
	}
	for _, u := range kc.Users {
		if u.User != nil {
			abs(&u.User.ClientCertificate)
			abs(&u.User.ClientKey)
			abs(&u.User.TokenFile)
		}
	}
}

// merge adds what other sets that kc does not yet.
func (kc *kubeconfig) merge(other *kubeconfig) {
	if kc.CurrentContext == "" {
		kc.CurrentContext = other.CurrentContext
	}
	for _, c := range other.Clusters {
		if kc.cluster(c.Name) == nil {
			kc.Clusters = append(kc.Clusters, c)
		}
	}
	for _, c := range other.Contexts {
		if kc.context(c.Name) == nil {
			kc.Contexts = append(kc.Contexts, c)
		}
	}
	for _, u := range other.Users {
		if kc.user(u.Name) == nil {
			kc.Users = append(kc.Users, u)
		}
	}
}

func (kc *kubeconfig) cluster(name string) *namedCluster {
	for i := range kc.Clusters {
		if kc.Clusters[i].Name == name {
			return &kc.Clusters[i]
		}
	}
	return nil
}

func (kc *kubeconfig) context(name string) *namedContext {
	for i := range kc.Contexts {
		if kc.Contexts[i].Name == name {
			return &kc.Contexts[i]
		}
	}
	return nil
}

func (kc *kubeconfig) user(name string) *namedUser {
	for i := range kc.Users {
		if kc.Users[i].Name == name {
			return &kc.Users[i]
		}
	}
	return nil
}

// config is the Config of kc's current context.
func (kc *kubeconfig) config() (*Config, error) {
	if kc.CurrentContext == "" {
		return nil, errors.New("current-context is not set")
	}
	ctx := kc.context(kc.CurrentContext)
	if ctx == nil {
		return nil, fmt.Errorf("current-context %q: no context of that name in contexts", kc.CurrentContext)
	}
	ctxField := fmt.Sprintf("contexts[%q].context", ctx.Name)
	if ctx.Context == nil {
		return nil, fmt.Errorf("%s is missing", ctxField)
	}
	if ctx.Context.Cluster == "" {
		return nil, fmt.Errorf("%s.cluster is not set", ctxField)
	}
	cl := kc.cluster(ctx.Context.Cluster)
	if cl == nil {
		return nil, fmt.Errorf("%s.cluster %q: no cluster of that name in clusters", ctxField, ctx.Context.Cluster)
	}
	cfg := &Config{}
	if err := clusterConfig(cfg, fmt.Sprintf("clusters[%q].cluster", cl.Name), cl.Cluster); err != nil {
		return nil, err
	}
	if ctx.Context.User != "" {
		u := kc.user(ctx.Context.User)
		if u == nil {
			return nil, fmt.Errorf("%s.user %q: no user of that name in users", ctxField, ctx.Context.User)
		}
		if err := userConfig(cfg, fmt.Sprintf("users[%q].user", u.Name), u.User); err != nil {
			return nil, err
		}
	}
	if _, err := cfg.tlsConfig(); err != nil {
		return nil, fmt.Errorf("%s: %w", ctxField, err)
	}
	return cfg, nil
}

func clusterConfig(cfg *Config, field string, c *clusterEntry) error {
	if c == nil {
		return fmt.Errorf("%s is missing", field)
	}
	if c.Server == "" {
		return fmt.Errorf("%s.server is not set", field)
	}
	cfg.Host, cfg.ServerName, cfg.Insecure, cfg.ProxyURL = c.Server, c.TLSServerName, c.InsecureSkipTLSVerify, c.ProxyURL
	if _, err := cfg.baseURL(); err != nil {
		return fmt.Errorf("%s.server: %w", field, err)
	}
	if c.ProxyURL != "" {
		if _, err := proxyURL(c.ProxyURL); err != nil {
			return fmt.Errorf("%s.proxy-url: %w", field, err)
		}
	}
	var err error
	if cfg.CAData, err = dataOrFile(field, "certificate-authority", c.CertificateAuthorityData, c.CertificateAuthority); err != nil {
		return err
	}
	if cfg.Insecure && len(cfg.CAData) > 0 {
		return fmt.Errorf("%s: insecure-skip-tls-verify with a certificate authority: choose one", field)
	}
	if len(cfg.CAData) > 0 {
		if _, err := certPool(cfg.CAData); err != nil {
			return fmt.Errorf("%s.certificate-authority: %w", field, err)
		}
	}
	return nil
}

func userConfig(cfg *Config, field string, u *authInfo) error {
	if u == nil {
		return fmt.Errorf("%s is missing", field)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"exec", u.Exec != nil}, {"auth-provider", u.AuthProvider != nil}, {"username", u.Username != ""}, {"password", u.Password != ""},
		{"as", u.Impersonate != ""}, {"as-uid", u.AsUID != ""}, {"as-groups", len(u.AsGroups) > 0}, {"as-user-extra", len(u.AsUserExtra) > 0},
	} {
		if f.set {
			return fmt.Errorf("%s.%s is not supported: give a client certificate, a token or a tokenFile", field, f.name)
		}
	}
	var err error
	if cfg.CertData, err = dataOrFile(field, "client-certificate", u.ClientCertificateData, u.ClientCertificate); err != nil {
		return err
	}
	if cfg.KeyData, err = dataOrFile(field, "client-key", u.ClientKeyData, u.ClientKey); err != nil {
		return err
	}
	switch {
	case len(cfg.CertData) > 0 && len(cfg.KeyData) == 0:
		return fmt.Errorf("%s: a client-certificate without a client-key", field)
	case len(cfg.KeyData) > 0 && len(cfg.CertData) == 0:
		return fmt.Errorf("%s: a client-key without a client-certificate", field)
	}
	cfg.Token = strings.TrimSpace(u.Token)
	if u.TokenFile != "" {
		token, err := readToken(u.TokenFile)
		if err != nil {
			return fmt.Errorf("%s.tokenFile: %w", field, err)
		}
		cfg.Token, cfg.TokenFile = token, u.TokenFile
	}
	return nil
}

// dataOrFile is the content of name-data (base64), which wins, else of the file name.
func dataOrFile(field, name, data, path string) ([]byte, error) {
	if data != "" {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(data))
		if err != nil {
			return nil, fmt.Errorf("%s.%s-data: not base64: %w", field, name, err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("%s.%s-data is empty", field, name)
		}
		return b, nil
	}
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s.%s: %w", field, name, err)
	}
	return b, nil
}
