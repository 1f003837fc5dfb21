package replicationupgrade

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// again asks for the next reconcile at once: a batch was done, or a record written before
// the change it records.
const again = time.Millisecond

// replica is a new replica: a volume's on a joining node, in a pool (empty: diskless).
type replica struct{ def, node, pool string }

// place pauses LINSTOR's balance task, places a replica of every volume on each data node,
// one batch per reconcile, then raises the groups' place counts. Before it changes anything
// it records the balance task's setting and the groups' place counts.
func (r *Reconciler) place(ctx context.Context, s *scope) (engine.Outcome, error) {
	u, undo := s.u, s.undo()
	if undo.BalanceResources == nil {
		if err := s.recordGroupsAndBalance(ctx); err != nil {
			return s.retryOrFail(err, "")
		}
		return engine.Waiting(again, "recorded the balance task's setting and the place counts before changing them"), nil
	}
	nodes := append([]string{u.Status.OriginalNode}, u.Status.DataNodes...)
	resources, err := s.lin.Resources(ctx, linstor.ResourceFilter{Nodes: nodes})
	if err != nil {
		return s.retryOrFail(err, "")
	}
	have := index(resources)
	var missing []replica
	for _, def := range u.Status.ResourceDefinitions {
		if have[def][u.Status.OriginalNode] == nil {
			return engine.Failed("the original replica of %s on %s is gone", def, u.Status.OriginalNode), nil
		}
		for _, node := range u.Status.DataNodes {
			if have[def][node] == nil {
				missing = append(missing, replica{def: def, node: node, pool: s.poolFor(def, u.Status.OriginalNode, resources)})
			}
		}
	}
	wanted := len(u.Status.ResourceDefinitions) * len(u.Status.DataNodes)
	s.setPlaced(wanted - len(missing))
	// The balance task is paused before the first replica is placed (again after a crash
	// before any was), not at every batch.
	if len(missing) == wanted {
		if _, err := s.lin.SetBalanceResourcesEnabled(ctx, false); err != nil {
			return s.retryOrFail(err, "pause LINSTOR's balance task")
		}
	}
	if len(missing) > 0 {
		batch := missing[:min(len(missing), r.batchSize())]
		err := parallel(ctx, r.concurrency(), batch, func(ctx context.Context, x replica) error {
			return s.lin.PlaceReplica(ctx, x.def, x.node, x.pool)
		})
		if err != nil {
			return s.retryOrFail(err, "")
		}
		s.setPlaced(wanted - len(missing) + len(batch))
		return engine.Waiting(again, "placed %d of %d replicas", wanted-len(missing)+len(batch), wanted), nil
	}
	var raised []string
	for _, g := range undo.ResourceGroups {
		group, err := s.lin.ResourceGroup(ctx, g.Name)
		if err != nil {
			return s.retryOrFail(err, "")
		}
		if group.PlaceCount >= u.Spec.ReplicaCount {
			continue
		}
		// Every volume has its replicas already: the modify has nothing to autoplace
		// (linstor-server#253).
		if _, err := s.lin.SetPlaceCount(ctx, g.Name, u.Spec.ReplicaCount); err != nil {
			return s.retryOrFail(err, "")
		}
		raised = append(raised, g.Name)
	}
	msg := fmt.Sprintf("placed %d replicas on %s", wanted, strings.Join(u.Status.DataNodes, " and "))
	if len(raised) > 0 {
		msg += fmt.Sprintf("; the place count of %s raised to %d", strings.Join(raised, ", "), u.Spec.ReplicaCount)
	}
	return engine.Succeeded("%s", msg), nil
}

// recordGroupsAndBalance records, before Place changes them, the balance task's setting and
// the place count of every group of the upgrade's volumes.
func (s *scope) recordGroupsAndBalance(ctx context.Context) error {
	props, err := s.lin.ControllerProps(ctx)
	if err != nil {
		return err
	}
	balance := &nwv1.PropertyChange{}
	if v, ok := props[linstor.PropBalanceResourcesEnabled]; ok {
		balance.Set = map[string]string{linstor.PropBalanceResourcesEnabled: v}
	} else {
		balance.Delete = []string{linstor.PropBalanceResourcesEnabled}
	}
	defs, err := s.lin.ResourceDefinitions(ctx)
	if err != nil {
		return err
	}
	var groups []string
	for _, d := range defs {
		if slices.Contains(s.u.Status.ResourceDefinitions, d.Name) && !slices.Contains(groups, d.Group) {
			groups = append(groups, d.Group)
		}
	}
	slices.Sort(groups)
	undo := s.undo()
	undo.ResourceGroups = nil
	for _, name := range groups {
		g, err := s.lin.ResourceGroup(ctx, name)
		if err != nil {
			return err
		}
		undo.ResourceGroups = append(undo.ResourceGroups, nwv1.ResourceGroupUndo{Name: name, PlaceCount: ptr.To(g.PlaceCount)})
	}
	undo.BalanceResources = balance
	return nil
}

