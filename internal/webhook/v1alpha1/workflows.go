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
)

// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-bondmodeflipplan,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=bondmodeflipplans,verbs=create;update,versions=v1alpha1,name=mbondmodeflipplan-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-bondmodeflipplan,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=bondmodeflipplans,verbs=create;update,versions=v1alpha1,name=vbondmodeflipplan-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-delete-nodewright-spectrocloud-com-v1alpha1-bondmodeflipplan,mutating=false,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=bondmodeflipplans,verbs=delete,versions=v1alpha1,name=vdeletebondmodeflipplan-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-replicationupgrade,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=replicationupgrades,verbs=create;update,versions=v1alpha1,name=mreplicationupgrade-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-replicationupgrade,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=replicationupgrades,verbs=create;update,versions=v1alpha1,name=vreplicationupgrade-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-delete-nodewright-spectrocloud-com-v1alpha1-replicationupgrade,mutating=false,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=replicationupgrades,verbs=delete,versions=v1alpha1,name=vdeletereplicationupgrade-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,timeoutSeconds=5

// Admission reads the Nodes a workflow names, the workflows already there and the
// NodewrightCluster (its management mode).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=bondmodeflipplans;replicationupgrades,verbs=get;list;watch

// The cluster-wide workflows (bond-mode flips and replication upgrades) change the network
// or the storage of every node, so at most one of them runs at a time, and only on nodes
// that exist. Admission refuses a second one early, with the reason; it cannot be the
// guarantee (two created at once both pass it), which is the workflow engine's claim
// (internal/workflow/engine, the Lease nodewright-workflow) that their controllers hold.
type clusterWorkflows struct {
	client client.Reader
}

func (w *clusterWorkflows) createFlip(ctx context.Context, f *nwv1.BondModeFlipPlan) (admission.Warnings, error) {
	if err := validWindow(f.Spec.MaintenanceWindow); err != nil {
		return nil, err
	}
	if err := nodesExist(ctx, w.client, "spec.nodeOrder", f.Spec.NodeOrder); err != nil {
		return nil, err
	}
	if err := w.managed(ctx, "BondModeFlipPlan"); err != nil {
		return nil, err
	}
	return nil, w.noneActive(ctx, "BondModeFlipPlan", f.Name)
}

func (w *clusterWorkflows) createUpgrade(ctx context.Context, u *nwv1.ReplicationUpgrade) (admission.Warnings, error) {
	if err := validWindow(u.Spec.MaintenanceWindow); err != nil {
		return nil, err
	}
	if err := nodesExist(ctx, w.client, "spec.peerNodes", u.Spec.PeerNodes); err != nil {
		return nil, err
	}
	if err := w.managed(ctx, "ReplicationUpgrade"); err != nil {
		return nil, err
	}
	return nil, w.noneActive(ctx, "ReplicationUpgrade", u.Name)
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
	var flips nwv1.BondModeFlipPlanList
	if err := w.client.List(ctx, &flips); err != nil {
		return fmt.Errorf("listing the BondModeFlipPlans: %w", err)
	}
	for _, f := range flips.Items {
		if (kind != "BondModeFlipPlan" || f.Name != name) && holdsCluster(f.Status.Phase, f.DeletionTimestamp != nil) {
			return fmt.Errorf("metadata.name: BondModeFlipPlan %s has not finished (%s); one cluster-wide workflow at a time", f.Name, phaseOrPending(f.Status.Phase))
		}
	}
	var ups nwv1.ReplicationUpgradeList
	if err := w.client.List(ctx, &ups); err != nil {
		return fmt.Errorf("listing the ReplicationUpgrades: %w", err)
	}
	for _, u := range ups.Items {
		if (kind != "ReplicationUpgrade" || u.Name != name) && holdsCluster(u.Status.Phase, u.DeletionTimestamp != nil) {
			return fmt.Errorf("metadata.name: ReplicationUpgrade %s has not finished (%s); one cluster-wide workflow at a time", u.Name, phaseOrPending(u.Status.Phase))
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
