// Package bondflip is the plan of a BondModeFlipPlan: the steps that change the storage bond's
// mode on every node, one node at a time, and the rollback from every step, which the shared
// workflow machine (internal/workflow) runs. It talks to no cluster.
//
// Each node's part is six steps, named after the node's position in the flip's order
// (docs/decisions/0003): protect its VMs, pause the resynchronisation towards it on its
// peers, change its bond under its agent's checkpoint, confirm from the operator's side and
// commit, resume the resynchronisation and wait until DRBD is UpToDate, restore its VMs.
// A failure anywhere leaves the cluster as it was: the node being changed is brought back to
// its previous mode (its agent has usually done so already, by its checkpoint), its
// resynchronisation resumed and its VMs restored; then every node already flipped is flipped
// back, the last first, each under a checkpoint of its own, its VMs protected while it is.
package bondflip

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Step is one step of a flip.
type Step = workflow.Step

// Preflight checks, before anything changes, what must hold for the flip (the engine's gates
// hold it until the cluster is healthy and no other cluster-wide workflow runs).
const Preflight Step = "Preflight"

// The parts of a node's forward steps, in order: Node<i><Part>.
const (
	ProtectVMs   = "ProtectVMs"
	PauseResync  = "PauseResync"
	SetBondMode  = "SetBondMode"
	Confirm      = "Confirm"
	ResumeResync = "ResumeResync"
	RestoreVMs   = "RestoreVMs"
)

// NodeParts are the parts of a node's forward steps, in order.
var NodeParts = []string{ProtectVMs, PauseResync, SetBondMode, Confirm, ResumeResync, RestoreVMs}

// The parts of the rollback steps. A node brought back, whether the one whose step failed or
// one flipped before it, takes the same three, each of which finds out what is left to undo
// and skips what is not (docs/development.md, "An undo step must find out"):
const (
	// RollbackProtectVMs protects the node's VMs again before its bond is changed back: for a
	// node flipped before (its VMs came back) or one whose RestoreVMs failed half way.
	RollbackProtectVMs = "RollbackProtectVMs"
	// RollbackBondMode brings the node back to its previous mode: nothing to do when its agent
	// already restored it (its checkpoint) or it never changed; otherwise the resync towards it
	// paused, the previous mode set under a checkpoint of its own, confirmed and committed.
	// Either way it ends with the resync towards the node resumed and DRBD UpToDate.
	RollbackBondMode = "RollbackBondMode"
	// RollbackVMs restores the VMs the flip protected on the node.
	RollbackVMs = "RollbackVMs"

	// MaxNodes is the most nodes a flip changes.
	MaxNodes          = 3
	stepPatternSource = `^Node([1-9])([A-Za-z]+)$`
)

var stepPattern = regexp.MustCompile(stepPatternSource)

// NodeStep is the step of the node at position (from 1) for part.
func NodeStep(position int, part string) Step {
	return Step("Node" + strconv.Itoa(position) + part)
}

// ParseStep splits a node's step into its position and part; ok is false for Preflight and
// for a name that is no node's step.
func ParseStep(s Step) (position int, part string, ok bool) {
	m := stepPattern.FindStringSubmatch(string(s))
	if m == nil {
		return 0, "", false
	}
	position, _ = strconv.Atoi(m[1])
	return position, m[2], true
}

// Plan is a flip's shape, fixed by its spec: how many nodes it changes.
type Plan struct {
	Nodes int
}

// NewPlan is the plan of a flip of n nodes, 1 to 3.
func NewPlan(n int) (Plan, error) {
	if n < 1 || n > MaxNodes {
		return Plan{}, fmt.Errorf("a flip changes 1 to %d nodes, not %d", MaxNodes, n)
	}
	return Plan{Nodes: n}, nil
}

// Forward lists the steps: Preflight, then each node's six, in order.
func (p Plan) Forward() []Step {
	steps := []Step{Preflight}
	for i := 1; i <= p.Nodes; i++ {
		for _, part := range NodeParts {
			steps = append(steps, NodeStep(i, part))
		}
	}
	return steps
}

// Rollback lists the steps that undo a failure (or cancellation) in the forward step failed:
// the failed node's own, then each node flipped before it, the last flipped first. A failure in
// Preflight changed nothing.
//
//   - failed in ProtectVMs: its VMs restored (some may have moved);
//   - from PauseResync to ResumeResync: its mode back (and its resync resumed), its VMs
//     restored;
//   - in RestoreVMs: its VMs protected again first, as some may be back;
//   - every node before it: its VMs protected, its mode back, its VMs restored.
func (p Plan) Rollback(failed Step) []Step {
	k, part, ok := ParseStep(failed)
	at := slices.Index(NodeParts, part)
	if !ok || k > p.Nodes || at < 0 {
		return nil
	}
	var steps []Step
	if part == RestoreVMs {
		steps = append(steps, NodeStep(k, RollbackProtectVMs))
	}
	if at >= slices.Index(NodeParts, PauseResync) {
		steps = append(steps, NodeStep(k, RollbackBondMode))
	}
	steps = append(steps, NodeStep(k, RollbackVMs))
	for j := k - 1; j >= 1; j-- {
		steps = append(steps, NodeStep(j, RollbackProtectVMs), NodeStep(j, RollbackBondMode), NodeStep(j, RollbackVMs))
	}
	return steps
}

// ActionKey is the key of step s's action: its part (ProtectVMs for Node2ProtectVMs), or
// the step itself (Preflight).
func (p Plan) ActionKey(s Step) Step {
	if _, part, ok := ParseStep(s); ok {
		return Step(part)
	}
	return s
}

// Irreversible is false for every step: no step of a flip is past undoing.
func (p Plan) Irreversible(Step) bool { return false }

// Gates says what holds each step: the Preflight waits for the management mode (Managed), the
// claim and the cluster's health; each node's first step
// also for approval and the maintenance window, so that a person approves each node, and a
// node is started only inside the window (one started finishes, the window closing or not:
// stopping a node half changed would be the harm).
func (p Plan) Gates(s Step) workflow.Gates {
	if s == Preflight {
		return workflow.GatesPreflight
	}
	if _, part, ok := ParseStep(s); ok && part == ProtectVMs {
		return workflow.GatesNodeChange
	}
	return 0
}

var (
	_ workflow.GatedPlan = Plan{}
	_ workflow.KeyedPlan = Plan{}
)
