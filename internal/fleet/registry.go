package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"unicode/utf8"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// members are the hub's member clusters by member name ("kubeconfig/<secret>",
// "clusterprofile/<namespace>/<name>"): those engaged, and those whose registration the hub
// would not engage, with why. It is the hub manager's multicluster.Provider; the kubeconfig
// Secrets and the ClusterProfiles (their controllers) engage and refuse members through it.
type members struct {
	mgr mcmanager.Manager
	// clusterOptions configure each member's cluster (its cache and scheme).
	clusterOptions []cluster.Option
	// wake carries the name of a member whose refusal changed, to its summary.
	wake chan<- event.TypedGenericEvent[string]

	mu       sync.Mutex
	engaged  map[string]*engaged
	refused  map[string]refusal
	indexers []indexer
}

type engaged struct {
	cluster cluster.Cluster
	cancel  context.CancelFunc
	hash    string
}

// refusal is why a registration is not engaged: Reason is a summary's condition reason.
type refusal struct {
	Reason, Message string
}

type indexer struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

var _ multicluster.Provider = &members{}

func newMembers(clusterOptions []cluster.Option, wake chan<- event.TypedGenericEvent[string]) *members {
	return &members{clusterOptions: clusterOptions, wake: wake, engaged: map[string]*engaged{}, refused: map[string]refusal{}}
}

// engage engages the member with cfg, which checkConfig accepted, unless it is engaged with
// the same access already; a changed access (rotated credentials, a new address) engages it
// anew. It does not wait for the member's caches: a member that does not answer yet is
// engaged all the same, and shown unreachable.
func (m *members) engage(ctx context.Context, name string, cfg *rest.Config) error {
	hash, err := configHash(cfg)
	if err != nil {
		return err
	}
	m.mu.Lock()
	current := m.engaged[name]
	_, wasRefused := m.refused[name]
	delete(m.refused, name)
	m.mu.Unlock()
	if current != nil && current.hash == hash {
		return nil
	}
	m.disengage(name)
	cl, err := newMemberCluster(cfg, m.clusterOptions)
	if err != nil {
		return fmt.Errorf("member %s: %w", name, err)
	}
	m.mu.Lock()
	for _, ix := range m.indexers {
		if err := cl.GetFieldIndexer().IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			m.mu.Unlock()
			return err
		}
	}
	m.mu.Unlock()
	// The member lives as long as the hub, not this one reconcile. Its cluster is not
	// started: the hub keeps no cache of a member.
	clusterCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// Listed before its watches and checks begin: their first findings wake the summary,
	// which must then find the member engaged (else its reconcile fails, and is retried
	// at the rate failures are, which thousands of members at start-up would wait on).
	e := &engaged{cluster: cl, cancel: cancel, hash: hash}
	m.mu.Lock()
	m.engaged[name] = e
	m.mu.Unlock()
	if err := m.mgr.Engage(clusterCtx, name, cl); err != nil {
		m.mu.Lock()
		if m.engaged[name] == e {
			delete(m.engaged, name)
		}
		m.mu.Unlock()
		cancel()
		return err
	}
	if wasRefused {
		m.notify(ctx, name)
	}
	return nil
}

// refuse disengages the member, if it was engaged, and records why: its summary says so.
func (m *members) refuse(ctx context.Context, name string, r refusal) {
	m.disengage(name)
	m.mu.Lock()
	changed := m.refused[name] != r
	m.refused[name] = r
	m.mu.Unlock()
	if changed {
		ctrl.LoggerFrom(ctx).Info("The registration is not engaged", "member", name, "reason", r.Reason, "why", r.Message)
		m.notify(ctx, name)
	}
}

// refusalOf says why a registration's access was not used. A *Refusal is a policy's
// refusal; anything else is access not usable yet (a Secret not written, say).
func refusalOf(err error) refusal {
	var r *Refusal
	if errors.As(err, &r) {
		return refusal{Reason: fleetv1alpha1.ReasonRegistrationRefused, Message: "The hub refuses the registration: " + err.Error()}
	}
	return refusal{Reason: fleetv1alpha1.ReasonNoUsableAccess, Message: "The registration gives no access the hub can use: " + err.Error()}
}

// forget disengages a member whose registration is gone.
func (m *members) forget(name string) {
	m.disengage(name)
	m.mu.Lock()
	delete(m.refused, name)
	m.mu.Unlock()
}

func (m *members) disengage(name string) {
	m.mu.Lock()
	e := m.engaged[name]
	delete(m.engaged, name)
	m.mu.Unlock()
	if e != nil {
		e.cancel()
	}
}

func (m *members) notify(ctx context.Context, name string) {
	select {
	case m.wake <- event.TypedGenericEvent[string]{Object: name}:
	case <-ctx.Done():
	}
}

// Refused says why the member's registration is not engaged, if the hub refused it.
func (m *members) Refused(name string) (refusal, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.refused[name]
	return r, ok
}

// stop disengages every member.
func (m *members) stop() {
	m.mu.Lock()
	all := m.engaged
	m.engaged = map[string]*engaged{}
	m.mu.Unlock()
	for _, e := range all {
		e.cancel()
	}
}

// Get returns the engaged member.
func (m *members) Get(_ context.Context, name string) (cluster.Cluster, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.engaged[name]; ok {
		return e.cluster, nil
	}
	return nil, multicluster.ErrClusterNotFound
}

// IndexField indexes the field on every member, now and later.
func (m *members) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.indexers = append(m.indexers, indexer{obj, field, extract})
	for _, e := range m.engaged {
		if err := e.cluster.GetFieldIndexer().IndexField(ctx, obj, field, extract); err != nil {
			return err
		}
	}
	return nil
}

// newMemberCluster is the member's cluster on the hub. Its HTTP client follows no redirect:
// client-go adds the credential to every request it sends, a redirected one too, so a
// member (or whatever answers at its address) could otherwise have the hub send the
// member's credential, and requests, to any address it names.
//
// The cluster is never started: the hub keeps no cache of a member. What reads the member
// (objectWatcher, workflowReader, bootReader, Checker) shares its one REST client
// (memberREST).
func newMemberCluster(cfg *rest.Config, opts []cluster.Option) (cluster.Cluster, error) {
	cfg = memberConfig(cfg)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	hc.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("the member's API server redirects to %s: the hub follows no redirect", req.URL.Redacted())
	}
	cl, err := cluster.New(cfg, append(opts, func(o *cluster.Options) { o.HTTPClient = hc })...)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &memberCluster{Cluster: cl, rest: dc.RESTClient()}, nil
}

// memberCluster is a member's cluster with the REST client the hub reads it with.
type memberCluster struct {
	cluster.Cluster
	rest rest.Interface
}

// memberREST is the member's REST client, with the member's own HTTP client.
func memberREST(cl cluster.Cluster) (rest.Interface, error) {
	if m, ok := cl.(*memberCluster); ok {
		return m.rest, nil
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cl.GetConfig(), cl.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	return dc.RESTClient(), nil
}

// configHash tells two accesses apart: a new one re-engages the member.
func configHash(cfg *rest.Config) (string, error) {
	data, err := json.Marshal(struct {
		Host, Token, ServerName string
		CA, Cert, Key           []byte
		Insecure                bool
		Exec                    any
	}{cfg.Host, cfg.BearerToken, cfg.ServerName, cfg.CAData, cfg.CertData, cfg.KeyData, cfg.Insecure, cfg.ExecProvider})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// clip cuts s to at most n characters: what a member or a registration says is held to the
// summary's limits.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}
