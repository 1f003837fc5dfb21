// Package nodecordon is a workflow's cordon of the node it changes, shared by the kinds that
// cordon (a flip, an OS upgrade). The Node itself is the record: spec.unschedulable and the
// annotation AnnotationCordonedBy (naming the workflow: "bondmodeflipplan/<name>") are set in
// one write and cleared in one write, each an update under the Node's resourceVersion, so that
// what someone else wrote in between is never overwritten (the write is refused, and the part
// reads the Node again). A workflow's status only shows what its parts found; no decision is
// taken from it. So an operator killed between the Node's write and the status's, in either
// direction, finds on the Node what it did, and a node someone else cordoned, which never
// carries the annotation, is never uncordoned. The chart's policy nodewright-operator-nodes
// holds the operator to that pairing.
package nodecordon

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// AnnotationCordonedBy is on a Node a workflow cordoned, naming it. It is written in the same
// update that sets spec.unschedulable and removed in the one that clears it.
const AnnotationCordonedBy = "nodewright.spectrocloud.com/cordoned-by"

// The reasons of the cordon's Events.
const (
	ReasonCordoned     = "Cordoned"
	ReasonUncordoned   = "Uncordoned"
	ReasonLeftCordoned = "LeftCordoned"
)

// Result is what a cordon or an uncordon found and did: the record for the workflow's status,
// its message, whether there was nothing to do (Skipped), and the Event's reason ("" for none).
type Result struct {
	Cordon  nwv1.NodeCordon
	Message string
	Skipped bool
	Reason  string
}

// Cordon makes the Node name unschedulable for a change, marked as mine's, unless it already
// is: then it is left alone (WasCordoned), and stays as it is after the change. noun names
// the workflow in messages ("flip").
func Cordon(ctx context.Context, c client.Client, r client.Reader, name, mine, noun string) (Result, error) {
	n, err := nodeOf(ctx, r, name)
	if err != nil || n == nil {
		return Result{Message: fmt.Sprintf("no Node %s in the cluster: nothing to cordon", name), Skipped: true}, err
	}
	by, marked := n.Annotations[AnnotationCordonedBy]
	switch {
	case n.Spec.Unschedulable && marked && by == mine:
		// This part's own write, before a restart.
		return Result{Cordon: nwv1.NodeCordoned, Message: "cordoned " + name}, nil
	case n.Spec.Unschedulable:
		msg := fmt.Sprintf("%s was already cordoned: left alone", name)
		if marked {
			msg += fmt.Sprintf(" (its annotation %s says %s)", AnnotationCordonedBy, by)
		}
		return Result{Cordon: nwv1.NodeWasCordoned, Message: msg, Reason: ReasonLeftCordoned}, nil
	}
	base := n.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[AnnotationCordonedBy] = mine
	n.Spec.Unschedulable = true
	if err := c.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return Result{}, fmt.Errorf("cordoning Node %s: %w", name, err)
	}
	return Result{Cordon: nwv1.NodeCordoned, Message: "cordoned " + name, Reason: ReasonCordoned}, nil
}

// Uncordon makes the Node name schedulable again after its change, only if it carries mine's
// annotation; the annotation goes in the same write. recorded is what the workflow's status
// recorded of its cordon.
func Uncordon(ctx context.Context, c client.Client, r client.Reader, name, mine, noun string, recorded nwv1.NodeCordon) (Result, error) {
	n, err := nodeOf(ctx, r, name)
	if err != nil || n == nil {
		return Result{Message: fmt.Sprintf("no Node %s in the cluster: nothing to uncordon", name), Skipped: true}, err
	}
	if by, marked := n.Annotations[AnnotationCordonedBy]; !marked || by != mine {
		switch {
		case recorded == nwv1.NodeWasCordoned:
			return Result{Cordon: recorded, Message: fmt.Sprintf("%s was cordoned before the %s: left as it was", name, noun), Skipped: true}, nil
		case n.Spec.Unschedulable:
			// Cordoned since, by someone else (this workflow's cordon is always annotated).
			return Result{Cordon: recorded, Message: fmt.Sprintf("%s is cordoned, not by this %s: left alone", name, noun), Skipped: true}, nil
		case recorded == nwv1.NodeCordoned:
			// This part's own write, before a restart (or someone uncordoned it meanwhile).
			return Result{Cordon: nwv1.NodeUncordoned, Message: "uncordoned " + name}, nil
		}
		return Result{Cordon: recorded, Message: fmt.Sprintf("%s is not cordoned by this %s: nothing to uncordon", name, noun), Skipped: true}, nil
	}
	base := n.DeepCopy()
	delete(n.Annotations, AnnotationCordonedBy)
	was := n.Spec.Unschedulable
	n.Spec.Unschedulable = false
	if err := c.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return Result{}, fmt.Errorf("uncordoning Node %s: %w", name, err)
	}
	if !was {
		return Result{Cordon: nwv1.NodeUncordoned, Message: fmt.Sprintf("%s was uncordoned meanwhile, not by the %s: its annotation %s removed", name, noun, AnnotationCordonedBy)}, nil
	}
	return Result{Cordon: nwv1.NodeUncordoned, Message: "uncordoned " + name, Reason: ReasonUncordoned}, nil
}

// nodeOf reads the Node past the cache (the read the update's resourceVersion comes from); nil
// when there is none.
func nodeOf(ctx context.Context, r client.Reader, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	if err := r.Get(ctx, client.ObjectKey{Name: name}, n); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return n, nil
}