// index maps resources by definition and node.
func index(resources []linstor.Resource) map[string]map[string]*linstor.Resource {
	out := map[string]map[string]*linstor.Resource{}
	for i, r := range resources {
		if out[r.Definition] == nil {
			out[r.Definition] = map[string]*linstor.Resource{}
		}
		out[r.Definition][r.Node] = &resources[i]
	}
	return out
}

// setPlaced records how many new replicas LINSTOR has, and the progress it shows.
func (s *scope) setPlaced(placed int) {
	v := s.volumes()
	v.Placed = int32(placed)
	s.u.Status.Progress = fmt.Sprintf("%d/%d replicas placed", v.Placed, v.Replicas)
}

// syncTimeout is the upgrade's spec.syncTimeout.
func syncTimeout(u *nwv1.ReplicationUpgrade) time.Duration {
	if d := u.Spec.SyncTimeout.Duration; d > 0 {
		return d
	}
	return defaultSyncTimeout
}

// maxSyncing bounds status.syncing.
const maxSyncing = 16

// sync waits until every new replica is UpToDate, showing the progress of each, and fails when
// a satellite goes offline or the synchronisation outlasts spec.syncTimeout.
func (r *Reconciler) sync(ctx context.Context, s *scope) (engine.Outcome, error) {
	u := s.u
	// The step's own status write wakes it again at once: LINSTOR is read once a poll, not at
	// every wake (the message kept, nothing is written).
	if left := r.sinceRead(u.UID, s.Now.Time); left > 0 {
		return engine.Waiting(left, "%s", stepMessage(u, replupgrade.Sync)), nil
	}
	nodes := append([]string{u.Status.OriginalNode}, u.Status.DataNodes...)
	lnodes, err := s.lin.Nodes(ctx, nodes...)
	if err != nil {
		return s.retryOrFail(err, "")
	}
	for _, n := range lnodes {
		if !n.Online() {
			return engine.Failed("the LINSTOR satellite of %s is %s during the synchronisation", n.Name, n.ConnectionStatus), nil
		}
	}
	resources, err := s.lin.Resources(ctx, linstor.ResourceFilter{Nodes: u.Status.DataNodes})
	if err != nil {
		return s.retryOrFail(err, "")
	}
	have := index(resources)
	var syncing []nwv1.ReplicaSync
	total, upToDate := 0.0, 0
	for _, def := range u.Status.ResourceDefinitions {
		whole := true
		for _, node := range u.Status.DataNodes {
			res := have[def][node]
			if res == nil {
				return engine.Failed("the new replica of %s on %s is gone", def, node), nil
			}
			percent, _ := res.SyncProgress()
			total += percent
			if !res.UpToDate() {
				whole = false
				syncing = append(syncing, nwv1.ReplicaSync{Resource: def, Node: node, Percent: int32(math.Floor(min(percent, 99)))})
			}
		}
		if whole {
			upToDate++
		}
	}
	slices.SortFunc(syncing, func(a, b nwv1.ReplicaSync) int {
		if a.Percent != b.Percent {
			return int(a.Percent - b.Percent)
		}
		return strings.Compare(a.Resource+"/"+a.Node, b.Resource+"/"+b.Node)
	})
	replicas := len(u.Status.ResourceDefinitions) * len(u.Status.DataNodes)
	percent := int32(100)
	if replicas > 0 && len(syncing) > 0 {
		percent = int32(math.Floor(min(total/float64(replicas), 99)))
	}
	v := s.volumes()
	v.UpToDate = int32(upToDate)
	u.Status.SyncPercent = ptr.To(percent)
	u.Status.Syncing = syncing[:min(len(syncing), maxSyncing)]
	u.Status.Progress = fmt.Sprintf("%d%% synced, %d/%d volumes UpToDate", percent, upToDate, v.Total)
	if len(syncing) == 0 {
		return engine.Succeeded("every new replica is UpToDate (%d volumes on %s)", upToDate, strings.Join(u.Status.DataNodes, " and ")), nil
	}
	limit := syncTimeout(u)
	if passed, left := s.Deadline(limit); passed {
		slow := syncing[0]
		return engine.Failed("the synchronisation did not end within spec.syncTimeout %s: %d of %d volumes UpToDate; the slowest, %s on %s, at %d%%",
			limit, upToDate, v.Total, slow.Resource, slow.Node, slow.Percent), nil
	} else {
		return engine.Waiting(min(left, r.poll()), "synchronising: %d%%, %d of %d volumes UpToDate", percent, upToDate, v.Total), nil
	}
}

