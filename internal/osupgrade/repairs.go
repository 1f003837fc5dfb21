package osupgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osimage"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// LabelRepairOf is on a repair policy (spec.repairs) made for a node, by the BootRecoveryPolicy
// or by kubectl nodewright boot: the node's name.
const LabelRepairOf = "nodewright.spectrocloud.com/repairs-node"

// RepairName is the name of node's repair policy of bootID: the node's, what it does
// ("repair", "rollback", "reset", "select"), and the boot's first characters.
func RepairName(node, what, bootID string) string {
	short := strings.ReplaceAll(bootID, "-", "")
	if len(short) > 8 {
		short = short[:8]
	}
	return children.Name(node, what+"-"+strings.ToLower(short))
}

// NewRepair is the repair policy rp of node rp.Node, named what (see RepairName), staging or
// booting image, waiting for a person's approval.
func NewRepair(what, image string, rp nwv1.OSNodeRepair) *nwv1.OSVersionPolicy {
	return &nwv1.OSVersionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: RepairName(rp.Node, what, rp.BootID), Labels: map[string]string{LabelRepairOf: children.LabelValue(rp.Node)}},
		Spec:       nwv1.OSVersionPolicySpec{Image: image, Approval: nwv1.ApprovalManual, Repairs: &rp},
	}
}

// CreateRepair creates the repair policy p, or finds the one made before (by a restart whose
// status write was lost, or a command run twice). It returns the policy that is p's repair,
// and created when this call made it; ErrNotTheRepair when a policy of p's name is there that
// is not the repair of the same node, boot and kind.
func CreateRepair(ctx context.Context, c client.Client, p *nwv1.OSVersionPolicy) (got *nwv1.OSVersionPolicy, created bool, err error) {
	err = c.Create(ctx, p)
	switch {
	case err == nil:
		return p, true, nil
	case !apierrors.IsAlreadyExists(err):
		return nil, false, err
	}
	got = &nwv1.OSVersionPolicy{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		return nil, false, err
	}
	want, have := p.Spec.Repairs, got.Spec.Repairs
	if have == nil || have.Node != want.Node || have.BootID != want.BootID || kindOf(have) != kindOf(want) || have.Entry != want.Entry {
		return nil, false, fmt.Errorf("OSVersionPolicy %s: %w", p.Name, ErrNotTheRepair)
	}
	return got, false, nil
}

// ErrNotTheRepair says that a policy of a repair's name is there that is not that repair.
var ErrNotTheRepair = errors.New("a policy of that name is there, and it is not this repair")

func kindOf(rp *nwv1.OSNodeRepair) nwv1.OSRepairKind {
	if rp.Kind == "" {
		return nwv1.OSRepairRestage
	}
	return rp.Kind
}

// PinnedImage is image (REPOSITORY:TAG, what a node booted) pinned by digest, as the EdgeProfile
// in force lists it in spec.osImages, or else as the newest OSVersionPolicy that names it (the
// one that put it on the nodes), not a repair; "" and why when neither does, or the profile does
// not allow it.
func PinnedImage(ctx context.Context, c client.Reader, image string) (string, string, error) {
	if image == "" {
		return "", "its kairos-release names no image", nil
	}
	profile, err := engine.ProfileInForce(ctx, c)
	if err != nil {
		return "", "", fmt.Errorf("reading the EdgeProfile in force: %w", err)
	}
	if profile != nil {
		for _, allowed := range profile.Spec.OSImages {
			if strings.Contains(allowed, "@sha256:") && Repository(allowed) == image {
				return allowed, "", nil
			}
		}
	}
	var list nwv1.OSVersionPolicyList
	if err := c.List(ctx, &list); err != nil {
		return "", "", err
	}
	slices.SortFunc(list.Items, func(a, b nwv1.OSVersionPolicy) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
	for _, op := range list.Items {
		if Repository(op.Spec.Image) != image || op.Spec.Repairs != nil {
			continue
		}
		if profile != nil && osimage.Allowed(profile, op.Spec.Image) != "" {
			continue
		}
		return op.Spec.Image, "", nil
	}
	return "", fmt.Sprintf("no image pinned by digest is known for %s (the EdgeProfile in force's spec.osImages does not pin it, and no OSVersionPolicy the profile allows names it)", image), nil
}
