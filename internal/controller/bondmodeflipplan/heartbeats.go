package bondmodeflipplan

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/management"
)

// A node's step waits on agents: its peers' (the pauses and resumes of their resynchronisation
// towards it, their reports of their DRBD connections to it) and its own (its DRBD UpToDate
// again). An agent that has stopped renewing its heartbeat Lease will do none of it, so a
// step gives up on it once its Lease's last renewal no longer holds (the Lease's own
// duration, 40 s for the agent's), rather than at the step's time limit:
//
//   - forward, the step fails, naming the node and what its agent last reported, and the
//     flip rolls back;
//   - in a rollback, the node is left out of what the rollback waits for (a silent peer's
//     pauses and resumes, its probes, its view of the node, a silent node's own report), and
//     the step says what was left out, so that the other nodes are still brought back; a
//     silent node whose own bond has to be set back cannot be, and its rollback fails. A
//     rollback follows a failure, often of a node whose change cut it off the API server
//     until its checkpoint restored it: such a node (a SetBondMode of it not ended, or ended
//     less than commitGrace ago) is waited for as before, bounded by its checkpoint, and not
//     left out.
//
// A step waiting on agents looks again when the first of their Leases stops holding, or a
// rollback's silent node is to be left out (wake), whether or not anything else wakes it.

// wakeMargin is how long after a Lease stops holding the step looks again.
const wakeMargin = 100 * time.Millisecond

// heartbeats reads the agents' heartbeat Leases, by node.
func (r *Reconciler) heartbeats(ctx context.Context) (map[string]*coordinationv1.Lease, error) {
	out := map[string]*coordinationv1.Lease{}
	if r.AgentNamespace == "" {
		return out, nil
	}
	var list coordinationv1.LeaseList
	if err := r.Client.List(ctx, &list, client.InNamespace(r.AgentNamespace)); err != nil {
		return nil, fmt.Errorf("listing the agents' heartbeat Leases in %s: %w", r.AgentNamespace, err)
	}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// heartbeat is node's agent's heartbeat, as its Lease says.
func (s *scope) heartbeat(node string) management.Heartbeat {
	return management.LeaseHeartbeat(s.agentNamespace, node, s.leases[node])
}

// silent says which of nodes' agents are to be given up, each with what it last reported, in
// the nodes' order; none while every one's Lease holds. A forward step fails on them; a
// rollback never does (it leaves them out once given up), and none is named there.
func (s *scope) silent(nodes ...string) []string {
	if s.leaveOut != nil {
		return nil
	}
	return s.silence(nodes, false)
}

// silence is silent, with the nodes left out when withLeftOut.
func (s *scope) silence(nodes []string, withLeftOut bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n] || (s.leaveOut[n] && !withLeftOut) {
			continue
		}
		seen[n] = true
		if msg := s.heartbeat(n).Silent(s.Now.Time); msg != "" {
			out = append(out, msg+"; "+s.lastReport(n))
		}
	}
	return out
}

// changing reports whether node may be off the API server because of the flip's own change
// of it: a SetBondMode of it not ended, or ended less than commitGrace ago (its agent's Lease
// renewal may lag its word on the restore); and until when, for one that ended (zero for one
// under way, whose end wakes the flip).
func (s *scope) changing(node string) (bool, time.Time) {
	var until time.Time
	for _, op := range s.ops {
		if op.Spec.SetBondMode == nil || op.Spec.NodeName != node {
			continue
		}
		if !ended(op) {
			return true, time.Time{}
		}
		if c := op.Status.CompletionTime; c != nil && s.Now.Time.Before(c.Add(commitGrace)) && c.Add(commitGrace).After(until) {
			until = c.Add(commitGrace)
		}
	}
	return !until.IsZero(), until
}

// givenUp is the set of nodes among nodes a rollback leaves out: silent, and not off the API
// server because of the flip's own change of them (changing).
func (s *scope) givenUp(nodes ...string) map[string]bool {
	out := map[string]bool{}
	for _, n := range nodes {
		if s.heartbeat(n).Silent(s.Now.Time) == "" {
			continue
		}
		if held, _ := s.changing(n); !held {
			out[n] = true
		}
	}
	return out
}

