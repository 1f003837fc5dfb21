package bondmodeflipplan

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// The reasons of the cordon's Events.
const (
	ReasonCordoned     = "Cordoned"
	ReasonUncordoned   = "Uncordoned"
	ReasonLeftCordoned = "LeftCordoned"
)

// The Node itself is the record of a flip's cordon: spec.unschedulable and the annotation
// bondflip.AnnotationCordonedBy are set in one write and cleared in one write, each an update
// under the Node's resourceVersion, so that what someone else wrote in between is never
// overwritten (the write is refused, and the part reads the Node again). status.nodes[].cordon
// only shows what the parts found; no decision is taken from it. So an operator killed
// between the Node's write and the status's, in either direction, finds on the Node what it
// did, and a node someone else cordoned, which never carries the annotation, is never
// uncordoned.

// cordon makes node k unschedulable for its change (Cordon, RollbackCordon), unless it is
// already: then it is left alone, and stays as it is after the flip.
func (r *Reconciler) cordon(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	name, rec := s.node(k), &s.f.Status.Nodes[k-1]
	n, err := r.nodeOf(ctx, name)
	if err != nil || n == nil {
		return engine.Skipped("no Node %s in the cluster: nothing to cordon", name), err
	}
	mine := bondflip.CordonedBy(s.f.Name)
	by, marked := n.Annotations[bondflip.AnnotationCordonedBy]
	switch {
	case n.Spec.Unschedulable && marked && by == mine:
		// This part's own write, before a restart.
		rec.Cordon = nwv1.NodeCordoned
		return engine.Succeeded("cordoned %s", name), nil
	case n.Spec.Unschedulable:
		rec.Cordon = nwv1.NodeWasCordoned
		msg := fmt.Sprintf("%s was already cordoned: left alone", name)
		if marked {
			msg += fmt.Sprintf(" (its annotation %s says %s)", bondflip.AnnotationCordonedBy, by)
		}
		r.event(s, corev1.EventTypeNormal, ReasonLeftCordoned, msg)
		return engine.Succeeded("%s", msg), nil
	}
	base := n.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[bondflip.AnnotationCordonedBy] = mine
	n.Spec.Unschedulable = true
	if err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return engine.Outcome{}, fmt.Errorf("cordoning Node %s: %w", name, err)
	}
	rec.Cordon = nwv1.NodeCordoned
	r.event(s, corev1.EventTypeNormal, ReasonCordoned, fmt.Sprintf("cordoned %s for its change", name))
	return engine.Succeeded("cordoned %s", name), nil
}

// uncordon makes node k schedulable again after its change (Uncordon, RollbackUncordon), only
// if it carries this flip's annotation; the annotation goes in the same write.
func (r *Reconciler) uncordon(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	name, rec := s.node(k), &s.f.Status.Nodes[k-1]
	n, err := r.nodeOf(ctx, name)
	if err != nil || n == nil {
		return engine.Skipped("no Node %s in the cluster: nothing to uncordon", name), err
	}
	if by, marked := n.Annotations[bondflip.AnnotationCordonedBy]; !marked || by != bondflip.CordonedBy(s.f.Name) {
		switch {
		case rec.Cordon == nwv1.NodeWasCordoned:
			return engine.Skipped("%s was cordoned before the flip: left as it was", name), nil
		case n.Spec.Unschedulable:
			// Cordoned since, by someone else (this flip's cordon is always annotated).
			return engine.Skipped("%s is cordoned, not by this flip: left alone", name), nil
		case rec.Cordon == nwv1.NodeCordoned:
			// This part's own write, before a restart (or someone uncordoned it meanwhile).
			rec.Cordon = nwv1.NodeUncordoned
			return engine.Succeeded("uncordoned %s", name), nil
		}
		return engine.Skipped("%s is not cordoned by this flip: nothing to uncordon", name), nil
	}
	base := n.DeepCopy()
	delete(n.Annotations, bondflip.AnnotationCordonedBy)
	was := n.Spec.Unschedulable
	n.Spec.Unschedulable = false
	if err := r.Client.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return engine.Outcome{}, fmt.Errorf("uncordoning Node %s: %w", name, err)
	}
	rec.Cordon = nwv1.NodeUncordoned
	if !was {
		return engine.Succeeded("%s was uncordoned meanwhile, not by the flip: its annotation %s removed", name, bondflip.AnnotationCordonedBy), nil
	}
	r.event(s, corev1.EventTypeNormal, ReasonUncordoned, fmt.Sprintf("uncordoned %s after its change", name))
	return engine.Succeeded("uncordoned %s", name), nil
}

// nodeOf reads the Node past the cache (the read the update's resourceVersion comes from); nil
// when there is none.
func (r *Reconciler) nodeOf(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, n); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return n, nil
}

func (r *Reconciler) event(s *scope, eventType, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(s.f, eventType, reason, msg)
	}
}
