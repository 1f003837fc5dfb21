package bondflip

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// Allowed says why the profile does not let the bond run mode, empty when it does.
func Allowed(p *nwv1.EdgeProfile, mode nwv1.BondMode) string {
	if p == nil {
		return "no EdgeProfile is in force: the modes the site's switch carries are unknown"
	}
	n := p.Spec.Network
	if n.BondMode == mode || slices.Contains(n.AllowedBondModes, mode) {
		return ""
	}
	carried := append([]nwv1.BondMode{n.BondMode}, n.AllowedBondModes...)
	names := make([]string, len(carried))
	for i, m := range carried {
		names[i] = string(m)
	}
	return fmt.Sprintf("spec.targetMode: EdgeProfile %s (version %s) says the switch carries %s, not %s; list it in network.allowedBondModes once the switch ports accept it",
		p.Name, p.Spec.Version, strings.Join(names, ", "), mode)
}

// admit refuses, at admission, a flip to a mode the EdgeProfile in force says the switch does
// not carry: it could only be rolled back (the Preflight would fail, and every agent refuses
// the change). Without a profile in force it admits the flip: the Preflight says what is
// missing, and the profile may be applied before the flip starts. A change of the spec is
// checked when it changes the target mode.
func admit(ctx context.Context, c client.Reader, old, f *nwv1.BondModeFlipPlan) error {
	if old != nil && old.Spec.TargetMode == f.Spec.TargetMode {
		return nil
	}
	p, err := engine.ProfileInForce(ctx, c)
	if err != nil {
		return fmt.Errorf("reading the EdgeProfile in force: %w", err)
	}
	if p == nil {
		return nil
	}
	if msg := Allowed(p, f.Spec.TargetMode); msg != "" {
		return fmt.Errorf("%s", msg)
	}
	return nil
}
