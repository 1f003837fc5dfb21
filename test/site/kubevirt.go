package site

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// KubeVirt's virt-controller (VM to VMI) and virt-handler (VMI to Running), with no
// virt-launcher pod and no guest.

// annVMGeneration is virt-controller's record, on a VMI, of the VM generation it started from.
const annVMGeneration = "kubevirt.io/vm-generation"

func (s *Site) setupKubeVirt() error {
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool { return s.inScope(o.GetNamespace()) })
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-kubevirt").
		For(&virtv1.VirtualMachine{}, builder.WithPredicates(inScope)).
		// The VMI has the VM's name: a VMI event wakes its VM, even one that is gone.
		Watches(&virtv1.VirtualMachineInstance{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(inScope)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(s.vmsOfClaim), builder.WithPredicates(inScope)).
		// A VMI no node could take waits for one to fit.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(s.startingVMIs)).
		Complete(reconcile.Func(s.reconcileVM))
}

// startingVMIs maps a Node's event to the VMIs that wait to be placed.
func (s *Site) startingVMIs(ctx context.Context, _ client.Object) []reconcile.Request {
	vmis := &virtv1.VirtualMachineInstanceList{}
	if err := s.client.List(ctx, vmis); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range vmis.Items {
		if vmi := &vmis.Items[i]; s.inScope(vmi.Namespace) && starting(vmi) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vmi)})
		}
	}
	return out
}

func (s *Site) vmsOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	vms := &virtv1.VirtualMachineList{}
	if err := s.client.List(ctx, vms, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var names []string
	for i := range vms.Items {
		if tmpl := vms.Items[i].Spec.Template; tmpl != nil && slices.Contains(vmiClaims(&tmpl.Spec), o.GetName()) {
			names = append(names, vms.Items[i].Name)
		}
	}
	// A VMI created on its own waits for its claims too; it has the key of a VM that is not there.
	vmis := &virtv1.VirtualMachineInstanceList{}
	if err := s.client.List(ctx, vmis, client.InNamespace(o.GetNamespace())); err != nil {
		return requests(o.GetNamespace(), names)
	}
	for i := range vmis.Items {
		if !controlledByVM(&vmis.Items[i]) && slices.Contains(vmiClaims(&vmis.Items[i].Spec), o.GetName()) {
			names = append(names, vmis.Items[i].Name)
		}
	}
	return requests(o.GetNamespace(), names)
}

