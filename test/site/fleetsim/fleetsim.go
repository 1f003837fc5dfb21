// Package fleetsim plays many member clusters in one process, for the fleet hub's
// benchmarks and tests: a real kube-apiserver costs about 270 MiB, so 3,500 members cannot
// each have one. Each virtual member is its own HTTPS endpoint on 127.0.0.1 and serves what
// the hub reads of a member (health, version, discovery, and get, list and watch of the
// Nodewright kinds, the checkpoint ConfigMap and the operator Deployment), and its
// CustomResourceDefinitions, with the semantics of a kube-apiserver: one resourceVersion
// counter per member, a bounded event history, bookmarks, 410 Gone, pagination, selectors,
// bearer tokens. The hub's tokens read; the member's administrator (Admin) also writes, as a
// test or the member's operator does. Fault hooks make members stop, freeze (the API server
// hangs), lose their link (Cut), slow down, revoke the hub's credential, or change all at
// once.
//
// Where it differs from a kube-apiserver (the faithfulness test, fleetsim_test.go, checks the
// rest against a real one):
//   - JSON only (a request accepting protobuf alone gets 406, a protobuf body 415); legacy
//     discovery, even when the aggregated one is asked for; /apis lists only apps,
//     apiextensions and the Nodewright group.
//   - Lists return the latest state whatever their resourceVersion; a continue token's page
//     shows the objects after its key as they are now, not as they were at its version.
//   - Field selectors on metadata.name and metadata.namespace only.
//   - No defaulting, no validation (a CustomResourceDefinition is an object like any other),
//     no managedFields, no namespaces (an object's namespace need not exist). Put never bumps
//     the generation; an administrator's write does, as a kube-apiserver's would.
//   - No anonymous access (/readyz without a token is 401); any write with the hub's token is
//     a 403, and no RBAC otherwise: the hub's tokens read everything served. The
//     administrator creates, updates (the object or its status), merge-patches, applies (a
//     server-side apply taken as a merge patch: no field ownership) and deletes (at once: no
//     finalizers, no preconditions); no JSON patch, no deletecollection, no dry run
//     (write.go). No client certificates.
//   - One event history per member for all kinds: a busy kind can push a quiet kind's watch
//     into 410 sooner than a real server would. A watch from a future version gets 504 after
//     3 s. Bookmarks every BookmarkInterval.
//   - Freeze still completes the TLS handshake and answers HTTP/2 PINGs; Cut holds the bytes
//     of the member's connections in the process and has the kernel drop what arrives on
//     them (a socket filter), not the network: a new connection still completes TCP's
//     handshake, where a cut link would leave it unanswered; Slow delays the start
//     of each request, not the events of open watches; Revoke and RevokeToken leave open
//     watches running, as a real server does.
//   - sendInitialEvents is answered but untested (client-go's reflectors do not ask for it).
//
// It does not import the fleet package, so that the fleet package's own tests may use it.
package fleetsim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Options configure the simulator.
type Options struct {
	// Members is how many members to play; each is its own endpoint.
	Members int
	// Namespace is the Nodewright namespace on each member; default "nodewright-system".
	Namespace string
	// KubernetesVersion is each member's /version gitVersion; default "v1.34.2". A member's
	// own can be changed with Member.SetKubernetesVersion.
	KubernetesVersion string
	// Workflows is how many BondModeFlipPlans and how many ReplicationUpgrades each member
	// holds; default 0.
	Workflows int
	// AgentStatuses is how many NodewrightAgentStatuses, each with a Kairos boot, each
	// member holds; default 0.
	AgentStatuses int
	// History is how many events each member keeps for watches and continue tokens to
	// resume from, as a kube-apiserver's watch cache and etcd's compaction do; default 256.
	History int
	// BookmarkInterval is how often an open watch that allows bookmarks gets one; default
	// 30s. The kube-apiserver's watch cache sends one about every minute.
	BookmarkInterval time.Duration
	// Empty members hold no NodewrightCluster, checkpoint, operator Deployment, workflows
	// or agent statuses until written (Put, or a write with Admin): for tests that write
	// what they need, as on a fresh API server.
	Empty bool
	// Objects are written to every member after the rest: CustomResourceDefinitions, say,
	// which a member holds as objects (it validates nothing by them).
	Objects []client.Object
}

