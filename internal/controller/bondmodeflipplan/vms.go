package bondmodeflipplan

import (
	"context"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/vmprotect"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// AnnotationStopped is on a VM a flip stopped (vmProtection Stop): the flip's UID, the node's
// position and the VM's run strategy before, "<uid>/<position>/<strategy>"; the VM's restore
// sets the strategy back and ends it "/restored" until its VMI runs again.
const AnnotationStopped = "nodewright.spectrocloud.com/stopped-by-flip"

// vmStepTimeout bounds moving or stopping a node's VMs, and bringing them back.
const vmStepTimeout = vmprotect.StepTimeout

// vms is the flip's VM protection (internal/vmprotect).
func (r *Reconciler) vms(s *scope) *vmprotect.Workflow {
	return &vmprotect.Workflow{Client: r.Client, Reader: r.APIReader, Mode: s.f.Spec.VMProtection,
		Owner: bondflip.Descriptor.Owner(s.f), Kind: bondflip.Kind.Name, Stopped: AnnotationStopped, Poll: poll,
		None: "vmProtection None: the VMs on %s stay and may lose their storage network for a moment"}
}

// vmNode is node k's VM step in the part under way.
func vmNode(s *scope, k int) vmprotect.Node {
	return vmprotect.Node{Name: s.node(k), Position: k, Describe: s.describe(k),
		Labels:   map[string]string{bondflip.LabelStep: s.label(k)},
		Rollback: s.part == bondflip.RollbackProtectVMs || s.part == bondflip.RollbackVMs,
		Cordoned: k <= len(s.f.Status.Nodes) && s.f.Status.Nodes[k-1].Cordon == nwv1.NodeWasCordoned,
		Deadline: s.Deadline}
}

// checkVMs says why the VMs on the flip's nodes cannot be protected as spec.vmProtection says,
// empty when they can.
func (r *Reconciler) checkVMs(ctx context.Context, s *scope) (string, error) {
	return r.vms(s).Check(ctx, s.order, len(s.order))
}

// protectVMs takes the VMs off node k before its bond is changed; with vmProtection None they
// stay, and may lose their storage network for a moment.
func (r *Reconciler) protectVMs(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	return r.vms(s).Protect(ctx, vmNode(s, k))
}

// restoreVMs brings back the VMs the flip protected on node k.
func (r *Reconciler) restoreVMs(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	return r.vms(s).Restore(ctx, vmNode(s, k))
}