// lastReport says what node's agent last reported: its bond and DRBD.
func (s *scope) lastReport(node string) string {
	a := s.agents[node]
	if a == nil {
		return "it never reported (no NodewrightAgentStatus)"
	}
	var parts []string
	if b := a.Status.Network.Bond; b != nil {
		parts = append(parts, fmt.Sprintf("bond %s in %s", b.Interface, b.Mode))
	}
	if d := a.Status.Storage; d != nil {
		parts = append(parts, fmt.Sprintf("%d of %d DRBD resources connected and %d UpToDate", d.Connected, d.Resources, d.UpToDate))
	}
	if len(parts) == 0 {
		return "it last reported neither bond nor DRBD"
	}
	return "it last reported " + strings.Join(parts, ", ")
}

// wake is how long until the first Lease of the flip's nodes that still holds stops holding,
// or, in a rollback, a silent node is to be left out (and wakeMargin); zero when neither is
// to come.
func (s *scope) wake(rollback bool) time.Duration {
	var first time.Duration
	for _, n := range s.order {
		left := s.heartbeat(n).Left(s.Now.Time)
		if held, until := s.changing(n); rollback && left == 0 && held && !until.IsZero() {
			left = until.Sub(s.Now.Time)
		}
		if left > 0 && (first == 0 || left < first) {
			first = left
		}
	}
	if first == 0 {
		return 0
	}
	return first + wakeMargin
}

// peersOf lists the peers of pairs, once each, in their order.
func peersOf(pairs []pair) []string {
	var out []string
	for _, p := range pairs {
		if !slices.Contains(out, p.peer) {
			out = append(out, p.peer)
		}
	}
	return out
}

// leftOut says what a rollback of node k left out because their agents are silent: the
// nodes, and the flip's operations on them that have not ended; empty when none was.
func (s *scope) leftOut(k int) string {
	if len(s.leaveOut) == 0 {
		return ""
	}
	node := s.node(k)
	var nodes []string
	for _, n := range s.order {
		if s.leaveOut[n] {
			nodes = append(nodes, n)
		}
	}
	// resumed is when each pair's last resume that took effect was asked for.
	resumed := map[pair]time.Time{}
	for _, op := range s.ops {
		if p := op.Spec.DRBDResumeSync; p != nil && p.Peer == node && op.Status.Phase == nwv1.OperationSucceeded {
			key := pair{peer: op.Spec.NodeName, resource: p.Resource}
			if t := op.CreationTimestamp.Time; t.After(resumed[key]) {
				resumed[key] = t
			}
		}
	}
	var pending []string
	for _, op := range s.ops {
		if !s.leaveOut[op.Spec.NodeName] {
			continue
		}
		end, ok := op.Ended()
		switch p := op.Spec.DRBDPauseSync; {
		case p == nil || p.Peer != node || (end && !ok):
		case end && resumed[pair{peer: op.Spec.NodeName, resource: p.Resource}].After(op.CreationTimestamp.Time):
		case end:
			pending = append(pending, fmt.Sprintf("%s (the resynchronisation of %s towards %s stays paused on %s until resumed)",
				op.Name, p.Resource, node, op.Spec.NodeName))
		default:
			pending = append(pending, fmt.Sprintf("%s (a pause of %s on %s, %s; its agent refuses it after %s)",
				op.Name, p.Resource, op.Spec.NodeName, op.PhaseText(), op.Spec.Deadline.UTC().Format(time.RFC3339)))
		}
		if p := op.Spec.DRBDResumeSync; p != nil && p.Peer == node && !end {
			pending = append(pending, fmt.Sprintf("%s (a resume of %s on %s, %s)", op.Name, p.Resource, op.Spec.NodeName, op.PhaseText()))
		}
	}
	slices.Sort(pending)
	msg := fmt.Sprintf("not waited for, their agents silent: %s", strings.Join(s.silence(nodes, true), "; "))
	if len(pending) > 0 {
		msg += fmt.Sprintf("; left on them: %s", strings.Join(pending, ", "))
	}
	return msg
}

// sharesWithLeftOut reports whether the node a reports has a DRBD connection to a node the
// rollback leaves out.
func (s *scope) sharesWithLeftOut(a *nwv1.NodewrightAgentStatus) bool {
	if len(s.leaveOut) == 0 || a.Status.Storage == nil {
		return false
	}
	for _, res := range a.Status.Storage.ResourceStatuses {
		for _, p := range res.Peers {
			if s.leaveOut[p.Name] {
				return true
			}
		}
	}
	return false
}
