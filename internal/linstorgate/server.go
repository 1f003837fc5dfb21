package linstorgate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/linstor"
)

// Options are the gate's settings, its command's flags (BindFlags). Where LINSTOR is, and
// which Secret holds its client certificate, come from here only: the operator has no say.
type Options struct {
	// Listen is the address of the gate's HTTPS server, which serves the operator.
	Listen string
	// ProbeAddr serves /healthz and /readyz over plain HTTP (the kubelet's probes).
	ProbeAddr string
	// TLSCertFile and TLSKeyFile are the gate's serving certificate (the chart's Secret),
	// read again when they change.
	TLSCertFile, TLSKeyFile string
	// LINSTORURL is the LINSTOR controller's base URL (the chart's linstor.url).
	LINSTORURL string
	// LINSTORClientSecret, namespace/name, is the kubernetes.io/tls Secret with LINSTOR's
	// client certificate (the chart's linstor.clientSecret); empty: none.
	LINSTORClientSecret string
	// RequestTimeout bounds the gate's own reads of LINSTOR.
	RequestTimeout time.Duration
	// Operator, namespace/name, is the operator's ServiceAccount: the one identity served.
	Operator string
	// Audience is the audience the operator's tokens must be for.
	Audience string
	// RegisterNodes allows the registration of a Kubernetes Node's satellite at its
	// InternalIP (EdgeProfile storage.linstor.satellites: Nodewright).
	RegisterNodes bool
	// AuditDir keeps the gate's audit trail; empty: standard output only.
	AuditDir string
	// AuditKeyFile is the ed25519 key (PKCS #8 PEM) that signs the trail's checkpoints;
	// empty: a key made at start, whose public key the log prints.
	AuditKeyFile string
	// AuditStdout also writes every line of the trail to standard output.
	AuditStdout bool
}

// BindFlags registers the options as flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Listen, "listen", ":8443", "Address of the HTTPS server the operator calls.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the liveness (/healthz) and readiness (/readyz) probes, plain HTTP.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "The gate's serving certificate (PEM), read again when it changes.")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", "", "The key of --tls-cert-file (PEM).")
	fs.StringVar(&o.LINSTORURL, "linstor-url", "", "Base URL of the site's LINSTOR controller (Piraeus' with API TLS: "+linstor.DefaultURL+").")
	fs.StringVar(&o.LINSTORClientSecret, "linstor-client-secret", "", "namespace/name of the kubernetes.io/tls Secret with LINSTOR's client certificate (tls.crt, tls.key, ca.crt; Piraeus' is "+linstor.DefaultNamespace+"/"+linstor.DefaultClientSecret+"); empty: none.")
	fs.DurationVar(&o.RequestTimeout, "linstor-request-timeout", linstor.DefaultRequestTimeout, "Bound of the gate's own reads of LINSTOR (the checks before a deletion).")
	fs.StringVar(&o.Operator, "operator-serviceaccount", "nodewright-system/nodewright-operator", "namespace/name of the operator's ServiceAccount, the one identity the gate serves.")
	fs.StringVar(&o.Audience, "audience", DefaultAudience, "The audience the operator's tokens must be for.")
	fs.BoolVar(&o.RegisterNodes, "register-nodes", false, "Allow the registration of a Kubernetes Node's LINSTOR satellite at its InternalIP (EdgeProfile storage.linstor.satellites: Nodewright).")
	fs.StringVar(&o.AuditDir, "audit-dir", "", "Folder of the gate's audit trail (every refusal and every forwarded change); empty: standard output only.")
	fs.StringVar(&o.AuditKeyFile, "audit-key-file", "", "ed25519 private key (PKCS #8 PEM) that signs the trail's checkpoints; empty: one made at start, its public key printed in the log.")
	fs.BoolVar(&o.AuditStdout, "audit-stdout", true, "Also write every line of the audit trail to standard output, for a log collector.")
}

// Validate reports settings that cannot work, each naming its flag.
func (o Options) Validate() error {
	var errs []error
	if o.Listen == "" {
		errs = append(errs, errors.New("--listen: empty"))
	}
	if o.TLSCertFile == "" || o.TLSKeyFile == "" {
		errs = append(errs, errors.New("--tls-cert-file, --tls-key-file: the gate serves only HTTPS; give both"))
	}
	if _, err := o.upstream(); err != nil {
		errs = append(errs, err)
	}
	if _, err := serviceAccountUser(o.Operator); err != nil {
		errs = append(errs, fmt.Errorf("--operator-serviceaccount: %w", err))
	}
	if o.Audience == "" {
		errs = append(errs, errors.New("--audience: empty"))
	}
	if o.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--linstor-request-timeout %s: must be positive", o.RequestTimeout))
	}
	return errors.Join(errs...)
}

func (o Options) upstream() (linstor.Config, error) {
	cfg := linstor.Config{URL: o.LINSTORURL, RequestTimeout: o.RequestTimeout}
	if o.LINSTORURL == "" {
		return cfg, errors.New("--linstor-url: empty; the gate forwards to the LINSTOR controller it names")
	}
	if o.LINSTORClientSecret != "" {
		ns, name, ok := strings.Cut(o.LINSTORClientSecret, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return cfg, fmt.Errorf("--linstor-client-secret %q: want namespace/name", o.LINSTORClientSecret)
		}
		cfg.ClientSecret = &linstor.SecretRef{Namespace: ns, Name: name}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("--linstor-url, --linstor-client-secret: %w", err)
	}
	return cfg, nil
}

