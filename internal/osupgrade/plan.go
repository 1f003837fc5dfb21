// Package osupgrade is the plan of an OSVersionPolicy: the steps that move the selected Kairos
// nodes to one image, one node at a time, which the shared workflow machine
// (internal/workflow) runs. It talks to no cluster.
//
// Each node has one step, named after its position in the policy's order (Node1, Node2, ...;
// docs/decisions/0003), which carries out nine parts in order (NodeParts): cordon the node,
// protect its VMs (spec.vmProtection: move them off, or stop them), drain it, stage the image
// (the node's agent, OSUpgradeStage), reboot it (its agent, Reboot), verify from its agent's
// report after the boot that it runs the image, soak (its health gates green for spec.soak),
// uncordon it (if the policy cordoned it), restore its VMs. The record of each part is in
// the node's entry of status.nodes, written in the same status patch as the step itself, as a
// flip's is (bondflip.RunParts runs it).
//
// An OS upgrade is not undone by the policy: once a node has staged an image and rebooted,
// going back is a boot of the passive slot, a repair for a person (or the boot-recovery
// policy) to decide. So every node's step is irreversible: a failure stops the policy Failed
// where it is, holding the cluster-wide claim, with each node's phase and evidence in
// status.nodes; the nodes after it are untouched. After every node has soaked, the Recovery
// step (spec.upgradeRecovery AfterSoak) writes the image to each node's recovery system.
package osupgrade

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Step is one step of a policy.
type Step = workflow.Step

// Preflight checks, before anything changes, what must hold for the upgrade (the engine's
// gates hold it until the cluster is healthy and no other cluster-wide workflow runs).
const Preflight Step = "Preflight"

// Recovery upgrades each node's recovery system, once every node booted the image and soaked.
const Recovery Step = "Recovery"

// The parts of a node's step, in order.
const (
	// Cordon marks the node unschedulable, with AnnotationCordonedBy naming the policy in the
	// same write; a node already unschedulable is left alone.
	Cordon = "Cordon"
	// ProtectVMs takes the node's VMs off it as spec.vmProtection says: LiveMigrate moves
	// each to another node, Stop halts it, None leaves it to go down with the node.
	ProtectVMs = "ProtectVMs"
	// Drain evicts the node's pods (not DaemonSets', not mirror pods, not the agents'),
	// recording what it evicted.
	Drain = "Drain"
	// Stage asks the node's agent to write the image to its active slot (OSUpgradeStage).
	Stage = "Stage"
	// Reboot asks the node's agent to reboot it (Reboot) and waits for its next boot.
	Reboot = "Reboot"
	// Verify proves from the agent's report after the boot that the node runs the image.
	Verify = "Verify"
	// Soak waits for the node's health gates to be green, then for them to stay green for
	// spec.soak.
	Soak = "Soak"
	// Uncordon makes the node schedulable again if it carries the policy's cordon.
	Uncordon = "Uncordon"
	// RestoreVMs brings back the VMs ProtectVMs took off: moved back to the node, or
	// started again, and running.
	RestoreVMs = "RestoreVMs"
)

// NodeParts are the parts of a node's step, in order.
var NodeParts = []string{Cordon, ProtectVMs, Drain, Stage, Reboot, Verify, Soak, Uncordon, RestoreVMs}

// MaxNodes is the most nodes a policy upgrades: a Preflight, a step per node and the
// Recovery are 18, within the 48 of status.steps.
const MaxNodes = 16

var stepPattern = regexp.MustCompile(`^Node([1-9][0-9]?)$`)

// NodeStep is the step of the node at position (from 1): Node1.
func NodeStep(position int) Step { return Step("Node" + strconv.Itoa(position)) }

// ParseStep is the position of the node whose step s is; ok is false for the Preflight, the
// Recovery and a name that is no node's step.
func ParseStep(s Step) (position int, ok bool) {
	m := stepPattern.FindStringSubmatch(string(s))
	if m == nil {
		return 0, false
	}
	position, _ = strconv.Atoi(m[1])
	return position, true
}

// PartName names part of the node at position outside the status (the label on what the part
// made): Node1Stage.
func PartName(position int, part string) string { return string(NodeStep(position)) + part }

// Plan is a policy's shape, fixed by its spec and the nodes it recorded: how many nodes it
// upgrades, and whether it upgrades their recovery systems after.
type Plan struct {
	Nodes    int
	Recovery bool
}

// NewPlan is the plan of a policy of n nodes, 0 to MaxNodes (none: its Preflight fails saying
// why).
func NewPlan(n int, recovery bool) (Plan, error) {
	if n < 0 || n > MaxNodes {
		return Plan{}, fmt.Errorf("a policy upgrades at most %d nodes, not %d", MaxNodes, n)
	}
	return Plan{Nodes: n, Recovery: recovery && n > 0}, nil
}

// Forward lists the steps: Preflight, each node's in order, then the Recovery if asked for.
func (p Plan) Forward() []Step {
	steps := []Step{Preflight}
	for i := 1; i <= p.Nodes; i++ {
		steps = append(steps, NodeStep(i))
	}
	if p.Recovery {
		steps = append(steps, Recovery)
	}
	return steps
}

// Rollback is empty: the Preflight changes nothing, and no step after it is undone by the
// policy (Irreversible).
func (p Plan) Rollback(Step) []Step { return nil }

// Irreversible is true for every step after the Preflight: a node that staged an image and
// rebooted is not brought back by the policy, which stops where it is and says so.
func (p Plan) Irreversible(s Step) bool { return s != Preflight }

// ActionKey is ActionNode for a node's step, the step itself otherwise.
func (p Plan) ActionKey(s Step) Step {
	if _, ok := ParseStep(s); ok {
		return ActionNode
	}
	return s
}

// ActionNode is the action key of every node's step.
const ActionNode Step = "Node"

// Gates says what holds each step: the Preflight waits for the management mode (Managed), the
// claim and the cluster's health; each node's step and the Recovery also for approval and the
// maintenance window, so that a person approves each node, and a node is started only inside
// the window (one started finishes: stopping a node half upgraded would be the harm).
func (p Plan) Gates(s Step) workflow.Gates {
	if s == Preflight {
		return workflow.GatesPreflight
	}
	return workflow.GatesNodeChange
}

// CancelWhileWaiting is true for every step after the Preflight: a node's step held by the
// window or an approval has not touched the node, so a deletion stops the policy there
// (RolledBack: the nodes before it keep the image they booted, the rest were never touched).
func (p Plan) CancelWhileWaiting(s Step) bool { return s != Preflight }

var (
	_ workflow.WaitCancellablePlan = Plan{}
	_ workflow.GatedPlan           = Plan{}
	_ workflow.KeyedPlan           = Plan{}
)
