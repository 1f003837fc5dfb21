package replicationupgrade

import (
	"context"
	"fmt"
	"strings"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// restoreQuorum puts the groups' quorum options back as recorded.
func (r *Reconciler) restoreQuorum(ctx context.Context, s *scope) (engine.Outcome, error) {
	n := 0
	for _, g := range s.undo().ResourceGroups {
		if g.Quorum == nil {
			continue
		}
		if _, err := s.lin.ModifyResourceGroupProps(ctx, g.Name, propChange(g.Quorum)); err != nil {
			return s.retryOrFail(err, "")
		}
		n++
	}
	if n == 0 {
		return engine.Skipped("the upgrade changed no quorum option"), nil
	}
	return engine.Succeeded("the quorum options of %d resource groups as they were", n), nil
}

// removeReplicas deletes every resource of the upgrade's volumes on the joining nodes, one
// batch per reconcile, and waits until LINSTOR has none left. Each diskful one is deleted
// only as internal/linstor's DeleteAddedReplica allows: never the original's, never the only
// whole copy.
func (r *Reconciler) removeReplicas(ctx context.Context, s *scope) (engine.Outcome, error) {
	u := s.u
	if len(u.Status.ResourceDefinitions) == 0 {
		return engine.Skipped("the upgrade recorded no volume"), nil
	}
	resources, err := s.lin.Resources(ctx, linstor.ResourceFilter{Nodes: s.joining()})
	if err != nil {
		return s.retryOrFail(err, "")
	}
	mine := map[string]bool{}
	for _, d := range u.Status.ResourceDefinitions {
		mine[d] = true
	}
	var toDelete []linstor.Resource
	deleting := 0
	for _, res := range resources {
		switch {
		case !mine[res.Definition] || !s.isJoining(res.Node):
		case res.Deleting:
			deleting++
		default:
			toDelete = append(toDelete, res)
		}
	}
	left := len(toDelete) + deleting
	u.Status.Progress = fmt.Sprintf("%d replicas left to remove", left)
	if s.u.Status.Volumes != nil {
		s.u.Status.Volumes.Placed = int32(left)
	}
	if len(toDelete) > 0 {
		batch := toDelete[:min(len(toDelete), r.batchSize())]
		err := parallel(ctx, r.concurrency(), batch, func(ctx context.Context, res linstor.Resource) error {
			if res.Diskless {
				return s.lin.DeleteTiebreaker(ctx, res.Definition, res.Node)
			}
			return s.lin.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: res.Definition, Node: res.Node, Original: u.Status.OriginalNode})
		})
		if err != nil {
			return s.retryOrFail(err, "")
		}
		return engine.Waiting(again, "deleting the added replicas: %d left", left-len(batch)), nil
	}
	if deleting > 0 {
		return engine.Waiting(r.poll(), "waiting for LINSTOR to delete %d replicas on %s (a satellite that is offline deletes them once it is back)", deleting, strings.Join(s.joining(), ", ")), nil
	}
	return engine.Succeeded("no replica of the upgrade's %d volumes is left on %s; the replicas on %s are untouched",
		len(u.Status.ResourceDefinitions), strings.Join(s.joining(), ", "), u.Status.OriginalNode), nil
}

// restorePlaceCount puts the groups' place counts back as recorded.
func (r *Reconciler) restorePlaceCount(ctx context.Context, s *scope) (engine.Outcome, error) {
	var restored []string
	for _, g := range s.undo().ResourceGroups {
		if g.PlaceCount == nil {
			continue
		}
		want := *g.PlaceCount
		if want == 0 {
			// LINSTOR's API cannot unset a place count; 2 is what it read the unset one as.
			want = 2
		}
		group, err := s.lin.ResourceGroup(ctx, g.Name)
		if err != nil {
			return s.retryOrFail(err, "")
		}
		if group.PlaceCount == want || (*g.PlaceCount == 0 && group.PlaceCount == 0) {
			continue
		}
		if _, err := s.lin.SetPlaceCount(ctx, g.Name, want); err != nil {
			return s.retryOrFail(err, "")
		}
		restored = append(restored, fmt.Sprintf("%s to %d", g.Name, want))
	}
	if len(restored) == 0 {
		return engine.Skipped("no place count to put back"), nil
	}
	return engine.Succeeded("the place count of %s as it was", strings.Join(restored, ", ")), nil
}

// restoreBalance turns LINSTOR's balance task back to what it was.
func (r *Reconciler) restoreBalance(ctx context.Context, s *scope) (engine.Outcome, error) {
	undo := s.undo()
	if undo.BalanceResources == nil {
		return engine.Skipped("the upgrade did not change LINSTOR's balance task"), nil
	}
	if _, err := s.lin.ModifyControllerProps(ctx, propChange(undo.BalanceResources)); err != nil {
		return s.retryOrFail(err, "")
	}
	undo.BalanceRestored = true
	return engine.Succeeded("LINSTOR's balance task as it was"), nil
}
