package bondmodeflipplan

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// drbdOpDeadline bounds a DRBD pause or resume: the agent runs one drbdadm command.
const drbdOpDeadline = 5 * time.Minute

// opName is the deterministic name of the flip's operation with suffix.
func opName(f *nwv1.BondModeFlipPlan, suffix string) string { return children.Name(f.Name, suffix) }

// shortHash names a pair (a peer and a resource) in a child's name.
func shortHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:10]
}

// ensureOp asks node's agent for the operation spec, made by the part step names
// (Node1SetBondMode), under name: it creates the NodeOperation unless it exists, and returns
// it as it is now.
func (r *Reconciler) ensureOp(ctx context.Context, s *scope, name, node string, step string, deadline time.Duration, spec nwv1.NodeOperationSpec) (*nwv1.NodeOperation, error) {
	if op, ok := s.ops[name]; ok {
		return op, nil
	}
	f := s.f
	spec.NodeName = node
	spec.Deadline = metav1.NewTime(s.Now.Add(deadline))
	op := &nwv1.NodeOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.AgentNamespace, Name: name, Labels: map[string]string{bondflip.LabelStep: step},
			OwnerReferences: []metav1.OwnerReference{bondflip.Descriptor.ControllerRef(f)}},
		Spec: spec,
	}
	if err := children.Ensure(ctx, r.Client, r.APIReader, bondflip.Descriptor.Owner(f), "NodeOperation", op); err != nil {
		return nil, err
	}
	s.ops[name] = op
	return op, nil
}

// ended reports whether op has ended, however.
func ended(op *nwv1.NodeOperation) bool {
	end, _ := op.Ended()
	return end
}

// armed reports whether a SetBondMode is changed and probed, waiting for its commit.
func armed(op *nwv1.NodeOperation) bool {
	return op.Status.Phase == nwv1.OperationRunning && op.Status.Result != nil && op.Status.Result.CheckpointExpires != nil
}

// pair is a DRBD resource on a peer of the node being changed: the peer's agent pauses or
// resumes its resynchronisation towards the node.
type pair struct{ peer, resource string }

// pairsTowards lists, from the peers' reports, every resource a peer of node shares with it.
func (s *scope) pairsTowards(node string) []pair {
	var out []pair
	for _, peer := range s.order {
		a := s.agents[peer]
		if peer == node || a == nil || a.Status.Storage == nil || s.leaveOut[peer] {
			continue
		}
		for _, res := range a.Status.Storage.ResourceStatuses {
			for _, p := range res.Peers {
				if p.Name == node {
					out = append(out, pair{peer: peer, resource: res.Name})
				}
			}
		}
	}
	return out
}

// syncOps asks, for each pair, the peer's agent to pause (or resume) the resynchronisation
// towards node, under names made of prefix, and says whether all succeeded, or which failed.
func (r *Reconciler) syncOps(ctx context.Context, s *scope, k int, prefix string, pairs []pair, resume bool) (done bool, failed string, err error) {
	node := s.node(k)
	done = true
	for _, p := range pairs {
		spec := nwv1.NodeOperationSpec{Type: nwv1.OperationDRBDPauseSync, DRBDPauseSync: &nwv1.DRBDPeerOperation{Resource: p.resource, Peer: node}}
		if resume {
			spec = nwv1.NodeOperationSpec{Type: nwv1.OperationDRBDResumeSync, DRBDResumeSync: &nwv1.DRBDPeerOperation{Resource: p.resource, Peer: node}}
		}
		op, err := r.ensureOp(ctx, s, opName(s.f, prefix+"-"+shortHash(p.peer, p.resource)), p.peer, s.label(k), drbdOpDeadline, spec)
		if err != nil {
			return false, "", err
		}
		switch end, ok := op.Ended(); {
		case !end:
			done = false
		case !ok:
			return false, fmt.Sprintf("%s of %s towards %s on %s: %s", op.Spec.Type, p.resource, node, p.peer, op.Outcome()), nil
		}
	}
	return done, "", nil
}