// verifyName is the name of the online verify of def.
func verifyName(u *nwv1.ReplicationUpgrade, def string) string {
	sum := sha256.Sum256([]byte(def))
	return children.Name(u.Name, "verify-"+hex.EncodeToString(sum[:])[:10])
}

// verify runs DRBD's online verify of every volume on the original node's agent, a few at a
// time, and fails at the first that finds a block out of sync, or once that agent is silent
// (heartbeats.go).
func (r *Reconciler) verify(ctx context.Context, s *scope) (engine.Outcome, error) {
	u := s.u
	silent, wake, err := r.silent(ctx, u.Status.OriginalNode, s.Now.Time)
	if err != nil {
		return engine.Outcome{}, err
	}
	verified, running := 0, 0
	var toStart []string
	for _, def := range u.Status.ResourceDefinitions {
		op := s.ops[verifyName(u, def)]
		switch {
		case op == nil:
			toStart = append(toStart, def)
		case op.Status.Phase == nwv1.OperationSucceeded:
			if res := op.Status.Result; res != nil && res.OutOfSyncKiB != nil && *res.OutOfSyncKiB > 0 {
				return engine.Failed("DRBD's online verify of %s on %s found %d KiB out of sync with its new replicas", def, u.Status.OriginalNode, *res.OutOfSyncKiB), nil
			}
			verified++
		case op.Status.Phase == nwv1.OperationFailed || op.Status.Phase == nwv1.OperationRolledBack:
			msg := string(op.Status.Phase)
			if e := op.Status.Error; e != nil {
				msg += ", " + e.Reason + ": " + e.Message
			}
			return engine.Failed("DRBD's online verify of %s on %s: %s", def, u.Status.OriginalNode, msg), nil
		case !op.Spec.Deadline.IsZero() && !s.Now.Before(&op.Spec.Deadline):
			// Its agent would have ended it by then: the agent is gone.
			return engine.Failed("DRBD's online verify of %s on %s did not end by its deadline %s (phase %q): is the node's agent running?",
				def, u.Status.OriginalNode, op.Spec.Deadline.UTC().Format(time.RFC3339), op.Status.Phase), nil
		default:
			running++
		}
	}
	s.volumes().Verified = int32(verified)
	u.Status.Progress = fmt.Sprintf("%d/%d volumes verified", verified, len(u.Status.ResourceDefinitions))
	if verified == len(u.Status.ResourceDefinitions) {
		return engine.Succeeded("DRBD's online verify found every volume identical on every replica (%d volumes)", verified), nil
	}
	if silent != "" {
		return engine.Failed("DRBD's online verify on %s cannot go on: %s; %d of %d volumes verified, %d verifies asked for and not ended",
			u.Status.OriginalNode, silent, verified, len(u.Status.ResourceDefinitions), running), nil
	}
	for _, def := range toStart[:min(len(toStart), max(r.concurrency()-running, 0))] {
		if err := r.startVerify(ctx, s, def); err != nil {
			return engine.Outcome{}, err
		}
	}
	return engine.Waiting(min(verifyDeadline, wake), "verifying: %d of %d volumes verified, %d running", verified, len(u.Status.ResourceDefinitions), running), nil
}

// startVerify asks the original node's agent for the online verify of def.
func (r *Reconciler) startVerify(ctx context.Context, s *scope, def string) error {
	u := s.u
	op := &nwv1.NodeOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.AgentNamespace, Name: verifyName(u, def),
			OwnerReferences: []metav1.OwnerReference{replupgrade.Descriptor.ControllerRef(u)}},
		Spec: nwv1.NodeOperationSpec{NodeName: u.Status.OriginalNode, Type: nwv1.OperationDRBDVerify,
			Deadline: metav1.NewTime(s.Now.Add(verifyDeadline)), DRBDVerify: &nwv1.DRBDResourceOperation{Resource: def}},
	}
	if err := children.Ensure(ctx, r.Client, r.APIReader, replupgrade.Descriptor.Owner(u), "NodeOperation", op); err != nil {
		return err
	}
	s.ops[op.Name] = op
	return nil
}