// serviceAccountUser is the user name of namespace/name's tokens.
func serviceAccountUser(ref string) (string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return "", fmt.Errorf("%q: want namespace/name", ref)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return "", fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", fmt.Errorf("name %q: %s", name, strings.Join(msgs, "; "))
	}
	return "system:serviceaccount:" + ns + ":" + name, nil
}

// New builds the gate of the options, its audit log opened; Close the log when done.
func New(cfg *rest.Config, o Options, log logr.Logger) (*Gate, *audit.Log, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	up, _ := o.upstream()
	user, _ := serviceAccountUser(o.Operator)
	trail, err := openAudit(o, log)
	if err != nil {
		return nil, nil, err
	}
	g := &Gate{
		Auth:          &Authenticator{Reviews: kube.AuthenticationV1().TokenReviews(), Audience: o.Audience, User: user},
		Upstream:      &Upstream{Config: up, Secrets: kube.CoreV1()},
		RegisterNodes: o.RegisterNodes,
		Audit:         trail,
		Log:           log,
	}
	if o.RegisterNodes {
		g.Nodes = kube.CoreV1().Nodes()
	}
	return g, trail, nil
}

// openAudit opens the gate's audit log: a FileSink in AuditDir (with a copy on standard
// output when AuditStdout), or standard output alone.
func openAudit(o Options, log logr.Logger) (*audit.Log, error) {
	var signer *audit.Signer
	if o.AuditKeyFile != "" {
		pem, err := os.ReadFile(o.AuditKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--audit-key-file: %w", err)
		}
		if signer, err = audit.LoadSigner(pem); err != nil {
			return nil, fmt.Errorf("--audit-key-file %s: %w", o.AuditKeyFile, err)
		}
	} else {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		signer = audit.NewSigner(key)
		pub, err := audit.MarshalPublicKey(signer.PublicKey())
		if err != nil {
			return nil, err
		}
		log.Info("The audit trail's checkpoints are signed with a key made at start (no --audit-key-file); its public key follows", "keyID", signer.KeyID(), "publicKey", string(pub))
	}
	stdout := audit.NewWriterSink(os.Stdout)
	if o.AuditDir == "" {
		return audit.NewLog(stdout, signer, audit.ChainState{}, audit.LogOptions{CheckpointInterval: time.Minute}), nil
	}
	sink, err := audit.OpenFileSink(o.AuditDir, audit.FileSinkOptions{})
	if err != nil {
		return nil, fmt.Errorf("--audit-dir %s: %w", o.AuditDir, err)
	}
	var out audit.Sink = sink
	if o.AuditStdout {
		out = audit.Tee(sink, func(err error) {
			log.Error(err, "Copying the audit trail to standard output failed; the trail keeps the records")
		}, stdout)
	}
	return audit.NewLog(out, signer, sink.State(), audit.LogOptions{CheckpointInterval: time.Minute}), nil
}

// Listeners opens the options' addresses: the gate's, and the probes' (nil when ProbeAddr is
// empty or "0").
func (o Options) Listeners() (gate, probes net.Listener, err error) {
	if gate, err = net.Listen("tcp", o.Listen); err != nil {
		return nil, nil, fmt.Errorf("--listen: %w", err)
	}
	if o.ProbeAddr != "" && o.ProbeAddr != "0" {
		if probes, err = net.Listen("tcp", o.ProbeAddr); err != nil {
			_ = gate.Close()
			return nil, nil, fmt.Errorf("--health-probe-bind-address: %w", err)
		}
	}
	return gate, probes, nil
}

// Serve serves the gate over HTTPS on ln, and its probes on probes (when not nil), until ctx
// ends.
func Serve(ctx context.Context, g *Gate, o Options, ln, probes net.Listener) error {
	certs := &certFiles{cert: o.TLSCertFile, key: o.TLSKeyFile}
	if _, err := certs.get(nil); err != nil {
		_ = ln.Close()
		if probes != nil {
			_ = probes.Close()
		}
		return fmt.Errorf("--tls-cert-file, --tls-key-file: %w", err)
	}
	srv := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := g.Upstream.Ready(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	probeSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- srv.ServeTLS(ln, "", "") }()
	if probes != nil {
		go func() { errs <- probeSrv.Serve(probes) }()
	}
	g.Log.Info("Serving the LINSTOR gate", "listen", ln.Addr().String(), "linstor", o.LINSTORURL, "clientSecret", o.LINSTORClientSecret,
		"operator", o.Operator, "audience", o.Audience, "registerNodes", o.RegisterNodes)
	var serveErr error
	select {
	case <-ctx.Done():
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return errors.Join(serveErr, srv.Shutdown(shutdown), probeSrv.Shutdown(shutdown))
}

// certFiles serves a certificate from files, read again when they change (cert-manager or a
// chart upgrade renews them in place).
type certFiles struct {
	cert, key string

	mu      sync.Mutex
	checked time.Time
	stamp   string
	current *tls.Certificate
}

func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil && time.Since(c.checked) < 10*time.Second {
		return c.current, nil
	}
	c.checked = time.Now()
	stamp := ""
	for _, f := range []string{c.cert, c.key} {
		st, err := os.Stat(f)
		if err != nil {
			if c.current != nil {
				return c.current, nil
			}
			return nil, err
		}
		stamp += fmt.Sprintf("%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	if c.current != nil && stamp == c.stamp {
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		if c.current != nil {
			return c.current, nil
		}
		return nil, err
	}
	c.current, c.stamp = &pair, stamp
	return c.current, nil
}
