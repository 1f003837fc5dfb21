package linstor

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Piraeus' conventions (piraeus-operator's "How to Configure TLS for the LINSTOR API"): the
// controller's Service linstor-controller in piraeus-datastore serves HTTP on 3370 and, with
// apiTLS, HTTPS on 3371 with client certificates; the clients' certificate is kept in a
// kubernetes.io/tls Secret (linstor-client-tls in the guide) with tls.crt, tls.key and the
// CA of the controller's certificate in ca.crt.
const (
	// DefaultURL is the LINSTOR controller of a Piraeus installation with API TLS.
	DefaultURL = "https://linstor-controller.piraeus-datastore.svc:3371"
	// DefaultNamespace is Piraeus' namespace.
	DefaultNamespace = "piraeus-datastore"
	// DefaultClientSecret is the client Secret of Piraeus' API TLS guide.
	DefaultClientSecret = "linstor-client-tls"

	// SecretKeyCert, SecretKeyKey and SecretKeyCA are the client Secret's keys.
	SecretKeyCert = corev1.TLSCertKey       // tls.crt
	SecretKeyKey  = corev1.TLSPrivateKeyKey // tls.key
	SecretKeyCA   = "ca.crt"

	// DefaultRequestTimeout bounds each request when Config.RequestTimeout is zero. LINSTOR
	// answers a change once its satellites applied it; its own client waits 300 s, and a
	// resource group modify over many definitions can take longer (linstor-server#253).
	DefaultRequestTimeout = 2 * time.Minute
)

// Config is how Nodewright reaches a site's LINSTOR controller. The certificate material is
// either given (CA, ClientCert, ClientKey, PEM) or named (ClientSecret), for the operator to
// read with Config.WithSecret; not both.
type Config struct {
	// URL is the controller's base URL, http or https, host and port, no path:
	// DefaultURL for Piraeus with API TLS, http://linstor-controller.piraeus-datastore.svc:3370
	// without.
	URL string `json:"url"`
	// CA is the PEM of the CA that signed the controller's certificate (ca.crt); empty: the
	// system's roots. Only with https.
	CA []byte `json:"ca,omitempty"`
	// CAFile is a file holding CA, read when the client is made (a mounted ConfigMap, which
	// the kubelet updates in place); not together with CA.
	CAFile string `json:"caFile,omitempty"`
	// ClientCert and ClientKey are the PEM of the client certificate LINSTOR authenticates
	// Nodewright by (tls.crt, tls.key); both or neither. Only with https.
	ClientCert []byte `json:"clientCert,omitempty"`
	ClientKey  []byte `json:"clientKey,omitempty"`
	// ClientSecret names the kubernetes.io/tls Secret holding tls.crt, tls.key and ca.crt, as
	// Piraeus keeps them; the operator reads it and fills in the three above (WithSecret).
	ClientSecret *SecretRef `json:"clientSecret,omitempty"`
	// RequestTimeout bounds every request; DefaultRequestTimeout when zero.
	RequestTimeout time.Duration `json:"requestTimeout,omitempty"`
	// TokenFile is a file holding a bearer token sent with every request, read again at each
	// one (the kubelet renews a projected ServiceAccount token in place): how the operator
	// authenticates to the LINSTOR gate, nodewright-linstor-gate. Only with https.
	TokenFile string `json:"tokenFile,omitempty"`
	// Transport, when set, wraps the HTTP transport: to count or observe the requests.
	Transport func(http.RoundTripper) http.RoundTripper `json:"-"`

	// secretRead: WithSecret filled the certificates in from ClientSecret.
	secretRead bool
}

// SecretRef names a Secret.
type SecretRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ConfigError is a Config that cannot be used: Field names the field (clientSecret.name) and
// Reason says why.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("LINSTOR configuration: %s: %s", e.Field, e.Reason)
}

func configError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks the configuration without reaching LINSTOR. A Config that names a
// ClientSecret not yet read is valid: New refuses it until WithSecret filled it in.
func (c Config) Validate() error {
	if _, err := c.baseURL(); err != nil {
		return err
	}
	u, _ := url.Parse(c.URL)
	https := u.Scheme == "https"
	if c.RequestTimeout < 0 {
		return configError("requestTimeout", "%s is negative", c.RequestTimeout)
	}
	if ref := c.ClientSecret; ref != nil {
		if ref.Name == "" {
			return configError("clientSecret.name", "empty")
		}
		if ref.Namespace == "" {
			return configError("clientSecret.namespace", "empty")
		}
		if !https {
			return configError("clientSecret", "a client certificate needs an https url, got %s", u.Scheme)
		}
		if !c.secretRead && (len(c.CA) > 0 || len(c.ClientCert) > 0 || len(c.ClientKey) > 0) {
			return configError("clientSecret", "give the certificates or the Secret that holds them, not both")
		}
	}
	if !https && (len(c.CA) > 0 || len(c.ClientCert) > 0 || len(c.ClientKey) > 0) {
		return configError("url", "certificates are given but the url is %s, not https", u.Scheme)
	}
	if c.CAFile != "" && len(c.CA) > 0 {
		return configError("caFile", "give the CA or the file that holds it, not both")
	}
	if c.CAFile != "" && !https {
		return configError("caFile", "a CA is used only with https, the url is %s", u.Scheme)
	}
	if c.TokenFile != "" && !https {
		return configError("tokenFile", "a bearer token is sent only over https, the url is %s", u.Scheme)
	}
	if (len(c.ClientCert) > 0) != (len(c.ClientKey) > 0) {
		if len(c.ClientCert) == 0 {
			return configError("clientCert", "empty, but clientKey is given: give both or neither")
		}
		return configError("clientKey", "empty, but clientCert is given: give both or neither")
	}
	_, err := c.tlsConfig()
	return err
}