// pausedPairs lists the pairs the flip's pause operations named prefix asked for, from the
// operations themselves (the steps are the state).
func (s *scope) pausedPairs(node string, prefixes ...string) []pair {
	var out []pair
	seen := map[pair]bool{}
	for _, op := range s.ops {
		if op.Spec.DRBDPauseSync == nil || op.Spec.DRBDPauseSync.Peer != node || s.leaveOut[op.Spec.NodeName] {
			continue
		}
		for _, prefix := range prefixes {
			p := pair{peer: op.Spec.NodeName, resource: op.Spec.DRBDPauseSync.Resource}
			if op.Name == opName(s.f, prefix+"-"+shortHash(p.peer, p.resource)) && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// confirmPairs are the pairs node's Confirm must see Connected: every pair the peers report,
// and every pair the pause operations named paused asked for.
func (s *scope) confirmPairs(node, paused string) []pair {
	out := s.pairsTowards(node)
	for _, p := range s.pausedPairs(node, paused) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// connected says which of pairs its peer's report does not show Connected to node, empty when
// each does: a peer without DRBD in its report, without the resource, or without the node
// among the resource's connections is not.
func (s *scope) connected(node string, pairs []pair) string {
	for _, p := range pairs {
		a := s.agents[p.peer]
		if a == nil || a.Status.Storage == nil {
			return fmt.Sprintf("%s reports no DRBD resources", p.peer)
		}
		i := slices.IndexFunc(a.Status.Storage.ResourceStatuses, func(r nwv1.DRBDResourceStatus) bool { return r.Name == p.resource })
		if i < 0 {
			return fmt.Sprintf("%s reports no resource %s", p.peer, p.resource)
		}
		res := a.Status.Storage.ResourceStatuses[i]
		j := slices.IndexFunc(res.Peers, func(c nwv1.DRBDPeerStatus) bool { return c.Name == node })
		switch {
		case j < 0:
			return fmt.Sprintf("%s reports no connection of %s to %s", p.peer, p.resource, node)
		case res.Peers[j].ConnectionState != "Connected":
			return fmt.Sprintf("%s sees %s's connection of %s %s", p.peer, node, p.resource, res.Peers[j].ConnectionState)
		}
	}
	return ""
}

// upToDate says what keeps node's DRBD from being whole again, empty when nothing does: every
// resource of the node connected and UpToDate, and every peer seeing it Connected and
// UpToDate.
func (s *scope) upToDate(node string) string {
	if a := s.agents[node]; a != nil && a.Status.Storage != nil && !s.leaveOut[node] {
		st := a.Status.Storage
		if len(s.leaveOut) > 0 && len(st.ResourceStatuses) > 0 {
			if msg := s.wholeBut(node, st); msg != "" {
				return msg
			}
		} else if st.Connected < st.Resources || st.UpToDate < st.Resources {
			return fmt.Sprintf("%s reports %d of %d DRBD resources connected and %d UpToDate", node, st.Connected, st.Resources, st.UpToDate)
		}
	}
	return s.peersSee(node)
}

// wholeBut says what keeps node's DRBD, as it reports it resource by resource, from being
// whole but for its connections to the nodes a rollback leaves out (a silent peer's DRBD may
// be gone with it); empty when nothing does.
func (s *scope) wholeBut(node string, st *nwv1.DRBDStatus) string {
	for _, res := range st.ResourceStatuses {
		for _, v := range res.Volumes {
			if v.DiskState != "UpToDate" && !v.Client {
				return fmt.Sprintf("%s reports its disk of %s/%d %s", node, res.Name, v.Volume, v.DiskState)
			}
		}
		for _, p := range res.Peers {
			if p.ConnectionState != "Connected" && !s.leaveOut[p.Name] {
				return fmt.Sprintf("%s reports its connection of %s to %s %s", node, res.Name, p.Name, p.ConnectionState)
			}
		}
	}
	return ""
}

// peersSee says which peer does not see node's DRBD connections Connected and its disks
// UpToDate, empty when every peer does.
func (s *scope) peersSee(node string) string {
	for _, p := range s.pairsTowards(node) {
		for _, res := range s.agents[p.peer].Status.Storage.ResourceStatuses {
			if res.Name != p.resource {
				continue
			}
			for _, peer := range res.Peers {
				if peer.Name != node {
					continue
				}
				if peer.ConnectionState != "Connected" {
					return fmt.Sprintf("%s sees %s's connection of %s %s", p.peer, node, p.resource, peer.ConnectionState)
				}
				for _, v := range peer.Volumes {
					if v.PeerDiskState != "UpToDate" && !v.PeerClient {
						return fmt.Sprintf("%s sees %s's disk of %s/%d %s (%s)", p.peer, node, p.resource, v.Volume, v.PeerDiskState, v.ReplicationState)
					}
				}
			}
		}
	}
	return ""
}
