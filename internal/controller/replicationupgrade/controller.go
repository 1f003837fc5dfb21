// Package replicationupgrade is the controller of ReplicationUpgrade: it turns a cluster whose
// LINSTOR storage lives on one node into a replicated one when peers join. The stages and
// their rollback come from the pure plan in internal/replupgrade and run on the shared workflow
// engine; this package talks to LINSTOR (internal/linstor), asks the original node's agent for
// DRBD's online verify (typed NodeOperations), releases the nodes' not-ready taints, and says
// what it observed.
//
// Everything the upgrade changes outside its own replicas (the balance task, the place counts,
// the quorum options, the taints) is recorded in status.undo before it is changed, so that a
// rollback after a crash anywhere puts back exactly what was there. Its own replicas are found
// again from LINSTOR: every resource of a recorded volume on a joining node.
package replicationupgrade

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=replicationupgrades,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=replicationupgrades/status,verbs=get;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=replicationupgrades/finalizers,verbs=update
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,namespace=nodewright-agent,resources=nodeoperations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightagentstatuses,verbs=get;list;watch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=edgeprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Finalizer holds an upgrade until a running one is rolled back.
const Finalizer = "nodewright.spectrocloud.com/replicationupgrade"

// The defaults of the Reconciler's tunables.
const (
	// DefaultBatchSize is how many replicas one reconcile places (or deletes).
	DefaultBatchSize = 20
	// DefaultConcurrency is how many LINSTOR requests of a batch are in flight at once, and
	// how many online verifies run at once.
	DefaultConcurrency = 4
	// DefaultPoll is how often a stage that waits for LINSTOR (a synchronisation, a
	// deletion, a satellite) reads it again: LINSTOR has no watch.
	DefaultPoll = 2 * time.Second
	// defaultSyncTimeout is spec.syncTimeout's default (the CRD's).
	defaultSyncTimeout = 6 * time.Hour
	// satelliteTimeout bounds the Preflight's wait for the joining nodes' satellites.
	satelliteTimeout = 10 * time.Minute
	// verifyDeadline bounds one volume's online verify on the agent.
	verifyDeadline = 6 * time.Hour
)

// Reconciler runs ReplicationUpgrades.
type Reconciler struct {
	engine.Deps
	Client client.Client
	// APIReader reads past the cache.
	APIReader client.Reader
	// AgentNamespace is where the node agents run their NodeOperations; without it no upgrade
	// can verify (its Preflight fails saying so).
	AgentNamespace string
	// LINSTOR is how to reach the LINSTOR gate, nodewright-linstor-gate (the operator's
	// --linstor-gate-* flags): its URL, the CA of its certificate, the token file. The gate
	// alone holds LINSTOR's client certificate.
	LINSTOR linstor.Config
	// BatchSize, Concurrency and Poll tune the stages; the defaults above when zero.
	BatchSize   int
	Concurrency int
	Poll        time.Duration

	engine *engine.Engine[*nwv1.ReplicationUpgrade]

	mu       sync.Mutex
	client   *linstor.Client
	clientCA []byte
	// syncRead is when each upgrade's Sync last read LINSTOR: a pace, not state (a restarted
	// operator reads at once).
	syncRead map[types.UID]time.Time
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	e, err := engine.Start(mgr, replupgrade.Descriptor, r, &r.Deps, &r.Client, &r.APIReader)
	r.engine = e
	return err
}

// Reconcile advances one upgrade by at most one action (the workflow engine's loop).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.engine.Reconcile(ctx, req)
}

// Actions are the stages' actions. Each but the taints' talks to LINSTOR: without a usable
// client of the gate, the Preflight fails saying why, and a later step waits (whatever
// changed LINSTOR's configuration may be put right; a person can also delete the upgrade,
// whose rollback waits the same way).
func (r *Reconciler) Actions() engine.Actions[*nwv1.ReplicationUpgrade] {
	type action = func(context.Context, *scope) (engine.Outcome, error)
	needsLINSTOR := func(act action) action {
		return func(ctx context.Context, s *scope) (engine.Outcome, error) {
			switch {
			case s.lin != nil:
				return act(ctx, s)
			case s.State.Step == replupgrade.Preflight:
				return engine.Failed("%s", s.linErr), nil
			}
			return engine.Waiting(r.poll(), "waiting for LINSTOR: %s", s.linErr), nil
		}
	}
	return engine.Scoped(r.newScope, map[workflow.Step]action{
		replupgrade.Preflight:         needsLINSTOR(r.preflight),
		replupgrade.Place:             needsLINSTOR(r.place),
		replupgrade.Sync:              needsLINSTOR(r.sync),
		replupgrade.Verify:            needsLINSTOR(r.verify),
		replupgrade.Quorum:            needsLINSTOR(r.quorum),
		replupgrade.ReleaseTaints:     r.releaseTaints,
		replupgrade.RestoreTaints:     r.restoreTaints,
		replupgrade.RestoreQuorum:     needsLINSTOR(r.restoreQuorum),
		replupgrade.RemoveReplicas:    needsLINSTOR(r.removeReplicas),
		replupgrade.RestorePlaceCount: needsLINSTOR(r.restorePlaceCount),
		replupgrade.RestoreBalance:    needsLINSTOR(r.restoreBalance),
	})
}

// Finish has nothing to tidy: the verify operations are the upgrade's evidence and go with it
// (they are owned by it).
func (r *Reconciler) Finish(context.Context, *engine.Run[*nwv1.ReplicationUpgrade]) (engine.Finished, error) {
	return engine.Tidied("nothing to tidy: the upgrade's NodeOperations are its evidence and go with it"), nil
}

func (r *Reconciler) batchSize() int {
	if r.BatchSize > 0 {
		return r.BatchSize
	}
	return DefaultBatchSize
}

func (r *Reconciler) concurrency() int {
	if r.Concurrency > 0 {
		return r.Concurrency
	}
	return DefaultConcurrency
}

func (r *Reconciler) poll() time.Duration {
	if r.Poll > 0 {
		return r.Poll
	}
	return DefaultPoll
}
