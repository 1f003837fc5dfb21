package replicationupgrade

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// preflight checks, before anything changes, what the upgrade needs beyond the gates
// (management mode, the claim, the cluster's health), and records what it found:
//
//   - the operator knows the agents' namespace, and LINSTOR answers through the gate, which
//     forwards to the LINSTOR the EdgeProfile names, if it names one;
//   - the EdgeProfile in force, if any, says the storage is LINSTOR;
//   - the cluster is SingleNode: its storage lives on one node;
//   - every joining node is Ready and its agent reports, its heartbeat Lease renewed within
//     its duration, as does the original node's;
//   - LINSTOR holds every volume's replicas on one node, the original, which is not joining,
//     and nothing of them on the joining nodes;
//   - the joining nodes' satellites are online: registered by Piraeus (waited for), or by
//     Nodewright itself where the profile says so;
//   - a storage pool on each joining data node has room for a replica of every volume.
func (r *Reconciler) preflight(ctx context.Context, s *scope) (engine.Outcome, error) {
	u := s.u
	if r.AgentNamespace == "" {
		return engine.Failed("the operator runs without --agent-namespace: no node agent can verify the replicas"), nil
	}
	if p := s.profile; p != nil && p.Spec.Storage.Backend != nwv1.StorageLINSTOR {
		return engine.Failed("EdgeProfile %s says the storage is %s, not LINSTOR", p.Name, p.Spec.Storage.Backend), nil
	}
	nwc := &nwv1.NodewrightCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
		return engine.Outcome{}, err
	}
	if nwc.Status.Phase != nwv1.ClusterSingleNode {
		return engine.Failed("the cluster is %s; a replication upgrade starts from SingleNode storage", nwc.Status.Phase), nil
	}
	for i, node := range s.joining() {
		if msg, err := r.nodeReady(ctx, node); err != nil {
			return engine.Outcome{}, err
		} else if msg != "" {
			return engine.Failed("spec.peerNodes[%d]: %s", i, msg), nil
		}
	}
	if _, err := s.lin.Version(ctx); err != nil {
		return s.retryOrFail(err, "LINSTOR does not answer")
	}
	if msg, err := checkGateUpstream(ctx, s); err != nil {
		return s.retryOrFail(err, "the LINSTOR gate does not say where it forwards")
	} else if msg != "" {
		return engine.Failed("%s", msg), nil
	}
	defs, err := s.lin.ResourceDefinitions(ctx)
	if err != nil {
		return s.retryOrFail(err, "")
	}
	resources, err := s.lin.Resources(ctx, linstor.ResourceFilter{})
	if err != nil {
		return s.retryOrFail(err, "")
	}
	original, names, msg := originalNode(defs, resources)
	if msg != "" {
		return engine.Failed("%s", msg), nil
	}
	if s.isJoining(original) {
		return engine.Failed("spec.peerNodes: %s holds every volume's replica already; it is the original node, not one that joins", original), nil
	}
	if msg, err := r.nodeReady(ctx, original); err != nil || msg != "" {
		return engine.Failed("%s", msg), err
	}
	for _, res := range resources {
		if s.isJoining(res.Node) {
			return engine.Failed("%s already holds a resource of %s: a node that joins holds nothing yet", res.Node, res.Definition), nil
		}
	}
	if out, done, err := r.satellites(ctx, s, original); !done || err != nil {
		return out, err
	}
	dataNodes := replupgrade.DataNodes(u.Spec)
	if missing, msg, err := s.roomFor(ctx, original, dataNodes, names, defs, resources); err != nil || msg != "" {
		if err != nil {
			return s.retryOrFail(err, "")
		}
		// A pool comes with its satellite (Piraeus makes both); one that has not come yet
		// is waited for as the satellite is.
		if passed, left := s.Deadline(satelliteTimeout); missing && !passed {
			return engine.Waiting(min(left, r.poll()), "waiting: %s", msg), nil
		}
		return engine.Failed("%s", msg), nil
	}
	u.Status.OriginalNode, u.Status.DataNodes, u.Status.ResourceDefinitions = original, dataNodes, names
	replicas := len(names) * len(dataNodes)
	if u.Spec.TiebreakerNode != "" {
		replicas += len(names)
	}
	u.Status.Volumes = &nwv1.ReplicationVolumeCounts{Total: int32(len(names)), Replicas: int32(replicas)}
	u.Status.Progress = fmt.Sprintf("0/%d replicas placed", replicas)
	msg = fmt.Sprintf("%s holds %d volumes; a replica of each goes to %s", original, len(names), strings.Join(dataNodes, " and "))
	if t := u.Spec.TiebreakerNode; t != "" {
		msg += ", a diskless tiebreaker to " + t
	}
	return engine.Succeeded("%s", msg), nil
}