func (c Config) baseURL() (*url.URL, error) {
	if strings.TrimSpace(c.URL) == "" {
		return nil, configError("url", "empty; Piraeus' controller with API TLS is %s", DefaultURL)
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, configError("url", "%q is not a URL: %v", c.URL, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, configError("url", "%q: the scheme must be http or https", c.URL)
	case u.Host == "" || u.Hostname() == "":
		return nil, configError("url", "%q names no host", c.URL)
	case u.Port() == "":
		return nil, configError("url", "%q names no port (LINSTOR serves 3370 over http, 3371 over https)", c.URL)
	case u.Path != "" && u.Path != "/":
		return nil, configError("url", "%q has a path; give the controller's base URL only", c.URL)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, configError("url", "%q carries credentials, a query or a fragment; give the controller's base URL only", c.URL)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// HTTPTransport is the HTTP transport to the controller the configuration names, with its TLS
// client configuration and no proxy: for the LINSTOR gate, which forwards requests itself.
// It refuses what New refuses; TokenFile and Transport are New's, not applied here.
func (c Config) HTTPTransport() (*http.Transport, *url.URL, error) {
	if err := c.ready(); err != nil {
		return nil, nil, err
	}
	if c.CAFile != "" {
		ca, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, nil, configError("caFile", "%v", err)
		}
		c.CA, c.CAFile = ca, ""
	}
	base, err := c.baseURL()
	if err != nil {
		return nil, nil, err
	}
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	transport.Proxy = nil
	// Every connection of a batch of calls in parallel stays open for the next batch: the
	// default keeps two, so each batch of an upgrade's (4 at a time) opened, and shook hands
	// on, two new ones.
	transport.MaxIdleConnsPerHost = maxIdleConns
	return transport, base, nil
}

// maxIdleConns is how many idle connections to the controller the transport keeps: more than
// any caller makes in parallel (an upgrade makes 4, its DefaultConcurrency).
const maxIdleConns = 32

// tlsConfig is the TLS client configuration, nil for http.
func (c Config) tlsConfig() (*tls.Config, error) {
	// baseURL reports a URL that does not parse; plain http has no TLS to configure.
	if u, err := url.Parse(c.URL); err != nil || u.Scheme != "https" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(c.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CA) {
			return nil, configError(c.field("ca", SecretKeyCA), "no PEM certificate in it")
		}
		cfg.RootCAs = pool
	}
	if len(c.ClientCert) > 0 || len(c.ClientKey) > 0 {
		pair, err := tls.X509KeyPair(c.ClientCert, c.ClientKey)
		if err != nil {
			return nil, configError(c.field("clientCert", SecretKeyCert), "not a certificate and key pair: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// field names a certificate field as the user gave it: the Config's field, or the Secret's
// key when it was read from one.
func (c Config) field(name, secretKey string) string {
	if c.secretRead && c.ClientSecret != nil {
		return fmt.Sprintf("clientSecret %s/%s: %s", c.ClientSecret.Namespace, c.ClientSecret.Name, secretKey)
	}
	return name
}

// WithSecret returns the configuration with the certificates of the named client Secret
// filled in. The Secret must be the one ClientSecret names and hold tls.crt, tls.key and
// ca.crt; the errors name the Secret and the key.
func (c Config) WithSecret(s *corev1.Secret) (Config, error) {
	ref := c.ClientSecret
	if ref == nil {
		return Config{}, configError("clientSecret", "no Secret is named; the certificates are given directly")
	}
	if s == nil {
		return Config{}, configError("clientSecret", "Secret %s/%s was not read", ref.Namespace, ref.Name)
	}
	if s.Namespace != ref.Namespace || s.Name != ref.Name {
		return Config{}, configError("clientSecret", "Secret %s/%s is not the one named, %s/%s", s.Namespace, s.Name, ref.Namespace, ref.Name)
	}
	where := fmt.Sprintf("clientSecret %s/%s", ref.Namespace, ref.Name)
	var missing []string
	for _, key := range []string{SecretKeyCert, SecretKeyKey, SecretKeyCA} {
		if len(s.Data[key]) == 0 {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		return Config{}, configError(where, "no %s in the Secret's data (Piraeus' client Secret holds tls.crt, tls.key and ca.crt)", strings.Join(missing, ", "))
	}
	out := c
	out.CA, out.ClientCert, out.ClientKey = s.Data[SecretKeyCA], s.Data[SecretKeyCert], s.Data[SecretKeyKey]
	out.secretRead = true
	if err := out.Validate(); err != nil {
		return Config{}, err
	}
	return out, nil
}

// ready is Validate, and the certificates of a named Secret read.
func (c Config) ready() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.ClientSecret != nil && !c.secretRead {
		return configError("clientSecret", "Secret %s/%s is named but not read yet (Config.WithSecret)", c.ClientSecret.Namespace, c.ClientSecret.Name)
	}
	return nil
}
