// Package replupgrade is the plan of a ReplicationUpgrade: the stages that turn single-node
// LINSTOR storage into replicated storage, and the rollback from each, which the shared
// workflow machine (internal/workflow) runs. It talks to no cluster.
//
// The stages, in order:
//
//  1. Preflight: what must hold, checked and recorded (the original node, the volumes, the
//     joining nodes) before anything changes.
//  2. Place: LINSTOR's balance task paused, a new replica of every volume created on each
//     joining data node in bounded batches, then the resource groups' place count raised
//     (which then has nothing left to autoplace: linstor-server#253).
//  3. Sync: every new replica UpToDate, within spec.syncTimeout.
//  4. Verify: DRBD's online verify of every volume, through the original node's agent; any
//     block out of sync fails it.
//  5. Quorum: quorum majority and the profile's on-no-quorum on the resource groups, the
//     diskless tiebreaker placed, the balance task turned back.
//  6. ReleaseTaints: the profile's not-ready taints removed from the joining nodes.
//
// A failure (or a cancellation) in a stage undoes what it and the stages before it changed,
// the last change first; each rollback step finds out what is left to undo and skips the rest
// (docs/development.md, "An undo step must find out"), so that it is safe to run again after
// a crash, and whatever stage it followed. The original node's replicas are never deleted.
package replupgrade

import (
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// Step is one step of an upgrade.
type Step = workflow.Step

// The forward steps (the stages), in order.
const (
	Preflight     Step = "Preflight"
	Place         Step = "Place"
	Sync          Step = "Sync"
	Verify        Step = "Verify"
	Quorum        Step = "Quorum"
	ReleaseTaints Step = "ReleaseTaints"
)

// The rollback steps, each of which undoes one kind of change.
const (
	// RestoreTaints puts back the taints ReleaseTaints removed.
	RestoreTaints Step = "RestoreTaints"
	// RestoreQuorum puts the resource groups' quorum options back.
	RestoreQuorum Step = "RestoreQuorum"
	// RemoveReplicas deletes every replica and tiebreaker the upgrade added, and waits until
	// LINSTOR no longer has them; never an original replica.
	RemoveReplicas Step = "RemoveReplicas"
	// RestorePlaceCount puts the resource groups' place counts back.
	RestorePlaceCount Step = "RestorePlaceCount"
	// RestoreBalance turns LINSTOR's balance task back to what it was.
	RestoreBalance Step = "RestoreBalance"
)

// Forward lists the stages.
var forward = []Step{Preflight, Place, Sync, Verify, Quorum, ReleaseTaints}

// Plan is every upgrade's plan: its shape does not depend on its spec.
type Plan struct{}

// Forward lists the stages in order.
func (Plan) Forward() []Step { return slices.Clone(forward) }

// Rollback lists the steps that undo a failure (or cancellation) in the stage failed:
// nothing after the Preflight; from Place to Verify the replicas, the place counts and the
// balance task; from Quorum on the quorum options first; after ReleaseTaints the taints
// first.
func (Plan) Rollback(failed Step) []Step {
	var steps []Step
	switch failed {
	case ReleaseTaints:
		steps = append(steps, RestoreTaints)
		fallthrough
	case Quorum:
		steps = append(steps, RestoreQuorum)
		fallthrough
	case Place, Sync, Verify:
		steps = append(steps, RemoveReplicas, RestorePlaceCount, RestoreBalance)
	}
	return steps
}

// Irreversible is false for every stage: each is undone by its rollback.
func (Plan) Irreversible(Step) bool { return false }

// Gates says what holds each stage: the Preflight waits for the management mode, the claim
// and the cluster's health; every stage that changes the nodes (Place, Verify, Quorum,
// ReleaseTaints) also for approval and the maintenance window; Sync only waits for LINSTOR,
// and is held only as the Preflight is.
func (Plan) Gates(s Step) workflow.Gates {
	switch s {
	case Preflight, Sync:
		return workflow.GatesPreflight
	case Place, Verify, Quorum, ReleaseTaints:
		return workflow.GatesNodeChange
	}
	return 0
}

var _ workflow.GatedPlan = Plan{}

// ActionStep is the audit action of an upgrade's transitions.
const ActionStep = "ReplicationUpgradeTransition"

// The labels on everything an upgrade creates (its NodeOperations).
const (
	LabelName = "nodewright.spectrocloud.com/replicationupgrade"
	LabelUID  = "nodewright.spectrocloud.com/replicationupgrade-uid"
)

// Descriptor is the upgrade as the workflow engine, the operator and admission know it.
var Descriptor = engine.Describe(&engine.Descriptor[*nwv1.ReplicationUpgrade]{
	Kind: workflow.Kind{
		Name:        "ReplicationUpgrade",
		AuditAction: ActionStep,
		Succeeded:   "every volume is replicated, synchronised, verified and under quorum; the joining nodes take workloads",
		RolledBack:  "rolled back: LINSTOR holds the replicas, place counts and properties it had before the upgrade",
		Cancelled:   "the upgrade was deleted",
		Noun:        "upgrade",
	},
	Controller: "replicationupgrade",
	ShortNames: []string{"rupg", "replup"},
	New:        func() *nwv1.ReplicationUpgrade { return &nwv1.ReplicationUpgrade{} },
	NewList:    func() client.ObjectList { return &nwv1.ReplicationUpgradeList{} },
	Plan:       func(*nwv1.ReplicationUpgrade) workflow.Plan { return Plan{} },
	Plans:      func() []workflow.Plan { return []workflow.Plan{Plan{}} },
	Finalizer:  "nodewright.spectrocloud.com/replicationupgrade",
	NameLabel:  LabelName,
	UIDLabel:   LabelUID,
	Children:   []engine.Child{{Object: &nwv1.NodeOperation{}, InAgentNamespace: true}},
	// The Preflight needs SingleNode storage (it checks); the stages after it run while the
	// joining nodes' replicas make the storage MultiNode.
	ClusterWide:   true,
	ClusterPhases: []nwv1.ClusterPhase{nwv1.ClusterSingleNode, nwv1.ClusterMultiNode},
	NeedsAgents:   true,
	// The tiebreaker is one of the peers (the CRD's rule), checked with them.
	Nodes: func(u *nwv1.ReplicationUpgrade) []engine.NodeField {
		return engine.NodeList("spec.peerNodes", u.Spec.PeerNodes)
	},
	Changing: changing,
})

// changing is every node of the upgrade, the original one and the joining ones, from its Place
// on: each stage changes, or loads with its synchronisation, the replicas of every volume. Its
// Preflight changes none; before it recorded the original node, which that is is not known.
func changing(u *nwv1.ReplicationUpgrade) ([]string, bool) {
	p := ProgressOf(u)
	switch {
	case p.Current == nil:
		return nil, false
	case Step(p.Current.Name) == Preflight:
		return nil, true
	case u.Status.OriginalNode == "":
		return nil, false
	}
	return append([]string{u.Status.OriginalNode}, u.Spec.PeerNodes...), true
}

// Kind is what the shared workflow code calls an upgrade and says of its outcomes.
var Kind = Descriptor.Kind

// DataNodes are the joining nodes that get a diskful replica of every volume: the first
// replicaCount-1 peer nodes that are not the tiebreaker, in the spec's order.
func DataNodes(spec nwv1.ReplicationUpgradeSpec) []string {
	want := int(spec.ReplicaCount) - 1
	if spec.ReplicaCount == 0 {
		want = 1
	}
	var out []string
	for _, n := range spec.PeerNodes {
		if n != spec.TiebreakerNode && len(out) < want {
			out = append(out, n)
		}
	}
	return out
}