// quorum places the diskless tiebreakers, one batch per reconcile, then sets quorum majority
// and the profile's on-no-quorum on the groups, and turns LINSTOR's balance task back. It
// records the groups' quorum options before it changes them.
func (r *Reconciler) quorum(ctx context.Context, s *scope) (engine.Outcome, error) {
	u, undo := s.u, s.undo()
	if slices.ContainsFunc(undo.ResourceGroups, func(g nwv1.ResourceGroupUndo) bool { return g.Quorum == nil }) {
		for i := range undo.ResourceGroups {
			g, err := s.lin.ResourceGroup(ctx, undo.ResourceGroups[i].Name)
			if err != nil {
				return s.retryOrFail(err, "")
			}
			before := &nwv1.PropertyChange{}
			for _, key := range []string{linstor.PropQuorum, linstor.PropOnNoQuorum} {
				if v, ok := g.Props[key]; ok {
					if before.Set == nil {
						before.Set = map[string]string{}
					}
					before.Set[key] = v
				} else {
					before.Delete = append(before.Delete, key)
				}
			}
			undo.ResourceGroups[i].Quorum = before
		}
		return engine.Waiting(again, "recorded the groups' quorum options before changing them"), nil
	}
	if t := u.Spec.TiebreakerNode; t != "" {
		resources, err := s.lin.Resources(ctx, linstor.ResourceFilter{Nodes: []string{t}})
		if err != nil {
			return s.retryOrFail(err, "")
		}
		have := index(resources)
		var missing []string
		for _, def := range u.Status.ResourceDefinitions {
			if have[def][t] == nil {
				missing = append(missing, def)
			}
		}
		diskful := len(u.Status.ResourceDefinitions) * len(u.Status.DataNodes)
		s.setPlaced(diskful + len(u.Status.ResourceDefinitions) - len(missing))
		if len(missing) > 0 {
			batch := missing[:min(len(missing), r.batchSize())]
			if err := parallel(ctx, r.concurrency(), batch, func(ctx context.Context, def string) error {
				return s.lin.PlaceTiebreaker(ctx, def, t)
			}); err != nil {
				return s.retryOrFail(err, "")
			}
			s.setPlaced(diskful + len(u.Status.ResourceDefinitions) - len(missing) + len(batch))
			return engine.Waiting(again, "placed %d of %d tiebreakers on %s", len(u.Status.ResourceDefinitions)-len(missing)+len(batch), len(u.Status.ResourceDefinitions), t), nil
		}
	}
	want := linstor.Quorum{Quorum: "majority", OnNoQuorum: string(onNoQuorum(s.profile))}
	for _, g := range undo.ResourceGroups {
		if _, err := s.lin.SetResourceGroupQuorum(ctx, g.Name, want); err != nil {
			return s.retryOrFail(err, "")
		}
	}
	if !undo.BalanceRestored {
		if _, err := s.lin.ModifyControllerProps(ctx, propChange(undo.BalanceResources)); err != nil {
			return s.retryOrFail(err, "turn LINSTOR's balance task back")
		}
		undo.BalanceRestored = true
	}
	msg := fmt.Sprintf("quorum majority, on-no-quorum %s on %d resource groups; LINSTOR's balance task as it was", want.OnNoQuorum, len(undo.ResourceGroups))
	if t := u.Spec.TiebreakerNode; t != "" {
		msg = fmt.Sprintf("a diskless tiebreaker of each volume on %s; %s", t, msg)
	}
	return engine.Succeeded("%s", msg), nil
}

// onNoQuorum is the profile's on-no-quorum policy, suspend-io by default.
func onNoQuorum(p *nwv1.EdgeProfile) nwv1.OnNoQuorum {
	if p != nil && p.Spec.Storage.LINSTOR != nil && p.Spec.Storage.LINSTOR.OnNoQuorum != "" {
		return p.Spec.Storage.LINSTOR.OnNoQuorum
	}
	return nwv1.OnNoQuorumSuspendIO
}

// sinceRead is how long the Sync of the upgrade uid should wait before reading LINSTOR again,
// zero when it may read now (and it is noted as read).
func (r *Reconciler) sinceRead(uid types.UID, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.syncRead == nil {
		r.syncRead = map[types.UID]time.Time{}
	}
	if last, ok := r.syncRead[uid]; ok && now.Sub(last) < r.poll() && now.After(last) {
		return r.poll() - now.Sub(last)
	}
	r.syncRead[uid] = now
	return 0
}

// stepMessage is the message status.steps shows for step.
func stepMessage(u *nwv1.ReplicationUpgrade, step replupgrade.Step) string {
	for _, st := range u.Status.Steps {
		if st.Name == string(step) {
			return st.Message
		}
	}
	return ""
}