// retryOrFail fails the step for a LINSTOR refusal retrying cannot mend, and returns other
// failures for the engine to retry; before says what failed, when the error does not.
func (s *scope) retryOrFail(err error, before string) (engine.Outcome, error) {
	if before != "" {
		err = fmt.Errorf("%s: %w", before, err)
	}
	if refused(err) {
		return engine.Failed("%v", err), nil
	}
	return engine.Outcome{}, err
}

// nodeReady says why node cannot take part, empty when it can: it is a Node, Ready, and its
// agent reports with a fresh heartbeat, its Lease renewed within the Lease's duration.
func (r *Reconciler) nodeReady(ctx context.Context, node string) (string, error) {
	n := &corev1.Node{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: node}, n); apierrors.IsNotFound(err) {
		return fmt.Sprintf("%s is not a Node of the cluster", node), nil
	} else if err != nil {
		return "", err
	}
	ready := slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
	if !ready {
		return fmt.Sprintf("Node %s is not Ready", node), nil
	}
	a := &nwv1.NodewrightAgentStatus{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: node}, a); apierrors.IsNotFound(err) {
		return fmt.Sprintf("%s: no agent reports it (no NodewrightAgentStatus)", node), nil
	} else if err != nil {
		return "", err
	}
	switch {
	case a.Status.Reporter != nwv1.ReporterAgent:
		return fmt.Sprintf("%s: its agent does not report it (reporter %q)", node, a.Status.Reporter), nil
	case a.Status.Heartbeat.Stale:
		return fmt.Sprintf("%s: its agent's heartbeat is stale", node), nil
	}
	if msg, _, err := r.silent(ctx, node, time.Now()); err != nil || msg != "" {
		return msg, err
	}
	return "", nil
}

