package linstorgate

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/spectrocloud/nodewright/internal/linstor"
)

// Upstream is the LINSTOR controller the gate forwards to, from the gate's own flags: its URL
// and the client Secret with LINSTOR's client certificate, which the gate alone reads.
type Upstream struct {
	// Config names the controller: URL, ClientSecret (read from the API server), and the
	// RequestTimeout of the gate's own reads.
	Config linstor.Config
	// Secrets reads the client Secret.
	Secrets corev1client.SecretsGetter
	// Reread is how often the client Secret is read again to follow a renewed certificate
	// (30 s when zero; only when a request comes).
	Reread time.Duration

	mu      sync.Mutex
	read    time.Time
	version string
	current *upstreamClients
}

// upstreamClients are what one version of the configuration gives: the transport the gate
// forwards through, the base URL, and a LINSTOR client for the gate's own reads.
type upstreamClients struct {
	http *http.Client
	base *url.URL
	lin  *linstor.Client
}

// clients returns the clients of the configuration as it stands, reading the client Secret
// again when it was read longer than Reread ago.
func (u *Upstream) clients(ctx context.Context) (*upstreamClients, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	reread := u.Reread
	if reread == 0 {
		reread = 30 * time.Second
	}
	if u.current != nil && time.Since(u.read) < reread {
		return u.current, nil
	}
	cfg := u.Config
	version := ""
	if ref := cfg.ClientSecret; ref != nil {
		secret, err := u.Secrets.Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("LINSTOR's client Secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		if cfg, err = cfg.WithSecret(secret); err != nil {
			return nil, err
		}
		version = secret.ResourceVersion
	}
	u.read = time.Now()
	if u.current != nil && version == u.version {
		return u.current, nil
	}
	transport, base, err := cfg.HTTPTransport()
	if err != nil {
		return nil, err
	}
	lin, err := linstor.New(cfg)
	if err != nil {
		return nil, err
	}
	if u.current != nil {
		u.current.http.CloseIdleConnections()
	}
	u.current = &upstreamClients{http: &http.Client{Transport: transport}, base: base, lin: lin}
	u.version = version
	return u.current, nil
}

// Ready is a readiness check: the client Secret can be read and makes a client.
func (u *Upstream) Ready(r *http.Request) error {
	_, err := u.clients(r.Context())
	return err
}

// Describe is where the gate forwards: the URL and the client Secret.
func (u *Upstream) Describe() linstor.GateUpstream {
	out := linstor.GateUpstream{URL: u.Config.URL}
	if ref := u.Config.ClientSecret; ref != nil {
		out.ClientSecret = ref.Namespace + "/" + ref.Name
	}
	return out
}
