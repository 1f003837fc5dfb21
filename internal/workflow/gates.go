package workflow

// Gates are the checks a cluster-wide workflow passes before a step starts (the engine's
// chain, internal/workflow/engine). A step held by its gates is Waiting: listed, not started,
// nothing of it done. Only forward steps are gated: a rollback never waits for a person, a
// window or another workflow.
type Gates uint8

// The gates.
const (
	// GateLock: the workflow holds the cluster-wide claim, one cluster-wide workflow at a
	// time; claimed at the first gated step, released when the workflow ends.
	GateLock Gates = 1 << iota
	// GateHealth: the cluster's phase is one the workflow allows and no node is stale.
	GateHealth
	// GateApproval: with spec.approval Manual, a person approved the step.
	GateApproval
	// GateWindow: the maintenance window is open.
	GateWindow
	// GateManaged: Nodewright manages the nodes (NodewrightCluster spec.management Managed,
	// and the handover took effect): while the cluster is observed, the legacy DaemonSet
	// decides about the nodes and no workflow may change them.
	GateManaged
)

// The gates of the two kinds of gated step.
const (
	// GatesPreflight hold a cluster-wide workflow's first step, which changes nothing.
	GatesPreflight = GateManaged | GateLock | GateHealth
	// GatesNodeChange hold a step that changes a node.
	GatesNodeChange = GateManaged | GateLock | GateHealth | GateApproval | GateWindow
)

// Has reports whether every gate of o is in g.
func (g Gates) Has(o Gates) bool { return g&o == o }

// GatedPlan is a plan whose forward steps wait for gates before they start.
type GatedPlan interface {
	Plan
	// Gates are the gates that hold forward step s; none for a step that starts at once.
	Gates(s Step) Gates
}

// WaitCancellablePlan is a GatedPlan whose steps past undoing once started may still be
// cancelled while their gates hold them, before they start (an OS upgrade's next node, held by
// the window or an approval: nothing of it has happened). A deletion then rolls back from such a
// step as from a reversible one's failure (Rollback). Without it, a deletion waits for a held
// step past undoing to start and finish, as for a running one.
type WaitCancellablePlan interface {
	GatedPlan
	// CancelWhileWaiting reports whether step s, past undoing once started, may be cancelled
	// while its gates hold it.
	CancelWhileWaiting(s Step) bool
}

// CancelsWhileWaiting reports whether a deletion cancels step s of p while its gates hold it:
// a reversible step, or one p lets be cancelled before it starts (WaitCancellablePlan).
func CancelsWhileWaiting(p Plan, s Step) bool {
	if !p.Irreversible(s) {
		return true
	}
	w, ok := p.(WaitCancellablePlan)
	return ok && w.CancelWhileWaiting(s)
}

// ReversibleAt is p with step s reversible: the plan a cancellation of s while it waits (before
// it started) is decided with (Next), when p lets it be (CancelsWhileWaiting).
func ReversibleAt(p Plan, s Step) Plan { return reversibleAt{Plan: p, step: s} }

type reversibleAt struct {
	Plan
	step Step
}

func (r reversibleAt) Irreversible(s Step) bool { return s != r.step && r.Plan.Irreversible(s) }

// GatesOf are the gates that hold step s of p: none unless p is a GatedPlan.
func GatesOf(p Plan, s Step) Gates {
	if g, ok := p.(GatedPlan); ok {
		return g.Gates(s)
	}
	return 0
}
