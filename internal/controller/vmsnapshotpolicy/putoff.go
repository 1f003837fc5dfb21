package vmsnapshotpolicy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/nodehealth"
	"github.com/spectrocloud/nodewright/internal/storage"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// claimedVolume is one of a VM's volumes on a claim.
type claimedVolume struct {
	name, claim string
	// resource is its DRBD resource when its claim is bound to a LINSTOR volume: the CSI volume
	// handle, which LINSTOR names after the PersistentVolume. Otherwise notLINSTOR says why not.
	resource   string
	notLINSTOR string
}

// putOffFor says why the VM's run is put off now, and until when; "" when it goes ahead. A
// snapshot freezes the guest and loads the storage: a run is put off while
//
//   - a cluster-wide workflow (node work) holds the claim and changes a node that holds one of
//     the VM's replicas or runs the VM, or which nodes those are is not known (nodeWork);
//   - a volume of the VM on LINSTOR is not replicated in sync, as the agents that report its
//     DRBD resource say (nodehealth.NotInSync). A resource no agent reports (a legacy
//     cluster's DaemonSet reports counts only) is not checked, nor is a volume not on LINSTOR.
//
// It is tried again every putOffRetry, within its starting deadline (or late, with catchUp
// RunOnce).
func (w *run) putOffFor(ctx context.Context, vm *virtv1.VirtualMachine) (string, error) {
	h, err := w.holder(ctx)
	if err != nil {
		return "", err
	}
	vols, err := w.volumes(ctx, vm)
	if err != nil {
		return "", err
	}
	reports, err := w.replicaReports(ctx)
	if err != nil {
		return "", err
	}
	if h != nil {
		if why, err := w.nodeWork(ctx, h, vm, vols, reports); why != "" || err != nil {
			return why, err
		}
	}
	for _, v := range vols {
		if v.resource == "" {
			continue
		}
		if why := nodehealth.NotInSync(reports[v.resource]); why != "" {
			return why + "; the run starts once it is in sync", nil
		}
	}
	return "", nil
}

// nodeWork says why node work puts the VM's run off: the workflow that holds the claim changes
// a node that holds one of the VM's replicas (a disk of its DRBD resource, not a client's) or
// runs it, or which nodes either are is not known; "" when it changes none of them.
func (w *run) nodeWork(ctx context.Context, h *engine.Holding, vm *virtv1.VirtualMachine, vols []claimedVolume, reports map[string][]nodehealth.ResourceReport) (string, error) {
	by := h.Kind + " " + h.Name + " holds the cluster (node work)"
	const untilItEnds = "; the run starts when it ends"
	switch {
	case !h.NodesKnown:
		return by + ", and which nodes it changes is not known" + untilItEnds, nil
	case len(h.Nodes) == 0:
		return "", nil // it changes none (its Preflight)
	}
	holds := map[string]string{}
	for _, v := range vols {
		if v.resource == "" {
			return fmt.Sprintf("%s, and the nodes of volume %s are not known (%s)%s", by, v.name, v.notLINSTOR, untilItEnds), nil
		}
		nodes := nodehealth.DiskNodes(reports[v.resource])
		if len(nodes) == 0 {
			return fmt.Sprintf("%s, and the nodes of volume %s are not known (no agent reports its DRBD resource %s)%s", by, v.name, v.resource, untilItEnds), nil
		}
		for _, n := range nodes {
			if holds[n] == "" {
				holds[n] = "which holds a replica of " + v.resource
			}
		}
	}
	vmi := &virtv1.VirtualMachineInstance{}
	if err := w.r.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err == nil && vmi.Status.NodeName != "" {
		holds[vmi.Status.NodeName] = "where the VM runs"
	} else if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	for _, n := range h.Nodes {
		if what := holds[n]; what != "" {
			return fmt.Sprintf("%s and changes %s, %s; the run starts once it has moved on from %s", by, n, what, n), nil
		}
	}
	return "", nil
}

// holder reads, once per reconcile, the cluster-wide workflow that holds the claim: nil when
// none does, or when it Failed (it keeps the claim until a person deletes it, with no node
// work going on: the VMs' backups matter most then).
func (w *run) holder(ctx context.Context) (*engine.Holding, error) {
	if w.holderRead || w.r.LockNamespace == "" || w.r.APIReader == nil {
		return w.holding, nil
	}
	h, err := engine.HolderOf(ctx, w.r.APIReader, w.r.LockNamespace)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster-wide workflows' claim: %w", err)
	}
	if h != nil && h.Phase != nwv1.WorkflowFailed {
		w.holding = h
	}
	w.holderRead = true
	return w.holding, nil
}

// replicaReports reads, once per reconcile, the agents' reports of the DRBD resources.
func (w *run) replicaReports(ctx context.Context) (map[string][]nodehealth.ResourceReport, error) {
	if w.reports != nil {
		return w.reports, nil
	}
	var agents nwv1.NodewrightAgentStatusList
	if err := w.r.Client.List(ctx, &agents); err != nil {
		return nil, fmt.Errorf("reading the agents' DRBD reports: %w", err)
	}
	w.reports = nodehealth.ResourceReports(agents.Items)
	return w.reports, nil
}

// volumes are the VM's volumes on claims, each with its DRBD resource when it is on LINSTOR.
func (w *run) volumes(ctx context.Context, vm *virtv1.VirtualMachine) ([]claimedVolume, error) {
	if vm.Spec.Template == nil {
		return nil, nil
	}
	var out []claimedVolume
	for _, v := range vm.Spec.Template.Spec.Volumes {
		cv := claimedVolume{name: v.Name, claim: migration.ClaimOf(v.VolumeSource)}
		if cv.claim == "" {
			continue
		}
		var err error
		if cv.resource, cv.notLINSTOR, err = w.resourceOf(ctx, vm.Namespace, cv.claim); err != nil {
			return nil, err
		}
		out = append(out, cv)
	}
	return out, nil
}

// resourceOf is the DRBD resource of the claim's volume; "" when it is not on LINSTOR, and
// notLINSTOR says why not.
func (w *run) resourceOf(ctx context.Context, namespace, claim string) (resource, notLINSTOR string, err error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := w.r.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: claim}, pvc); apierrors.IsNotFound(err) {
		return "", fmt.Sprintf("its claim %s is not there", claim), nil
	} else if err != nil {
		return "", "", err
	}
	if pvc.Spec.VolumeName == "" {
		return "", fmt.Sprintf("its claim %s is not bound", claim), nil
	}
	pv := &corev1.PersistentVolume{}
	if err := w.r.Client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); apierrors.IsNotFound(err) {
		return "", fmt.Sprintf("its claim %s is bound to %s, which is not there", claim, pvc.Spec.VolumeName), nil
	} else if err != nil {
		return "", "", err
	}
	switch {
	case pv.Spec.CSI == nil:
		return "", fmt.Sprintf("its claim %s is bound to %s, not a CSI volume", claim, pv.Name), nil
	case storage.ForProvisioner(pv.Spec.CSI.Driver).Kind() != nwv1.StorageLINSTOR:
		return "", fmt.Sprintf("its claim %s is bound to %s of %s, not LINSTOR", claim, pv.Name, pv.Spec.CSI.Driver), nil
	}
	return pv.Spec.CSI.VolumeHandle, "", nil
}