func (o *Options) defaults() error {
	if o.Members <= 0 {
		return fmt.Errorf("options.Members is %d: at least one member is needed", o.Members)
	}
	if o.Namespace == "" {
		o.Namespace = "nodewright-system"
	}
	if o.KubernetesVersion == "" {
		o.KubernetesVersion = "v1.34.2"
	}
	if o.History <= 0 {
		o.History = 256
	}
	if o.BookmarkInterval <= 0 {
		o.BookmarkInterval = 30 * time.Second
	}
	if o.Workflows < 0 || o.AgentStatuses < 0 {
		return fmt.Errorf("options.Workflows (%d) and options.AgentStatuses (%d) must not be negative", o.Workflows, o.AgentStatuses)
	}
	if _, _, err := parseGitVersion(o.KubernetesVersion); err != nil {
		return fmt.Errorf("options.KubernetesVersion: %w", err)
	}
	return nil
}

// Sim is the running simulator.
type Sim struct {
	opts     Options
	caPEM    []byte
	tls      *tls.Config
	members  []*Member
	requests atomic.Int64

	closeOnce sync.Once
	// ctx ends when the simulator closes: pending bursts stop then.
	ctx  context.Context
	stop context.CancelFunc
}

// Start starts every member, listening when it returns, and stops them when ctx ends or
// Close is called.
func Start(ctx context.Context, o Options) (*Sim, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	caPEM, cert, err := newServingCert()
	if err != nil {
		return nil, fmt.Errorf("making the serving certificate: %w", err)
	}
	s := &Sim{opts: o, caPEM: caPEM}
	s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	checkpoint, err := checkpointLine(ctx)
	if err != nil {
		return nil, fmt.Errorf("making the checkpoint line: %w", err)
	}
	s.ctx, s.stop = context.WithCancel(ctx)
	for i := range o.Members {
		m, err := newMember(s, fmt.Sprintf("m-%04d", i+1))
		if err == nil {
			err = m.seed(checkpoint)
		}
		if err == nil {
			err = m.listen(0)
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("starting member %d of %d: %w", i+1, o.Members, err)
		}
		s.members = append(s.members, m)
	}
	go func() {
		<-s.ctx.Done()
		s.Close()
	}()
	return s, nil
}

// Close stops every member; open watches end.
func (s *Sim) Close() {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			s.stop()
		}
		for _, m := range s.members {
			m.close()
		}
	})
}

// CA is the PEM of the CA that signed every member's serving certificate.
func (s *Sim) CA() []byte { return append([]byte(nil), s.caPEM...) }

// Members are the members, in name order.
func (s *Sim) Members() []*Member { return append([]*Member(nil), s.members...) }

// Requests counts the requests the members received so far, answered or not.
func (s *Sim) Requests() int64 { return s.requests.Load() }

// Burst changes each member's NodewrightCluster once with fn, the changes spread evenly over
// within; it returns at once. A change that fails (a member's cluster removed) is skipped.
func (s *Sim) Burst(members []*Member, within time.Duration, fn func(*nwv1.NodewrightCluster)) {
	if len(members) == 0 {
		return
	}
	members = append([]*Member(nil), members...)
	go func() {
		start := time.Now()
		for i, m := range members {
			// Each change at its own time from the start, so that slow writes do not stretch
			// the burst.
			at := start.Add(within * time.Duration(i) / time.Duration(len(members)))
			if wait := time.Until(at); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-s.ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			_ = m.UpdateCluster(fn)
		}
	}()
}

// errClosed is what a write to a member of a closed simulator returns.
var errClosed = errors.New("the simulator is closed")
