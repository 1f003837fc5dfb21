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

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
	// health sets each member's checks and its connections' keepalives (memberTransport).
	health HealthOptions
	// wake carries the name of a member engaged, or whose refusal changed, to its summary.
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

func newMembers(clusterOptions []cluster.Option, health HealthOptions, wake chan<- event.TypedGenericEvent[string]) *members {
	return &members{clusterOptions: clusterOptions, health: health.withDefaults(), wake: wake, engaged: map[string]*engaged{}, refused: map[string]refusal{}}
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
	delete(m.refused, name)
	m.mu.Unlock()
	if current != nil && current.hash == hash {
		return nil
	}
	m.disengage(name)
	cl, err := newMemberCluster(cfg, m.health, m.clusterOptions)
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
	// Its summary is made at once (one that said it was refused says it answers once its
	// checks found so): thousands at start-up are then written while the hub connects to the
	// members, not after.
	m.notify(ctx, name)
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
// The hub keeps no cache of a member and reads it with its one REST client (memberREST):
// what reads the member (objectWatcher, workflowReader, bootReader, Checker) needs its
// configuration, its HTTP client and that REST client alone. controller-runtime's cluster,
// with its clients, codecs and RESTMapper, costs milliseconds of CPU to build: thousands of
// members at start-up would wait on it. It is built only if something asks for it.
//
// Its transport has the kernel keep TCP keepalives on each connection, closing one whose
// member sent nothing, its probes unanswered, for a health interval, and counts the member's
// open connections (memberTransport): the Checker's evidence.
func newMemberCluster(cfg *rest.Config, health HealthOptions, opts []cluster.Option) (cluster.Cluster, error) {
	cfg = memberConfig(cfg)
	health = health.withDefaults()
	tcfg, heard, err := memberTransport(cfg, health.keepAliveIdle(), health.userTimeout())
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(tcfg)
	if err != nil {
		return nil, err
	}
	hc.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("the member's API server redirects to %s: the hub follows no redirect", req.URL.Redacted())
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	var o cluster.Options
	for _, opt := range opts {
		opt(&o)
	}
	return &memberCluster{config: cfg, http: hc, scheme: o.Scheme, options: opts, rest: dc.RESTClient(), heard: heard, answered: make(chan struct{})}, nil
}

// memberCluster is a member's cluster as the hub reads it: its configuration, its HTTP
// client and one REST client. The rest of cluster.Cluster (a cached client, a RESTMapper,
// an event recorder) is controller-runtime's cluster, built on first use.
type memberCluster struct {
	config  *rest.Config
	http    *http.Client
	scheme  *runtime.Scheme
	options []cluster.Option
	rest    rest.Interface
	// heard counts the member's open connections.
	heard *heard
	// answered is closed when the member first answered the hub's health check: its
	// connection is up. The watches and reads wait for it, so that they share that one
	// connection: started at once on a new member, each would open a TLS connection of its
	// own (HTTP/2 keeps the first and closes the others), and each handshake costs the hub
	// a millisecond of CPU, thousands of members at start-up.
	answered     chan struct{}
	answeredOnce sync.Once

	once sync.Once
	full cluster.Cluster
}

// answeredGate is closed once the member answered a health check; a cluster that is not a
// member's is answered.
func answeredGate(cl cluster.Cluster) <-chan struct{} {
	if m, ok := cl.(*memberCluster); ok {
		return m.answered
	}
	closed := make(chan struct{})
	close(closed)
	return closed
}

// heardOf counts the member's open connections; nil for a cluster that is not a member's.
func heardOf(cl cluster.Cluster) *heard {
	if m, ok := cl.(*memberCluster); ok {
		return m.heard
	}
	return nil
}

// markAnswered says the member answered a health check.
func markAnswered(cl cluster.Cluster) {
	if m, ok := cl.(*memberCluster); ok {
		m.answeredOnce.Do(func() { close(m.answered) })
	}
}

// waitAnswered waits until the member answered a health check; false if ctx ended first.
func waitAnswered(ctx context.Context, gate <-chan struct{}) bool {
	select {
	case <-gate:
		return true
	case <-ctx.Done():
		return false
	}
}

var _ cluster.Cluster = &memberCluster{}

func (m *memberCluster) GetHTTPClient() *http.Client { return m.http }
func (m *memberCluster) GetConfig() *rest.Config     { return m.config }
func (m *memberCluster) GetScheme() *runtime.Scheme  { return m.scheme }

// Start starts nothing: the hub starts no cache of a member.
func (m *memberCluster) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// cluster is controller-runtime's cluster of the member, built once. Building it fails
// only on a configuration rest.HTTPClientFor already took.
func (m *memberCluster) cluster() cluster.Cluster {
	m.once.Do(func() {
		full, err := cluster.New(m.config, append(m.options, func(o *cluster.Options) { o.HTTPClient = m.http })...)
		if err != nil {
			panic(fmt.Sprintf("building the member's cluster from a configuration already checked: %v", err))
		}
		m.full = full
	})
	return m.full
}

func (m *memberCluster) GetCache() cache.Cache                { return m.cluster().GetCache() }
func (m *memberCluster) GetClient() client.Client             { return m.cluster().GetClient() }
func (m *memberCluster) GetFieldIndexer() client.FieldIndexer { return m.cluster().GetFieldIndexer() }
func (m *memberCluster) GetRESTMapper() meta.RESTMapper       { return m.cluster().GetRESTMapper() }
func (m *memberCluster) GetAPIReader() client.Reader          { return m.cluster().GetAPIReader() }
func (m *memberCluster) GetEventRecorderFor(name string) record.EventRecorder {
	return m.cluster().GetEventRecorderFor(name)
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
