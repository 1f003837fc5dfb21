package bondmodeflipplan

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// defaultConnectivityTimeout is spec.connectivityTimeout's default (the CRD's).
const defaultConnectivityTimeout = 60 * time.Second

// scope is one reconcile's view of a flip and the nodes it changes.
type scope struct {
	*engine.Run[*nwv1.BondModeFlipPlan]
	f     *nwv1.BondModeFlipPlan
	order []string
	// agents are the nodes' NodewrightAgentStatus, by node.
	agents map[string]*nwv1.NodewrightAgentStatus
	// ops are the flip's NodeOperations, by name.
	ops map[string]*nwv1.NodeOperation
	// leases are the agents' heartbeat Leases, by node, in agentNamespace.
	leases         map[string]*coordinationv1.Lease
	agentNamespace string
	// leaveOut are the nodes a rollback does not wait for: their agents are silent
	// (heartbeats.go). Nil in a forward step, never nil in a rollback.
	leaveOut map[string]bool
	// part is the part of a node's step under way, and partStarted when it began, as the
	// node's record says: a part's time limits count from its own start.
	part        string
	partStarted time.Time
}

// StepStarted is when the part under way began; for the Preflight, when the step did.
func (s *scope) StepStarted() time.Time {
	if s.part != "" {
		return s.partStarted
	}
	return s.Run.StepStarted()
}

// Deadline reports whether the part under way (the Preflight) has taken longer than limit,
// measured from the start its record shows, and how long is left otherwise.
func (s *scope) Deadline(limit time.Duration) (passed bool, left time.Duration) {
	left = s.StepStarted().Add(limit).Sub(s.Now.Time)
	return left <= 0, left
}

// label is what the flip's children made by node k's part under way say made them, in their
// label nodewright.spectrocloud.com/step: Node1SetBondMode.
func (s *scope) label(k int) string { return bondflip.PartName(k, s.part) }

func (r *Reconciler) newScope(ctx context.Context, run *engine.Run[*nwv1.BondModeFlipPlan]) (*scope, error) {
	f := run.Object
	s := &scope{Run: run, f: f, order: bondflip.Order(f), ops: map[string]*nwv1.NodeOperation{}, agentNamespace: r.AgentNamespace}
	var err error
	if s.agents, err = r.agents(ctx); err != nil {
		return nil, err
	}
	if s.leases, err = r.heartbeats(ctx); err != nil {
		return nil, err
	}
	if r.AgentNamespace != "" {
		var ops nwv1.NodeOperationList
		if err := r.Client.List(ctx, &ops, client.InNamespace(r.AgentNamespace), client.MatchingLabels{bondflip.LabelUID: string(f.UID)}); err != nil {
			return nil, err
		}
		for i := range ops.Items {
			s.ops[ops.Items[i].Name] = &ops.Items[i]
		}
	}
	return s, nil
}

// agents reads every node's NodewrightAgentStatus.
func (r *Reconciler) agents(ctx context.Context) (map[string]*nwv1.NodewrightAgentStatus, error) {
	var list nwv1.NodewrightAgentStatusList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	out := make(map[string]*nwv1.NodewrightAgentStatus, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// node is the node at position k (from 1).
func (s *scope) node(k int) string { return s.order[k-1] }

// bond is the bond the flip changes: the spec's, or the one the site's EdgeProfile names.
func (r *Reconciler) bond(ctx context.Context, f *nwv1.BondModeFlipPlan) (string, *nwv1.EdgeProfile, error) {
	profile, err := engine.ProfileInForce(ctx, r.Client)
	if err != nil {
		return "", nil, err
	}
	if f.Spec.BondInterface != "" {
		return f.Spec.BondInterface, profile, nil
	}
	if profile == nil {
		return "", nil, nil
	}
	return profile.Spec.Network.BondInterface, profile, nil
}

// lease is node's heartbeat Lease, nil when there is none.
func (r *Reconciler) lease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.AgentNamespace, Name: node}, l); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return l, nil
}

// connectivityTimeout is how long a changed node may take to show it still reaches its peers:
// its checkpoint's timeout.
func connectivityTimeout(f *nwv1.BondModeFlipPlan) time.Duration {
	if d := f.Spec.ConnectivityTimeout.Duration; d > 0 {
		return d
	}
	return defaultConnectivityTimeout
}

// modeOf is the mode node's agent last reported, empty when it reported none.
func modeOf(agents map[string]*nwv1.NodewrightAgentStatus, node string) nwv1.BondMode {
	if a := agents[node]; a != nil {
		return a.Status.Network.BondMode
	}
	return ""
}

// nodeView is status.nodes as it should be now: before the flip starts, with an order the
// spec leaves to the operator, the default order of the nodes that report (none when none
// does, or more than a flip can change: its Preflight says so); then, for each node, its
// state derived from the steps, the mode its agent last reported, and what the steps
// recorded: the previous mode (the Preflight) and the record of its parts (its steps).
func nodeView(f *nwv1.BondModeFlipPlan, agents map[string]*nwv1.NodewrightAgentStatus) []nwv1.NodeFlip {
	order := bondflip.Order(f)
	pending := f.Status.Phase == "" || f.Status.Phase == nwv1.WorkflowPending
	if pending && len(f.Spec.NodeOrder) == 0 {
		roles := map[string]nwv1.NodeRole{}
		for name, a := range agents {
			roles[name] = a.Status.Role
		}
		order = bondflip.DefaultOrder(roles)
		if len(order) > bondflip.MaxNodes {
			order = nil
		}
	}
	recorded := map[string]nwv1.NodeFlip{}
	for _, n := range f.Status.Nodes {
		recorded[n.Name] = n
	}
	var view []nwv1.NodeFlip
	for i, name := range order {
		was := recorded[name]
		view = append(view, nwv1.NodeFlip{Name: name, Position: int32(i + 1), PreviousMode: was.PreviousMode,
			CurrentMode: modeOf(agents, name), State: bondflip.NodeState(&f.Status.WorkflowStatus, i+1),
			Part: was.Part, Cordon: was.Cordon, Parts: was.Parts})
	}
	return view
}

// summary is what kubectl get shows of the view: the node whose step runs or waits, and how
// many nodes are Done of all.
func summary(f *nwv1.BondModeFlipPlan, view []nwv1.NodeFlip) (current, progress string) {
	done := 0
	for _, n := range view {
		if n.State == nwv1.NodeFlipDone {
			done++
		}
	}
	for _, st := range f.Status.Steps {
		if st.State != nwv1.StepRunning && st.State != nwv1.StepWaiting {
			continue
		}
		if k, _, ok := bondflip.ParseStep(bondflip.Step(st.Name)); ok && k <= len(view) {
			current = view[k-1].Name
		}
	}
	if len(view) > 0 {
		progress = fmt.Sprintf("%d/%d", done, len(view))
	}
	return current, progress
}

// describe names node k for a message: "edge-2 (node 1)".
func (s *scope) describe(k int) string {
	return fmt.Sprintf("%s (node %d)", s.node(k), k)
}
