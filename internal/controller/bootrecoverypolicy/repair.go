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

// The repair is an OSVersionPolicy the policy creates (RBAC cannot narrow create to those with
// spec.repairs). It widens nothing on a host: an OSVersionPolicy's steps are NodeOperations the
// operator could create itself, which each agent checks against the signed EdgeProfile, and a
// repair waits for a person's approval (the CRD requires approval Manual with spec.repairs).
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=osversionpolicies,verbs=get;list;watch;create

// The reasons of the repair's Events.
const (
	ReasonRepairCreated    = "RepairCreated"
	ReasonRepairImpossible = "RepairNotCreated"
	ReasonRepaired         = "Repaired"
)

// ActionRepaired is the audit action of a fallback acknowledged by its repair's success.
const ActionRepaired = "NodeFallbackRepaired"

// LabelRepairOf names, on a repair policy, the node it repairs.
const LabelRepairOf = osupgrade.LabelRepairOf

// repair creates and follows the repair of node n's fallback (spec.onFallback.repair
// RestageWithApproval): an OSVersionPolicy with spec.repairs that stages the image the node
// booted (the last good one, pinned by digest) again on that node, once a person approves it.
// Its success acknowledges the fallback, by the person who approved it. A repair already made
// is followed whatever the spec says now.
func (r *Reconciler) repair(ctx context.Context, p *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord, now metav1.Time) ([]audit.Record, error) {
	fb := n.LastFallback
	if fb == nil || (n.Repair != nil && n.Repair.BootID != fb.BootID) {
		n.Repair = nil
	}
	if fb == nil {
		return nil, nil
	}
	if n.Repair != nil && n.Repair.Policy != "" {
		return r.follow(ctx, p, n, now)
	}
	if n.Unacknowledged() == nil || p.Spec.OnFallback.Repair != nwv1.FallbackRepairRestageWithApproval {
		return nil, nil
	}
	image, why, err := osupgrade.PinnedImage(ctx, r.Client, n.Image)
	if err != nil {
		return nil, err
	}
	if image == "" {
		msg := fmt.Sprintf("no repair of %s's fallback at boot %s: %s; a person creates it: an OSVersionPolicy with spec.repairs {node: %s, bootID: %s}, spec.approval Manual and spec.image %s@sha256:<its digest>",
			n.Name, fb.BootID, why, n.Name, fb.BootID, orUnnamed(n.Image))
		if n.Repair == nil || n.Repair.Message != text.Shorten(msg, 1024) {
			r.event(p, corev1.EventTypeWarning, ReasonRepairImpossible, msg)
		}
		n.Repair = &nwv1.BootRepairStatus{BootID: fb.BootID, Message: text.Shorten(msg, 1024)}
		return nil, nil
	}
	op, created, err := osupgrade.CreateRepair(ctx, r.Client, osupgrade.NewRepair("repair", image,
		nwv1.OSNodeRepair{Node: n.Name, BootID: fb.BootID, Kind: nwv1.OSRepairRestage}))
	switch {
	case errors.Is(err, osupgrade.ErrNotTheRepair):
		msg := fmt.Sprintf("no repair of %s's fallback at boot %s: %v", n.Name, fb.BootID, err)
		n.Repair = &nwv1.BootRepairStatus{BootID: fb.BootID, Message: text.Shorten(msg, 1024)}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("creating the repair of %s's fallback: %w", n.Name, err)
	case created:
		r.event(p, corev1.EventTypeNormal, ReasonRepairCreated, fmt.Sprintf(
			"created OSVersionPolicy %s: it stages %s again on %s once a person approves its step Node1 (kubectl nodewright approve)", op.Name, image, n.Name))
	}
	image = op.Spec.Image
	n.Repair = &nwv1.BootRepairStatus{BootID: fb.BootID, Policy: op.Name, Image: image, Phase: string(nwv1.WorkflowPending)}
	return nil, nil
}

// follow reads n's repair policy: its success acknowledges the fallback.
func (r *Reconciler) follow(ctx context.Context, p *nwv1.BootRecoveryPolicy, n *nwv1.NodeBootRecord, now metav1.Time) ([]audit.Record, error) {
	rp := n.Repair
	op := &nwv1.OSVersionPolicy{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: rp.Policy}, op); apierrors.IsNotFound(err) {
		if rp.Phase != string(nwv1.WorkflowSucceeded) {
			rp.Phase, rp.Message = "Deleted", "the repair policy was deleted before it succeeded"
		}
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	rp.Phase = string(op.Status.Phase)
	if op.Status.Phase != nwv1.WorkflowSucceeded || n.Unacknowledged() == nil {
		return nil, nil
	}
	by := text.Shorten(op.Annotations[nwv1.AnnotationApprovedBy], 512)
	n.Acknowledged = &nwv1.FallbackAcknowledgement{BootID: rp.BootID, By: by, At: now}
	n.PinnedImage = ""
	msg := fmt.Sprintf("%s's fallback at boot %s is repaired: OSVersionPolicy %s, approved by %s, staged %s again and the node booted it; acknowledged",
		n.Name, rp.BootID, rp.Policy, orUnknown(by), rp.Image)
	rp.Message = text.Shorten(msg, 1024)
	r.event(p, corev1.EventTypeNormal, ReasonRepaired, msg)
	return []audit.Record{r.record(p, ActionRepaired, "Unacknowledged", "Repaired", ReasonRepaired, msg, n.Name+"/"+rp.BootID, now, n.Name,
		audit.Detail{Name: "policy", Value: rp.Policy}, audit.Detail{Name: "approvedBy", Value: by})}, nil
}

func orUnnamed(image string) string {
	if image == "" {
		return "REPOSITORY:TAG"
	}
	return image
}