func (s *Site) reconcileVM(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vmi, err := s.getVMI(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	vm := &virtv1.VirtualMachine{}
	if err := s.client.Get(ctx, req.NamespacedName, vm); err != nil {
		switch {
		case !apierrors.IsNotFound(err):
			return ctrl.Result{}, err
		case vmi != nil && controlledByVM(vmi):
			return ctrl.Result{}, s.deleteVMI(ctx, vmi) // the garbage collector's part
		case vmi != nil:
			return ctrl.Result{}, s.runStandalone(ctx, vmi)
		}
		return ctrl.Result{}, nil
	}
	if vmi != nil && controlledByVM(vmi) && !metav1.IsControlledBy(vmi, vm) {
		// Left by an earlier VM of the same name.
		if err := s.deleteVMI(ctx, vmi); err != nil {
			return ctrl.Result{}, err
		}
		vmi = nil
	}
	strategy, err := vm.RunStrategy()
	if err != nil {
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	var claims vmClaims
	if vm.Spec.Template != nil {
		if claims, err = s.observeClaims(ctx, vm.Namespace, &vm.Spec.Template.Spec); err != nil {
			return ctrl.Result{}, err
		}
	}
	switch {
	case vmi != nil && (strategy == virtv1.RunStrategyHalted ||
		strategy == virtv1.RunStrategyRerunOnFailure && vmi.Status.Phase == virtv1.Succeeded):
		if err := s.deleteVMI(ctx, vmi); err != nil {
			return ctrl.Result{}, err
		}
		vmi = nil
	case vmi == nil && shouldStart(vm, strategy) && len(claims.missing) == 0:
		if vmi, err = s.createVMI(ctx, vm); err != nil {
			return ctrl.Result{}, err
		}
	}
	if vmi != nil && starting(vmi) {
		if err := s.startVMI(ctx, vm, vmi, claims); err != nil {
			return ctrl.Result{}, err
		}
	} else if vmi != nil {
		if err := s.reportMigratable(ctx, vmi); err != nil {
			return ctrl.Result{}, err
		}
	}
	status := vmStatus(vm, vmi, strategy, claims, metav1.Now())
	if equality.Semantic.DeepEqual(status, vm.Status) {
		return ctrl.Result{}, nil
	}
	before := vm.DeepCopy()
	vm.Status = status
	if err := ignoreGone(s.client.Status().Patch(ctx, vm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the status of VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return ctrl.Result{}, nil
}

// shouldStart says whether virt-controller starts a VMI for a VM that has none. Always and
// Once do; Manual never does (virtctl's start and stop requests are not played); Halted stops
// the VM. A RerunOnFailure VM starts when it comes to that strategy from another one (or is
// new); one whose status already records RerunOnFailure was started under it and has stopped
// since (its VMI succeeded, or was deleted): it stays stopped, as in KubeVirt, until it is
// switched to another strategy and back. (virt-controller reruns a VMI that failed; the site
// leaves one that failed to start in place, see Options.FailStart.)
func shouldStart(vm *virtv1.VirtualMachine, strategy virtv1.VirtualMachineRunStrategy) bool {
	switch strategy {
	case virtv1.RunStrategyAlways, virtv1.RunStrategyOnce:
		return true
	case virtv1.RunStrategyRerunOnFailure:
		return vm.Status.RunStrategy != virtv1.RunStrategyRerunOnFailure
	}
	return false
}

func controlledByVM(vmi *virtv1.VirtualMachineInstance) bool {
	owner := metav1.GetControllerOf(vmi)
	return owner != nil && owner.Kind == "VirtualMachine" && owner.APIVersion == virtv1.GroupVersion.String()
}

func (s *Site) getVMI(ctx context.Context, key types.NamespacedName) (*virtv1.VirtualMachineInstance, error) {
	vmi := &virtv1.VirtualMachineInstance{}
	if err := s.client.Get(ctx, key, vmi); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return vmi, nil
}

func (s *Site) deleteVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	if err := ignoreGone(s.client.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID})); err != nil {
		return fmt.Errorf("deleting VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// vmClaims is what the VM's claims look like now.
type vmClaims struct {
	missing []string                                 // claims that do not exist
	unbound []string                                 // claims not bound yet
	bound   map[string]*corev1.PersistentVolumeClaim // bound claims by name
}

func (s *Site) observeClaims(ctx context.Context, ns string, spec *virtv1.VirtualMachineInstanceSpec) (vmClaims, error) {
	claims := vmClaims{bound: map[string]*corev1.PersistentVolumeClaim{}}
	for _, name := range vmiClaims(spec) {
		pvc := &corev1.PersistentVolumeClaim{}
		err := s.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pvc)
		switch {
		case apierrors.IsNotFound(err):
			claims.missing = append(claims.missing, name)
		case err != nil:
			return claims, err
		case pvc.Status.Phase != corev1.ClaimBound:
			claims.unbound = append(claims.unbound, name)
		default:
			claims.bound[name] = pvc
		}
	}
	return claims, nil
}

// createVMI is virt-controller's start: the VMI is the template as it is now.
func (s *Site) createVMI(ctx context.Context, vm *virtv1.VirtualMachine) (*virtv1.VirtualMachineInstance, error) {
	if vm.Spec.Template == nil {
		return nil, reconcile.TerminalError(fmt.Errorf("VirtualMachine %s/%s has no template", vm.Namespace, vm.Name))
	}
	tmpl := vm.Spec.Template.DeepCopy()
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       vm.Namespace,
			Name:            vm.Name,
			Labels:          tmpl.ObjectMeta.Labels,
			Annotations:     tmpl.ObjectMeta.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
		},
		Spec: tmpl.Spec,
	}
	metav1.SetMetaDataAnnotation(&vmi.ObjectMeta, annVMGeneration, strconv.FormatInt(vm.Generation, 10))
	vmi.Status.Phase = virtv1.Pending
	if err := s.client.Create(ctx, vmi); err != nil {
		return nil, fmt.Errorf("creating VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return vmi, nil
}

func starting(vmi *virtv1.VirtualMachineInstance) bool {
	switch vmi.Status.Phase {
	case virtv1.VmPhaseUnset, virtv1.Pending, virtv1.Scheduling:
		return true
	}
	return false
}

// runStandalone starts a VMI created without a VM, as virt-handler does for any VMI.
func (s *Site) runStandalone(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	if !starting(vmi) {
		return s.reportMigratable(ctx, vmi)
	}
	claims, err := s.observeClaims(ctx, vmi.Namespace, &vmi.Spec)
	if err != nil {
		return err
	}
	return s.startVMI(ctx, nil, vmi, claims)
}

// startVMI is the scheduler's, virt-controller's and virt-handler's part: once the VMI's claims
// are bound it is placed on one of the site's nodes (placeOn) and runs there, or fails when
// the FailStart fault says so of its VM. VMIs have no status subresource, so the whole object
// is updated.
func (s *Site) startVMI(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, claims vmClaims) error {
	before := vmi.DeepCopy()
	now := metav1.Now()
	status := &vmi.Status
	node, unschedulable := "", ""
	if len(claims.missing) == 0 && len(claims.unbound) == 0 {
		var err error
		if node, unschedulable, err = s.placeOn(ctx, vmi.Spec.NodeSelector, vmi.Spec.Tolerations, ""); err != nil {
			return err
		}
	}
	switch {
	case len(claims.missing) > 0 || len(claims.unbound) > 0:
		setVMIPhase(status, virtv1.Scheduling, now)
		setVMICondition(status, virtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "PodNotExists",
			"waiting for the claims to be bound", now)
	case node == "":
		// virt-controller copies the unschedulable pod's condition.
		setVMIPhase(status, virtv1.Scheduling, now)
		setVMICondition(status, vmiPodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, unschedulable, now)
		setVMICondition(status, virtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, virtv1.PodConditionMissingReason,
			"virt-launcher pod is missing the Ready condition", now)
	case vm != nil && s.opts.FailStart != nil && s.opts.FailStart(vm):
		setVMIPhase(status, virtv1.Failed, now)
		placeVMI(vmi, node)
		status.Reason = "FailStart"
		setVMICondition(status, virtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "FailStart",
			"the site's FailStart fault stopped the domain from starting", now)
	default:
		setVMIPhase(status, virtv1.Running, now)
		placeVMI(vmi, node)
		status.VolumeStatus = volumeStatus(vmi, claims)
		setVMICondition(status, virtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "", now)
		setMigratable(vmi, now)
		s.reportAgent(vmi, now)
	}
	if node != "" {
		removeVMICondition(status, vmiPodScheduled)
	}
	if equality.Semantic.DeepEqual(before.Status, vmi.Status) && equality.Semantic.DeepEqual(before.Labels, vmi.Labels) {
		return nil
	}
	if err := ignoreGone(s.client.Update(ctx, vmi)); err != nil {
		return fmt.Errorf("updating VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// reportMigratable keeps a running VMI's LiveMigratable condition and migration method, which
// virt-handler computes again on every sync (a VMI started by an earlier site has none).
func (s *Site) reportMigratable(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	if !vmi.IsRunning() {
		return nil
	}
	return ignoreGone(s.updateVMI(ctx, vmi, func(vmi *virtv1.VirtualMachineInstance) {
		now := metav1.Now()
		setMigratable(vmi, now)
		s.reportAgent(vmi, now)
	}))
}

// reportAgent is virt-handler's report of the played guest agent of a running VMI: its
// AgentConnected condition when Options.GuestAgent says one runs in the guest.
func (s *Site) reportAgent(vmi *virtv1.VirtualMachineInstance, now metav1.Time) {
	if s.opts.GuestAgent != nil && s.opts.GuestAgent(vmi) {
		setVMICondition(&vmi.Status, virtv1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue, "", "", now)
		return
	}
	removeVMICondition(&vmi.Status, virtv1.VirtualMachineInstanceAgentConnected)
}

// updateVMI writes a change of the VMI, if it changes anything; VMIs have no status subresource.
func (s *Site) updateVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance, change func(*virtv1.VirtualMachineInstance)) error {
	next := vmi.DeepCopy()
	change(next)
	if equality.Semantic.DeepEqual(vmi, next) {
		return nil
	}
	if err := s.client.Update(ctx, next); err != nil {
		return fmt.Errorf("updating VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// setMigratable sets the LiveMigratable condition and the migration method of a running VMI.
func setMigratable(vmi *virtv1.VirtualMachineInstance, now metav1.Time) {
	status := &vmi.Status
	migratable, block := liveMigratable(vmi)
	setVMICondition(status, virtv1.VirtualMachineInstanceIsMigratable, migratable.status, migratable.reason, migratable.message, now)
	status.MigrationMethod = virtv1.LiveMigration
	if block {
		status.MigrationMethod = virtv1.BlockMigration
	}
}

// vmiPodScheduled is the condition virt-controller copies from the VMI's virt-launcher pod
// while the scheduler cannot place it.
const vmiPodScheduled = virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)

// placeVMI records the VMI's node as virt-controller and virt-handler do: status.nodeName and
// the label kubevirt.io/nodeName.
func placeVMI(vmi *virtv1.VirtualMachineInstance, node string) {
	vmi.Status.NodeName = node
	if vmi.Labels == nil {
		vmi.Labels = map[string]string{}
	}
	vmi.Labels[virtv1.NodeNameLabel] = node
}

// liveMigratable is virt-handler's LiveMigratable condition for what the site can know of a
// VMI, its volumes: every claim must be shared (ReadWriteMany); a non-shared host disk cannot
// move; other volumes (a container disk, cloud-init...) are copied, which makes it a block
// migration. The messages are KubeVirt's.
func liveMigratable(vmi *virtv1.VirtualMachineInstance) (condition, bool) {
	statuses := map[string]virtv1.VolumeStatus{}
	for _, st := range vmi.Status.VolumeStatus {
		statuses[st.Name] = st
	}
	block := false
	for _, v := range vmi.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil || v.DataVolume != nil:
			claim := ""
			if v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			} else {
				claim = v.DataVolume.Name
			}
			st, ok := statuses[v.Name]
			switch {
			case !ok || st.PersistentVolumeClaimInfo == nil:
				return notMigratable(fmt.Sprintf("cannot migrate VMI: Unable to determine if PVC %s is shared, "+
					"live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", claim)), true
			case !slices.Contains(st.PersistentVolumeClaimInfo.AccessModes, corev1.ReadWriteMany):
				return notMigratable(fmt.Sprintf("cannot migrate VMI: PVC %s is not shared, "+
					"live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", claim)), true
			}
		case v.HostDisk != nil:
			if v.HostDisk.Shared == nil || !*v.HostDisk.Shared {
				return notMigratable("cannot migrate VMI with non-shared HostDisk"), true
			}
		default:
			block = true
		}
	}
	return condition{status: corev1.ConditionTrue}, block
}

func notMigratable(message string) condition {
	return condition{status: corev1.ConditionFalse, reason: virtv1.VirtualMachineInstanceReasonDisksNotMigratable, message: message}
}

func setVMIPhase(status *virtv1.VirtualMachineInstanceStatus, phase virtv1.VirtualMachineInstancePhase, now metav1.Time) {
	if status.Phase == phase {
		return
	}
	status.Phase = phase
	status.PhaseTransitionTimestamps = append(status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: now})
}

func removeVMICondition(status *virtv1.VirtualMachineInstanceStatus, t virtv1.VirtualMachineInstanceConditionType) {
	status.Conditions = slices.DeleteFunc(status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool { return c.Type == t })
}

func setVMICondition(status *virtv1.VirtualMachineInstanceStatus, t virtv1.VirtualMachineInstanceConditionType,
	value corev1.ConditionStatus, reason, message string, now metav1.Time) {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != value {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = value, reason, message
		return
	}
	status.Conditions = append(status.Conditions, virtv1.VirtualMachineInstanceCondition{
		Type: t, Status: value, Reason: reason, Message: message, LastTransitionTime: now})
}

// volumeStatus describes the VMI's claims as virt-handler does once the domain runs.
func volumeStatus(vmi *virtv1.VirtualMachineInstance, claims vmClaims) []virtv1.VolumeStatus {
	var out []virtv1.VolumeStatus
	for i, v := range vmi.Spec.Volumes {
		st := virtv1.VolumeStatus{Name: v.Name, Target: "vd" + string(rune('a'+i%26)), Phase: virtv1.VolumeReady}
		name := ""
		switch {
		case v.PersistentVolumeClaim != nil:
			name = v.PersistentVolumeClaim.ClaimName
		case v.DataVolume != nil:
			name = v.DataVolume.Name
		}
		if pvc := claims.bound[name]; pvc != nil {
			st.PersistentVolumeClaimInfo = &virtv1.PersistentVolumeClaimInfo{
				ClaimName:   pvc.Name,
				AccessModes: pvc.Status.AccessModes,
				VolumeMode:  pvc.Spec.VolumeMode,
				Capacity:    pvc.Status.Capacity,
				Requests:    pvc.Spec.Resources.Requests,
			}
			st.Size = pvc.Status.Capacity.Storage().Value()
		}
		out = append(out, st)
	}
	return out
}
