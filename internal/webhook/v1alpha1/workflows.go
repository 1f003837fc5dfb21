package v1alpha1

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/management"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// Admission reads the Nodes a workflow names, the workflows already there (each kind's
// controller may list its own) and the NodewrightCluster (its management mode).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

// The cluster-wide workflows (bond-mode flips and replication upgrades) change the network
// or the storage of every node, so at most one of them runs at a time, and only on nodes
// that exist. Admission refuses a second one early, with the reason; it cannot be the
// guarantee (two created at once both pass it), which is the workflow engine's claim
// (internal/workflow/engine, the Lease nodewright-workflow) that their controllers hold.
type clusterWorkflows struct {
	client client.Reader
}

// admit is the check of a new workflow of kind k that its descriptor asks for: a readable
// maintenance window, the nodes it names there, and, for a cluster-wide kind, the Managed
// mode and no other cluster-wide workflow unfinished.
func (w *clusterWorkflows) admit(k engine.Summary) func(ctx context.Context, o engine.Object) (admission.Warnings, error) {
	return func(ctx context.Context, o engine.Object) (admission.Warnings, error) {
		if g, ok := o.(engine.GatedObject); ok {
			if _, window := g.GetGates(); window != nil {
				if err := validWindow(window); err != nil {
					return nil, err
				}
			}
		}
		if k.Nodes != nil {
			for _, n := range k.Nodes(o) {
				if err := nodeExists(ctx, w.client, n.Path, n.Name); err != nil {
					return nil, err
				}
			}
		}
		if k.Admit != nil {
			if err := k.Admit(ctx, w.client, nil, o); err != nil {
				return nil, err
			}
		}
		if !k.ClusterWide {
			return nil, nil
		}
		if err := w.managed(ctx, k.Kind.Name); err != nil {
			return nil, err
		}
		return nil, w.noneActive(ctx, k.Kind.Name, o.GetName())
	}
}

// renamed is the check of a changed workflow of kind k: a spec may change until the workflow
// starts (the CRD's rule), and each node it names anew is checked as at its creation, and the
// kind's own check (Admit) is made again. A node named before is not read again: a Node gone
// since must not keep the workflow's own updates (its finalizer's removal) from being
// admitted.
func (w *clusterWorkflows) renamed(k engine.Summary) func(ctx context.Context, old, o engine.Object) (admission.Warnings, error) {
	return func(ctx context.Context, old, o engine.Object) (admission.Warnings, error) {
		if k.Admit != nil {
			if err := k.Admit(ctx, w.client, old, o); err != nil {
				return nil, err
			}
		}
		if k.Nodes == nil {
			return nil, nil
		}
		before := map[engine.NodeField]bool{}
		for _, n := range k.Nodes(old) {
			before[n] = true
		}
		for _, n := range k.Nodes(o) {
			if before[n] {
				continue
			}
			if err := nodeExists(ctx, w.client, n.Path, n.Name); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
}

// managed refuses a workflow that changes nodes while Nodewright does not manage them: in the
// Observe mode the legacy DaemonSet decides about the nodes, and two deciders would fight. The
// engine's gate holds such a workflow again if the cluster is switched back to Observe after
// admission.
func (w *clusterWorkflows) managed(ctx context.Context, kind string) error {
	c := &nwv1.NodewrightCluster{}
	err := w.client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, c)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("spec.management: there is no NodewrightCluster %s, so the legacy DaemonSet decides about the nodes; a %s changes nodes and is admitted only in the Managed mode", nwv1.NodewrightClusterName, kind)
	}
	if err != nil {
		return fmt.Errorf("reading the NodewrightCluster: %w", err)
	}
	if !management.InEffect(c) {
		return fmt.Errorf("%s; a %s changes nodes and is admitted only in the Managed mode", management.WhyNot(c), kind)
	}
	return nil
}

// validWindow refuses a maintenance window the gate could not read (the CRD's schema checks
// the times' shape, not that the time zone exists).
func validWindow(w *nwv1.MaintenanceWindow) error {
	if w == nil {
		return nil
	}
	_, err := workflow.ParseWindow(w, "spec.maintenanceWindow")
	return err
}

// noneActive refuses a second cluster-wide workflow while one has not finished.
func (w *clusterWorkflows) noneActive(ctx context.Context, kind, name string) error {
	for _, k := range engine.Described() {
		if !k.ClusterWide {
			continue
		}
		list := k.NewList()
		if err := w.client.List(ctx, list); err != nil {
			return fmt.Errorf("listing the %ss: %w", k.Kind.Name, err)
		}
		for _, o := range k.List(list) {
			if (kind != k.Kind.Name || o.GetName() != name) && holdsCluster(o.GetWorkflowStatus().Phase, o.GetDeletionTimestamp() != nil) {
				return fmt.Errorf("metadata.name: %s %s has not finished (%s); one cluster-wide workflow at a time", k.Kind.Name, o.GetName(), phaseOrPending(o.GetWorkflowStatus().Phase))
			}
		}
	}
	return nil
}

// holdsCluster: a workflow in this phase may still change the cluster. A Failed one holds the
// cluster until a person has looked at it and deleted it.
func holdsCluster(p nwv1.WorkflowPhase, deleting bool) bool {
	if deleting {
		return p.Active()
	}
	return !p.Finished() || p == nwv1.WorkflowFailed
}

func phaseOrPending(p nwv1.WorkflowPhase) nwv1.WorkflowPhase {
	if p == "" {
		return nwv1.WorkflowPending
	}
	return p
}
