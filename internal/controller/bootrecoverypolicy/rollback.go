package bootrecoverypolicy

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/text"
)

// The reasons of the rollback's Events.
const (
	ReasonRollbackCreated    = "RollbackCreated"
	ReasonRollbackImpossible = "RollbackNotCreated"
	ReasonRolledBack         = "RolledBack"
	ReasonRollbackEnded      = "RollbackEnded"
)

// ActionRolledBack is the audit action of a rollback that succeeded.
const ActionRolledBack = "NodeRolledBack"

// rollback creates and follows the rollback of node n's boot whose post-boot health timed out
// (spec.onPostBootHealthTimeout RollbackWithApproval): an OSVersionPolicy with spec.repairs kind
// Rollback that stages the image of the node's last healthy boot (pinned by digest) on its
// active slot again, once a person approves it, proven by the next boot. Only a node that
// booted its active slot with an image other than its last healthy boot's is rolled back: a
// boot whose health timed out on the image that was healthy before is not the image's doing,
// and a node on its passive or recovery slot is the fallback's and the recovery boot's. A
// rollback already made is followed to its end whatever the spec says now; one is made per
// boot.
func (r *Reconciler) rollback(ctx context.Context, p *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord, now metav1.Time) ([]audit.Record, error) {
	if rollbackUnderWay(*n) {
		return r.followRollback(ctx, p, n, now)
	}
	h := n.PostBootHealth
	if p.Spec.OnPostBootHealthTimeout != nwv1.PostBootHealthRollbackWithApproval || h == nil || h.TimedOutAt == nil || h.BootID != n.BootID ||
		(n.Rollback != nil && n.Rollback.BootID == n.BootID && n.Rollback.Policy != "") {
		return nil, nil
	}
	// A rollback not made is tried again at each reconcile (the digest may be known since); its
	// Event is sent when the reason changes.
	impossible := func(why string) ([]audit.Record, error) {
		msg := text.Shorten(fmt.Sprintf("no rollback of %s's boot %s, whose post-boot health timed out: %s", n.Name, n.BootID, why), 1024)
		if n.Rollback == nil || n.Rollback.BootID != n.BootID || n.Rollback.Message != msg {
			r.event(p, corev1.EventTypeWarning, ReasonRollbackImpossible, msg)
		}
		n.Rollback = &nwv1.BootRepairStatus{BootID: n.BootID, Message: msg}
		return nil, nil
	}
	switch last := n.LastHealthy; {
	case n.BootEntry != nwv1.KairosBootActive || n.UpgradeFailure:
		return impossible(fmt.Sprintf("it runs from its %s slot (upgrade_failure %t): a rollback replaces the image of the active slot, which the node must have booted", orEntry(n.BootEntry), n.UpgradeFailure))
	case last == nil || last.Image == "":
		return impossible("no earlier boot of it passed its post-boot health while the policy watched it: no image is known to be healthy on it")
	case last.Image == n.Image:
		return impossible(fmt.Sprintf("it runs %s, the image of its last healthy boot %s: its image is not what changed", orUnnamed(n.Image), last.BootID))
	}
	target := n.LastHealthy.Image
	image, why, err := osupgrade.PinnedImage(ctx, r.Client, target)
	if err != nil {
		return nil, err
	}
	if image == "" {
		return impossible(fmt.Sprintf("%s; a person creates it: an OSVersionPolicy with spec.repairs {node: %s, bootID: %s, kind: Rollback}, spec.approval Manual and spec.image %s@sha256:<its digest>",
			why, n.Name, n.BootID, target))
	}
	op, created, err := osupgrade.CreateRepair(ctx, r.Client, osupgrade.NewRepair("rollback", image,
		nwv1.OSNodeRepair{Node: n.Name, BootID: n.BootID, Kind: nwv1.OSRepairRollback}))
	switch {
	case errors.Is(err, osupgrade.ErrNotTheRepair):
		return impossible(err.Error())
	case err != nil:
		return nil, fmt.Errorf("creating the rollback of %s's boot %s: %w", n.Name, n.BootID, err)
	case created:
		r.event(p, corev1.EventTypeNormal, ReasonRollbackCreated, fmt.Sprintf(
			"created OSVersionPolicy %s: it stages %s, the image of %s's last healthy boot %s, again on its active slot once a person approves its step Node1 (kubectl nodewright approve)",
			op.Name, image, n.Name, n.LastHealthy.BootID))
	}
	image = op.Spec.Image
	n.Rollback = &nwv1.BootRepairStatus{BootID: n.BootID, Policy: op.Name, Image: image, Phase: string(nwv1.WorkflowPending)}
	return nil, nil
}

