package bondmodeflipplan

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// preflight checks, before anything changes, what the flip needs beyond the gates (management
// mode, the claim, the cluster's health), and records each node's mode before the flip:
//
//   - the operator knows the agents' namespace, and the order names each node that reports
//     once, every one of them (a node left out would keep the old mode: the mixed state);
//   - every node's agent reports, its heartbeat fresh (its Lease renewed within the Lease's
//     duration, and its NodewrightAgentStatus not stale), the bond there;
//   - some node does not run the target mode yet;
//   - the site's EdgeProfile says its switch ports carry the target mode;
//   - the VMs can be protected as spec.vmProtection says;
//   - every DRBD resource of every node is connected and UpToDate: waited for up to
//     drbdSettleTimeout (a connection lost for a moment resynchronises what it missed), then
//     refused.
func (r *Reconciler) preflight(ctx context.Context, s *scope) (engine.Outcome, error) {
	f := s.f
	if r.AgentNamespace == "" {
		return engine.Failed("the operator runs without --agent-namespace: there is no node agent to change the nodes"), nil
	}
	if msg := checkOrder(s.order, s.agents); msg != "" {
		return engine.Failed("%s", msg), nil
	}
	if silent := s.silent(s.order...); len(silent) > 0 {
		return engine.Failed("every node's agent must be renewing its heartbeat Lease before a flip starts: %s", strings.Join(silent, "; ")), nil
	}
	bond, profile, err := r.bond(ctx, f)
	if err != nil {
		return engine.Outcome{}, err
	}
	if bond == "" {
		return engine.Failed("spec.bondInterface is empty and no EdgeProfile is in force to name the storage bond"), nil
	}
	if msg := bondflip.Allowed(profile, f.Spec.TargetMode); msg != "" {
		return engine.Failed("%s", msg), nil
	}
	var onTarget, unsettled []string
	for _, node := range s.order {
		st := s.agents[node].Status
		switch b := st.Network.Bond; {
		case st.Reporter != nwv1.ReporterAgent:
			return engine.Failed("%s: its agent does not report it (reporter %q): no agent would change it", node, st.Reporter), nil
		case st.Heartbeat.Stale:
			return engine.Failed("%s: its heartbeat is stale", node), nil
		case b == nil || b.Interface != bond:
			return engine.Failed("%s: its agent reports no bond %s", node, bond), nil
		case b.Mode == f.Spec.TargetMode:
			onTarget = append(onTarget, node)
		}
		if d := st.Storage; d != nil && (d.Connected < d.Resources || d.UpToDate < d.Resources) {
			unsettled = append(unsettled, fmt.Sprintf("%s: %d of %d DRBD resources connected and %d UpToDate", node, d.Connected, d.Resources, d.UpToDate))
		}
	}
	if len(onTarget) == len(s.order) {
		return engine.Failed("every node already runs %s: nothing to flip", f.Spec.TargetMode), nil
	}
	if msg, err := r.checkVMs(ctx, s); err != nil || msg != "" {
		return engine.Failed("%s", msg), err
	}
	// Last, so that a flip that could never start says why at once rather than after the wait.
	if len(unsettled) > 0 {
		msg := strings.Join(unsettled, "; ") + "; every one must be both"
		if passed, left := s.Deadline(drbdSettleTimeout); !passed {
			return engine.Waiting(min(left, poll), "waiting for DRBD: %s", msg), nil
		}
		return engine.Failed("%s (waited %s)", msg, drbdSettleTimeout), nil
	}
	for i := range f.Status.Nodes {
		f.Status.Nodes[i].PreviousMode = modeOf(s.agents, f.Status.Nodes[i].Name)
	}
	msg := fmt.Sprintf("%s on %s, in this order; before: %s", bond, strings.Join(s.order, ", "), modes(s))
	if len(onTarget) > 0 {
		msg += fmt.Sprintf("; %s already on %s", strings.Join(onTarget, ", "), f.Spec.TargetMode)
	}
	return engine.Succeeded("%s", msg), nil
}

// checkOrder says what is wrong with the flip's order, empty when nothing is.
func checkOrder(order []string, agents map[string]*nwv1.NodewrightAgentStatus) string {
	all := make([]string, 0, len(agents))
	for name := range agents {
		all = append(all, name)
	}
	sort.Strings(all)
	switch {
	case len(agents) == 0:
		return "no node reports to Nodewright (no NodewrightAgentStatus): nothing to flip"
	case len(order) == 0 && len(agents) > bondflip.MaxNodes:
		return fmt.Sprintf("%d nodes report (%s); a flip changes at most %d", len(agents), strings.Join(all, ", "), bondflip.MaxNodes)
	}
	for _, node := range order {
		if agents[node] == nil {
			return fmt.Sprintf("spec.nodeOrder: %s is not a node Nodewright knows (no NodewrightAgentStatus); the nodes are %s", node, strings.Join(all, ", "))
		}
	}
	var left []string
	for _, node := range all {
		if !slices.Contains(order, node) {
			left = append(left, node)
		}
	}
	if len(left) > 0 {
		return fmt.Sprintf("spec.nodeOrder leaves out %s: every node's bond must change, or the cluster would run two modes", strings.Join(left, ", "))
	}
	return ""
}

// modes lists each node's mode: "edge-1 active-backup, edge-2 active-backup".
func modes(s *scope) string {
	var out []string
	for _, node := range s.order {
		out = append(out, node+" "+string(modeOf(s.agents, node)))
	}
	return strings.Join(out, ", ")
}
