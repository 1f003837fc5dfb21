package kubelite

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"
)

// Config says how to reach and authenticate to an API server.
type Config struct {
	// Host is the API server's URL: https://host:port, with a path prefix when the server is
	// behind a proxy that adds one.
	Host string
	// CAData are the PEM certificates that may sign the server's; none: the system's roots.
	CAData []byte
	// Insecure skips verifying the server's certificate (insecure-skip-tls-verify).
	Insecure bool
	// ServerName is the name the server's certificate is checked for, when not Host's.
	ServerName string
	// CertData and KeyData are the PEM client certificate and key, when the client presents
	// one.
	CertData, KeyData []byte
	// Token is the bearer token, when the client sends one.
	Token string
	// TokenFile, when set, holds the bearer token: it is read again every TokenReread and after
	// the server refused the token, so that a rotated token (a projected ServiceAccount token)
	// is used without a restart. Token is what it held when the Config was loaded.
	TokenFile string
	// TokenReread is how often TokenFile is read again; a minute when zero, as client-go.
	TokenReread time.Duration
	// ProxyURL, when set, is the proxy every request goes through; otherwise the environment's
	// (HTTPS_PROXY, NO_PROXY), as client-go.
	ProxyURL string
	// UserAgent is sent with every request; the API server names the writes of a client with
	// no field manager after its first word.
	UserAgent string
	// Source says where the Config came from, for messages: a kubeconfig's path, or
	// "in-cluster".
	Source string
}

// The in-cluster service account's files, as the kubelet mounts them into every pod.
const (
	inClusterToken = "token"
	inClusterCA    = "ca.crt"
)

// serviceAccountDir is where the kubelet mounts them; a variable for the tests.
var serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// ErrNotInCluster is InCluster's error out of a pod: KUBERNETES_SERVICE_HOST or
// KUBERNETES_SERVICE_PORT is not set.
var ErrNotInCluster = errors.New("not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set")

// InCluster is the Config of a pod's service account: the API server the kubelet names in
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the cluster's CA and the token the
// kubelet mounts under /var/run/secrets/kubernetes.io/serviceaccount, the token read again as
// the kubelet rotates it.
func InCluster() (*Config, error) { return inCluster(serviceAccountDir) }

func inCluster(dir string) (*Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, ErrNotInCluster
	}
	tokenFile := filepath.Join(dir, inClusterToken)
	token, err := readToken(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("the service account's token: %w", err)
	}
	caFile := filepath.Join(dir, inClusterCA)
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA: %w", err)
	}
	cfg := &Config{Host: "https://" + net.JoinHostPort(host, port), CAData: ca, Token: token, TokenFile: tokenFile, Source: "in-cluster"}
	if _, err := cfg.tlsConfig(); err != nil {
		return nil, fmt.Errorf("the cluster's CA %s: %w", caFile, err)
	}
	return cfg, nil
}

// readToken reads a bearer token file: its content without surrounding white space, which
// must not be empty.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return token, nil
}

// Load finds the Config as kubectl and controller-runtime do: the kubeconfig file
// kubeconfigFlag names when set; else the files $KUBECONFIG lists (separated by colons,
// merged); else the in-cluster service account (InCluster); else ~/.kube/config.
func Load(kubeconfigFlag string) (*Config, error) {
	if kubeconfigFlag != "" {
		return LoadKubeconfig(kubeconfigFlag)
	}
	if env := os.Getenv("KUBECONFIG"); env != "" {
		return LoadKubeconfig(filepath.SplitList(env)...)
	}
	cfg, inClusterErr := InCluster()
	if inClusterErr == nil {
		return cfg, nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		if u, err := user.Current(); err == nil {
			home = u.HomeDir
		}
	}
	if home == "" {
		return nil, fmt.Errorf("no kubeconfig: no --kubeconfig, no $KUBECONFIG, %w, and no home folder", inClusterErr)
	}
	path := filepath.Join(home, ".kube", "config")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no kubeconfig: no --kubeconfig, no $KUBECONFIG, %w, and no %s", inClusterErr, path)
	}
	return LoadKubeconfig(path)
}

// baseURL is Host as a URL, checked.
func (c *Config) baseURL() (*url.URL, error) {
	host := c.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("the server %q is not a URL: %w", c.Host, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("the server %q: the scheme must be https or http", c.Host)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("the server %q names no host", c.Host)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("the server %q: a server URL takes no query or fragment", c.Host)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}