// followRollback reads n's rollback policy until it ends: its success is an audit record.
func (r *Reconciler) followRollback(ctx context.Context, p *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord, now metav1.Time) ([]audit.Record, error) {
	rb := n.Rollback
	op := &nwv1.OSVersionPolicy{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: rb.Policy}, op); apierrors.IsNotFound(err) {
		rb.Phase, rb.Message = "Deleted", "the rollback policy was deleted before it ended"
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	rb.Phase = string(op.Status.Phase)
	switch op.Status.Phase {
	case nwv1.WorkflowSucceeded:
		by := text.Shorten(op.Annotations[nwv1.AnnotationApprovedBy], 512)
		msg := fmt.Sprintf("%s is rolled back after the post-boot health of boot %s timed out: OSVersionPolicy %s, approved by %s, staged %s again and the node booted it (boot %s)",
			n.Name, rb.BootID, rb.Policy, orUnknown(by), rb.Image, n.BootID)
		rb.Message = text.Shorten(msg, 1024)
		r.event(p, corev1.EventTypeNormal, ReasonRolledBack, msg)
		return []audit.Record{r.record(p, ActionRolledBack, "PostBootHealthTimedOut", "RolledBack", ReasonRolledBack, msg, n.Name+"/"+rb.BootID, now, n.Name,
			audit.Detail{Name: "policy", Value: rb.Policy}, audit.Detail{Name: "approvedBy", Value: by}, audit.Detail{Name: "image", Value: rb.Image})}, nil
	case nwv1.WorkflowFailed, nwv1.WorkflowRolledBack:
		msg := fmt.Sprintf("the rollback of %s's boot %s, OSVersionPolicy %s, ended %s: %s", n.Name, rb.BootID, rb.Policy, op.Status.Phase, "kubectl describe osversionpolicy "+rb.Policy+" says why")
		rb.Message = text.Shorten(msg, 1024)
		r.event(p, corev1.EventTypeWarning, ReasonRollbackEnded, msg)
	}
	return nil, nil
}

// repairEnded reports whether a repair policy's phase, as the status records it, is final.
func repairEnded(phase string) bool {
	switch nwv1.WorkflowPhase(phase) {
	case nwv1.WorkflowSucceeded, nwv1.WorkflowFailed, nwv1.WorkflowRolledBack:
		return true
	}
	return phase == "Deleted"
}

// setLastHealthy records n's current boot, whose health went green at at, as its last healthy
// one: only a boot of its active slot without upgrade_failure, the image a rollback may go back
// to (not a fallback's passive image, nor the recovery system).
func setLastHealthy(n *nwv1.NodeBootRecord, at metav1.Time) {
	if n.BootEntry == nwv1.KairosBootActive && !n.UpgradeFailure {
		n.LastHealthy = &nwv1.HealthyBoot{BootID: n.BootID, Image: n.Image, At: at}
	}
}

// rollbackUnderWay reports whether n's rollback was made and has not ended.
func rollbackUnderWay(n nwv1.NodeBootRecord) bool {
	return n.Rollback != nil && n.Rollback.Policy != "" && !repairEnded(n.Rollback.Phase)
}