// originalNode finds the node that holds every volume's data: the one node with diskful
// replicas. It returns the volumes it holds, by name; or says why there is no such node.
func originalNode(defs []linstor.ResourceDefinition, resources []linstor.Resource) (string, []string, string) {
	holders := map[string][]string{}
	for _, r := range resources {
		if !r.Diskless && !r.Deleting {
			holders[r.Node] = append(holders[r.Node], r.Definition)
		}
	}
	switch len(holders) {
	case 0:
		return "", nil, fmt.Sprintf("LINSTOR holds no replica of any of its %d resource definitions: nothing to replicate", len(defs))
	case 1:
	default:
		var nodes []string
		for n := range holders {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
		return "", nil, fmt.Sprintf("LINSTOR holds replicas on %s; a replication upgrade starts from storage on one node", strings.Join(nodes, ", "))
	}
	for node, names := range holders {
		slices.Sort(names)
		return node, slices.Compact(names), ""
	}
	return "", nil, ""
}

// satellites makes sure every joining node's satellite, and the original's, is online:
// Piraeus registers them (the upgrade waits); where the profile says Nodewright does, it
// registers a missing one at the node's InternalIP. done is false while it waits.
func (r *Reconciler) satellites(ctx context.Context, s *scope, original string) (engine.Outcome, bool, error) {
	nodes, err := s.lin.Nodes(ctx)
	if err != nil {
		out, err := s.retryOrFail(err, "")
		return out, false, err
	}
	known := map[string]linstor.Node{}
	for _, n := range nodes {
		known[n.Name] = n
	}
	registrar := nwv1.SatellitesPiraeus
	if p := s.profile; p != nil && p.Spec.Storage.LINSTOR != nil && p.Spec.Storage.LINSTOR.Satellites != "" {
		registrar = p.Spec.Storage.LINSTOR.Satellites
	}
	var waiting []string
	for _, node := range append([]string{original}, s.joining()...) {
		n, ok := known[node]
		switch {
		case !ok && node != original && registrar == nwv1.SatellitesNodewright:
			addr, err := r.internalIP(ctx, node)
			if err != nil || addr == "" {
				return engine.Failed("%s has no InternalIP to register its LINSTOR satellite at", node), false, err
			}
			if err := s.lin.RegisterNode(ctx, linstor.Satellite{Name: node, Address: addr}); err != nil {
				out, err := s.retryOrFail(err, "")
				return out, false, err
			}
			waiting = append(waiting, node+" (registered, not yet ONLINE)")
		case !ok && node == original:
			return engine.Failed("LINSTOR has no node %s, which holds the volumes", node), false, nil
		case !ok:
			waiting = append(waiting, node+" (not registered: Piraeus registers it from its LinstorSatellite)")
		case !n.Online():
			waiting = append(waiting, fmt.Sprintf("%s (%s)", node, n.ConnectionStatus))
		}
	}
	if len(waiting) == 0 {
		return engine.Outcome{}, true, nil
	}
	msg := "waiting for the LINSTOR satellites of " + strings.Join(waiting, ", ")
	if passed, left := s.Deadline(satelliteTimeout); passed {
		return engine.Failed("%s for %s", msg, satelliteTimeout), false, nil
	} else {
		return engine.Waiting(min(left, r.poll()), "%s", msg), false, nil
	}
}

// internalIP is node's InternalIP.
func (r *Reconciler) internalIP(ctx context.Context, node string) (string, error) {
	n := &corev1.Node{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return "", err
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address, nil
		}
	}
	return "", nil
}

// roomFor says which data node's pool has no room for the new replicas, empty when each has;
// missing when the pool is not there at all.
func (s *scope) roomFor(ctx context.Context, original string, dataNodes, names []string, defs []linstor.ResourceDefinition, resources []linstor.Resource) (missing bool, msg string, err error) {
	size := map[string]int64{}
	for _, d := range defs {
		size[d.Name] = d.SizeKiB()
	}
	pools, err := s.lin.StoragePools(ctx, dataNodes...)
	if err != nil {
		return false, "", err
	}
	type key struct{ node, pool string }
	have := map[key]linstor.StoragePool{}
	for _, p := range pools {
		have[key{p.Node, p.Name}] = p
	}
	need := map[key]int64{}
	for _, name := range names {
		pool := s.poolFor(name, original, resources)
		if pool == "" {
			return false, fmt.Sprintf("the replica of %s on %s names no storage pool", name, original), nil
		}
		for _, node := range dataNodes {
			need[key{node, pool}] += size[name]
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(need), func(a, b key) int { return strings.Compare(a.node+"/"+a.pool, b.node+"/"+b.pool) }) {
		p, ok := have[k]
		switch {
		case !ok:
			return true, fmt.Sprintf("%s has no storage pool %s for the new replicas", k.node, k.pool), nil
		case p.Diskless():
			return false, fmt.Sprintf("storage pool %s on %s is diskless", k.pool, k.node), nil
		case !p.Fits(need[k]):
			return false, fmt.Sprintf("storage pool %s on %s has %d KiB free; the new replicas need %d KiB", k.pool, k.node, p.FreeKiB, need[k]), nil
		}
	}
	return false, "", nil
}

// poolFor is the pool a new replica of def goes to: the profile's, or the original replica's.
func (s *scope) poolFor(def, original string, resources []linstor.Resource) string {
	if p := s.profile; p != nil && p.Spec.Storage.LINSTOR != nil && p.Spec.Storage.LINSTOR.StoragePool != "" {
		return p.Spec.Storage.LINSTOR.StoragePool
	}
	for _, r := range resources {
		if r.Definition == def && r.Node == original && len(r.Volumes) > 0 {
			return r.Volumes[0].StoragePool
		}
	}
	return ""
}
