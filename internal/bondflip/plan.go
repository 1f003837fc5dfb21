// Package bondflip is the plan of a BondModeFlipPlan: the steps that change the storage bond's
// mode on every node, one node at a time, and the rollback from every step, which the shared
// workflow machine (internal/workflow) runs. It talks to no cluster.
//
// Each node has one step, named after the node's position in the flip's order (Node1, Node2,
// ...; docs/decisions/0003), which carries out eight parts in order: cordon the node, protect
// its VMs, pause the resynchronisation towards it on its peers, change its bond under its
// agent's checkpoint, confirm from the operator's side and commit, resume the
// resynchronisation and wait until DRBD is UpToDate, uncordon the node (if the flip cordoned
// it), restore its VMs. The step records each part (its state, start, finish and
// message) in the node's entry of status.nodes, in the same status patch as the step itself.
// A failure anywhere leaves the cluster as it was: the node being changed is brought back to
// its previous mode (its agent has usually done so already, by its checkpoint), its
// resynchronisation resumed and its VMs restored; then every node already flipped is flipped
// back, the last first, each under a checkpoint of its own, its VMs protected while it is.
// Each node's undo is one rollback step (RollbackNode1, ...), whose parts depend on the part
// its forward step failed in (UndoParts).
package bondflip

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Step is one step of a flip.
type Step = workflow.Step

// Preflight checks, before anything changes, what must hold for the flip (the engine's gates
// hold it until the cluster is healthy and no other cluster-wide workflow runs).
const Preflight Step = "Preflight"

// The parts of a node's forward step, in order.
const (
	// Cordon marks the node unschedulable, with AnnotationCordonedBy naming the flip in the
	// same write; a node already unschedulable is left alone.
	Cordon       = "Cordon"
	ProtectVMs   = "ProtectVMs"
	PauseResync  = "PauseResync"
	SetBondMode  = "SetBondMode"
	Confirm      = "Confirm"
	ResumeResync = "ResumeResync"
	// Uncordon makes the node schedulable again if it carries the flip's AnnotationCordonedBy,
	// before RestoreVMs: the VMs brought back must be able to land on it.
	Uncordon   = "Uncordon"
	RestoreVMs = "RestoreVMs"
)

// NodeParts are the parts of a node's forward step, in order.
var NodeParts = []string{Cordon, ProtectVMs, PauseResync, SetBondMode, Confirm, ResumeResync, Uncordon, RestoreVMs}

// The parts of the rollback steps. A node brought back, whether the one whose step failed or
// one flipped before it, takes the same five, each of which finds out what is left to undo
// and skips what is not (docs/development.md, "An undo step must find out"):
const (
	// RollbackCordon cordons a node flipped before while its mode is set back, as Cordon does.
	RollbackCordon = "RollbackCordon"
	// RollbackProtectVMs protects the node's VMs again before its bond is changed back: for a
	// node flipped before (its VMs came back) or one whose RestoreVMs failed half way.
	RollbackProtectVMs = "RollbackProtectVMs"
	// RollbackBondMode brings the node back to its previous mode: nothing to do when its agent
	// already restored it (its checkpoint) or it never changed; otherwise the resync towards it
	// paused, the previous mode set under a checkpoint of its own, confirmed and committed.
	// Either way it ends with the resync towards the node resumed and DRBD UpToDate.
	RollbackBondMode = "RollbackBondMode"
	// RollbackUncordon uncordons the node if it carries the flip's AnnotationCordonedBy (the
	// node's own record: a cordon written just before a crash is found there), before its VMs
	// come back.
	RollbackUncordon = "RollbackUncordon"
	// RollbackVMs restores the VMs the flip protected on the node.
	RollbackVMs = "RollbackVMs"
)

// RollbackParts are every part a node's rollback step may carry out, in order.
var RollbackParts = []string{RollbackCordon, RollbackProtectVMs, RollbackBondMode, RollbackUncordon, RollbackVMs}

// MaxParts is the most parts a node's record holds: its eight forward parts and five rollback
// parts.
const MaxParts = 13

// MaxNodes is the most nodes a flip changes: a Preflight, a step per node and a rollback step
// per node are 33, within the 48 of status.steps.
const MaxNodes = 16

var stepPattern = regexp.MustCompile(`^(Rollback)?Node([1-9][0-9]?)$`)

// NodeStep is the step of the node at position (from 1): Node1.
func NodeStep(position int) Step { return Step("Node" + strconv.Itoa(position)) }

