package replicationupgrade

import (
	"context"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// releaseTaints removes the profile's not-ready taints from the joining nodes, after recording
// each one it will remove.
func (r *Reconciler) releaseTaints(ctx context.Context, s *scope) (engine.Outcome, error) {
	var keys []string
	if s.profile != nil {
		keys = s.profile.Spec.Storage.NotReadyTaints
	}
	if len(keys) == 0 {
		return engine.Skipped("no EdgeProfile in force names not-ready taints (storage.notReadyTaints)"), nil
	}
	undo := s.undo()
	nodes := map[string]*corev1.Node{}
	recorded := false
	for _, name := range s.joining() {
		n := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return engine.Outcome{}, err
		}
		nodes[name] = n
		for _, t := range n.Spec.Taints {
			nt := nwv1.NodeTaint{Node: name, Key: t.Key, Value: t.Value, Effect: string(t.Effect)}
			if slices.Contains(keys, t.Key) && !slices.Contains(undo.Taints, nt) {
				undo.Taints = append(undo.Taints, nt)
				recorded = true
			}
		}
	}
	if recorded {
		return engine.Waiting(again, "recorded the taints to remove before removing them"), nil
	}
	for _, name := range s.joining() {
		n := nodes[name]
		base := n.DeepCopy()
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return slices.Contains(keys, t.Key) })
		if len(n.Spec.Taints) == len(base.Spec.Taints) {
			continue
		}
		if err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return engine.Outcome{}, err
		}
	}
	if len(undo.Taints) == 0 {
		return engine.Skipped("no joining node carries a taint of %s", strings.Join(keys, ", ")), nil
	}
	return engine.Succeeded("removed the not-ready taints %s from %s", strings.Join(keys, ", "), strings.Join(s.joining(), ", ")), nil
}

// restoreTaints puts back every taint the upgrade recorded before removing it.
func (r *Reconciler) restoreTaints(ctx context.Context, s *scope) (engine.Outcome, error) {
	undo := s.undo()
	if len(undo.Taints) == 0 {
		return engine.Skipped("the upgrade removed no taint"), nil
	}
	byNode := map[string][]nwv1.NodeTaint{}
	for _, t := range undo.Taints {
		byNode[t.Node] = append(byNode[t.Node], t)
	}
	for _, name := range slices.Sorted(maps.Keys(byNode)) {
		n := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return engine.Outcome{}, err
		}
		base := n.DeepCopy()
		for _, t := range byNode[name] {
			taint := corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
			if !slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.MatchTaint(&taint) }) {
				n.Spec.Taints = append(n.Spec.Taints, taint)
			}
		}
		if len(n.Spec.Taints) == len(base.Spec.Taints) {
			continue
		}
		if err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return engine.Outcome{}, err
		}
	}
	return engine.Succeeded("put back %d not-ready taints", len(undo.Taints)), nil
}