// RollbackStep is the rollback step of the node at position: RollbackNode1.
func RollbackStep(position int) Step { return Step("RollbackNode" + strconv.Itoa(position)) }

// ParseStep says whose step s is: the node's position and whether it is its rollback step; ok
// is false for Preflight and for a name that is no node's step.
func ParseStep(s Step) (position int, rollback bool, ok bool) {
	m := stepPattern.FindStringSubmatch(string(s))
	if m == nil {
		return 0, false, false
	}
	position, _ = strconv.Atoi(m[2])
	return position, m[1] != "", true
}

// PartName names part of the node at position outside the status, where one name says both
// (the label on what the part made, a log line): Node1SetBondMode, Node1RollbackBondMode.
func PartName(position int, part string) string { return string(NodeStep(position)) + part }

// UndoParts are the parts of a node's rollback step, after its forward step ended in the part
// failed ("" for a node whose forward step succeeded). Every one ends uncordoned, where the
// flip's cordon is on the node, before its VMs come back:
//
//   - failed in Cordon (or before any part began): uncordoned (the cordon may have been written
//     just before the failure or a crash);
//   - in ProtectVMs: uncordoned, its VMs restored (some may have moved);
//   - from PauseResync to ResumeResync: its mode back (and its resync resumed), uncordoned,
//     its VMs restored;
//   - in Uncordon or RestoreVMs, or a node flipped before: cordoned again and its VMs protected
//     again first (some may be back), its mode back, uncordoned, its VMs restored.
func UndoParts(failed string) []string {
	switch failed {
	case Cordon:
		return []string{RollbackUncordon}
	case ProtectVMs:
		return []string{RollbackUncordon, RollbackVMs}
	case PauseResync, SetBondMode, Confirm, ResumeResync:
		return []string{RollbackBondMode, RollbackUncordon, RollbackVMs}
	}
	return RollbackParts
}

// Plan is a flip's shape, fixed by its spec: how many nodes it changes.
type Plan struct {
	Nodes int
}

// NewPlan is the plan of a flip of n nodes, 1 to MaxNodes.
func NewPlan(n int) (Plan, error) {
	if n < 1 || n > MaxNodes {
		return Plan{}, fmt.Errorf("a flip changes 1 to %d nodes, not %d", MaxNodes, n)
	}
	return Plan{Nodes: n}, nil
}

// Forward lists the steps: Preflight, then each node's, in order.
func (p Plan) Forward() []Step {
	steps := []Step{Preflight}
	for i := 1; i <= p.Nodes; i++ {
		steps = append(steps, NodeStep(i))
	}
	return steps
}

// Rollback lists the steps that undo a failure (or cancellation) in the forward step failed:
// the failed node's own, then each node flipped before it, the last flipped first. A failure
// in Preflight changed nothing. What each undoes is UndoParts of the part its forward step
// ended in, which its record says.
func (p Plan) Rollback(failed Step) []Step {
	k, rollback, ok := ParseStep(failed)
	if !ok || rollback || k > p.Nodes {
		return nil
	}
	var steps []Step
	for j := k; j >= 1; j-- {
		steps = append(steps, RollbackStep(j))
	}
	return steps
}

// ActionKey is the key of step s's action: ActionNode for a node's step, ActionRollbackNode
// for its rollback step, the step itself for the Preflight.
func (p Plan) ActionKey(s Step) Step {
	switch _, rollback, ok := ParseStep(s); {
	case !ok:
		return s
	case rollback:
		return ActionRollbackNode
	}
	return ActionNode
}

// The action keys of the nodes' steps: every Node<i> is the action ActionNode for node i,
// every RollbackNode<i> ActionRollbackNode.
const (
	ActionNode         Step = "Node"
	ActionRollbackNode Step = "RollbackNode"
)

// Irreversible is false for every step: no step of a flip is past undoing.
func (p Plan) Irreversible(Step) bool { return false }

// Gates says what holds each step: the Preflight waits for the management mode (Managed), the
// claim and the cluster's health; each node's step also for approval and the maintenance
// window, so that a person approves each node, and a node is started only inside the window
// (one started finishes, the window closing or not: stopping a node half changed would be the
// harm).
func (p Plan) Gates(s Step) workflow.Gates {
	if s == Preflight {
		return workflow.GatesPreflight
	}
	if _, rollback, ok := ParseStep(s); ok && !rollback {
		return workflow.GatesNodeChange
	}
	return 0
}

var (
	_ workflow.GatedPlan = Plan{}
	_ workflow.KeyedPlan = Plan{}
)
