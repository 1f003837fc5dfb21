package bondmodeflipplan

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// AnnotationStopped is on a VM a flip stopped (vmProtection Stop): the flip's UID, the node's
// position and the VM's run strategy before, "<uid>/<position>/<strategy>"; the VM's restore
// sets the strategy back and ends it "/restored" until its VMI runs again.
const AnnotationStopped = "nodewright.spectrocloud.com/stopped-by-flip"

// vmStepTimeout bounds moving or stopping a node's VMs, and bringing them back.
const vmStepTimeout = 15 * time.Minute

// The tags of the migrations of each VM step: off the node (forward, rollback), back to it.
const (
	tagOut     = "out"
	tagRbOut   = "rbout"
	tagBack    = "back"
	tagRbBack  = "rbback"
	restored   = "restored"
	hostLabel  = "kubernetes.io/hostname"
	vmKind     = "VirtualMachine"
	vmimKind   = "VirtualMachineInstanceMigration"
	noKubeVirt = "KubeVirt is not installed: no VM to protect"
)

// vmisOn lists the VMIs placed on node that have not ended; ok is false when the cluster does
// not serve KubeVirt.
func (r *Reconciler) vmisOn(ctx context.Context, nodes ...string) ([]virtv1.VirtualMachineInstance, bool, error) {
	var list virtv1.VirtualMachineInstanceList
	if err := r.APIReader.List(ctx, &list); meta.IsNoMatchError(err) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	var out []virtv1.VirtualMachineInstance
	for _, vmi := range list.Items {
		if slices.Contains(nodes, vmi.Status.NodeName) && !vmi.IsFinal() {
			out = append(out, vmi)
		}
	}
	return out, true, nil
}

func key(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }

// checkVMs says why the VMs on the flip's nodes cannot be protected as spec.vmProtection says,
// empty when they can: a VM that is not live-migratable (LiveMigrate), a VMI no VM owns (Stop:
// stopped, it would not start again).
func (r *Reconciler) checkVMs(ctx context.Context, s *scope) (string, error) {
	mode := s.f.Spec.VMProtection
	if mode == nwv1.VMProtectionNone {
		return "", nil
	}
	vmis, _, err := r.vmisOn(ctx, s.order...)
	if err != nil {
		return "", err
	}
	if mode == nwv1.VMProtectionLiveMigrate && len(vmis) > 0 && len(s.order) < 2 {
		return "spec.vmProtection: LiveMigrate needs a second node to move the VMs to", nil
	}
	for i := range vmis {
		vmi := &vmis[i]
		switch mode {
		case nwv1.VMProtectionLiveMigrate:
			if pinned := vmi.Spec.NodeSelector[hostLabel]; pinned != "" && vmi.IsMigratable() {
				return fmt.Sprintf("spec.vmProtection: VM %s on %s cannot leave it: its spec.nodeSelector pins it to %s=%s; use vmProtection Stop or None, or unpin it",
					key(vmi), vmi.Status.NodeName, hostLabel, pinned), nil
			}
			if vmi.IsMigratable() {
				continue
			}
			why := "it reports no LiveMigratable condition"
			for _, c := range vmi.Status.Conditions {
				if c.Type == virtv1.VirtualMachineInstanceIsMigratable {
					why = fmt.Sprintf("LiveMigratable %s, %s: %s", c.Status, c.Reason, c.Message)
				}
			}
			return fmt.Sprintf("spec.vmProtection: VM %s on %s cannot live-migrate (%s); use vmProtection Stop or None, or make it migratable",
				key(vmi), vmi.Status.NodeName, why), nil
		case nwv1.VMProtectionStop:
			if ownerVM(vmi) == "" {
				return fmt.Sprintf("spec.vmProtection: VMI %s on %s belongs to no VirtualMachine: stopped, it would not start again; use vmProtection LiveMigrate or None",
					key(vmi), vmi.Status.NodeName), nil
			}
		}
	}
	return "", nil
}

// ownerVM is the VM that controls vmi, empty when none does.
func ownerVM(vmi *virtv1.VirtualMachineInstance) string {
	if ref := metav1.GetControllerOf(vmi); ref != nil && ref.Kind == vmKind {
		return ref.Name
	}
	return ""
}

// protectVMs takes the VMs off node k before it is changed: LiveMigrate moves each VMI to
// another node, Stop halts its VM (recording its run strategy), None leaves them.
func (r *Reconciler) protectVMs(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	node := s.node(k)
	switch s.f.Spec.VMProtection {
	case nwv1.VMProtectionNone:
		return engine.Skipped("vmProtection None: the VMs on %s stay and may lose their storage network for a moment", node), nil
	case nwv1.VMProtectionStop:
		return r.stopVMs(ctx, s, k)
	}
	tag := tagOut
	if s.part == bondflip.RollbackProtectVMs {
		tag = tagRbOut
	}
	// The migrations first, then the VMIs: KubeVirt places a VMI on its target before it says
	// the migration Succeeded, so a VMI read after a Succeeded migration shows where it went.
	// Read the other way round, a migration that ended in between looked like one that left
	// the VM where it was.
	migrations, err := r.migrations(ctx, s, k, tag)
	if err != nil {
		return engine.Outcome{}, err
	}
	vmis, served, err := r.vmisOn(ctx, node)
	if err != nil || !served {
		return engine.Skipped(noKubeVirt), err
	}
	var waiting []string
	for _, m := range migrations {
		switch m.Status.Phase {
		case virtv1.MigrationFailed:
			return engine.Failed("%s: VM %s/%s did not move off it: %s", s.describe(k), m.Namespace, m.Spec.VMIName, migrationFailure(m)), nil
		case virtv1.MigrationSucceeded:
		default:
			waiting = append(waiting, m.Namespace+"/"+m.Spec.VMIName)
		}
	}
	for i := range vmis {
		vmi := &vmis[i]
		name := migrationName(s.f, k, tag, vmi)
		if m := migrations[name]; m != nil {
			if m.Status.Phase == virtv1.MigrationSucceeded {
				return engine.Failed("%s: VM %s is still on it after its migration %s", s.describe(k), key(vmi), name), nil
			}
			continue
		}
		if vmi.Status.Phase != virtv1.Running {
			waiting = append(waiting, key(vmi)+" ("+string(vmi.Status.Phase)+")")
			continue
		}
		if err := r.migrate(ctx, s, k, tag, vmi, nil); err != nil {
			return engine.Outcome{}, err
		}
		waiting = append(waiting, key(vmi))
	}
	if len(waiting) == 0 {
		if len(migrations) == 0 {
			return engine.Skipped("no VM runs on %s", node), nil
		}
		return engine.Succeeded("%d VMs moved off %s", len(migrations), node), nil
	}
	if passed, _ := s.Deadline(vmStepTimeout); passed {
		return engine.Failed("%s: VMs still on it after %s: %s", s.describe(k), vmStepTimeout, strings.Join(waiting, ", ")), nil
	}
	return engine.Waiting(poll, "moving VMs off %s: %s", node, strings.Join(waiting, ", ")), nil
}

// restoreVMs brings back the VMs the flip protected on node k: those its migrations moved off
// go back to it, those it stopped start again.
func (r *Reconciler) restoreVMs(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	node := s.node(k)
	switch s.f.Spec.VMProtection {
	case nwv1.VMProtectionNone:
		return engine.Skipped("vmProtection None: nothing to restore on %s", node), nil
	case nwv1.VMProtectionStop:
		return r.startVMs(ctx, s, k)
	}
	tag := tagBack
	if s.part == bondflip.RollbackVMs {
		tag = tagRbBack
	}
	moved := map[string]*virtv1.VirtualMachineInstanceMigration{}
	for _, t := range []string{tagOut, tagRbOut} {
		ms, err := r.migrations(ctx, s, k, t)
		if err != nil {
			return engine.Outcome{}, err
		}
		for _, m := range ms {
			if m.Status.Phase == virtv1.MigrationSucceeded {
				moved[m.Namespace+"/"+m.Spec.VMIName] = m
			}
		}
	}
	back, err := r.migrations(ctx, s, k, tag)
	if err != nil {
		return engine.Outcome{}, err
	}
	hostname, err := r.hostname(ctx, node)
	if err != nil {
		return engine.Outcome{}, err
	}
	var waiting, gone []string
	for _, name := range slices.Sorted(maps.Keys(moved)) {
		m := moved[name]
		vmi := &virtv1.VirtualMachineInstance{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.VMIName}, vmi); apierrors.IsNotFound(err) {
			gone = append(gone, name)
			continue
		} else if err != nil {
			return engine.Outcome{}, err
		}
		if vmi.IsFinal() {
			gone = append(gone, name)
			continue
		}
		if vmi.Status.NodeName == node {
			continue
		}
		backName := migrationName(s.f, k, tag, vmi)
		if b := back[backName]; b != nil {
			switch b.Status.Phase {
			case virtv1.MigrationFailed:
				return engine.Failed("%s: VM %s did not come back to it: %s", s.describe(k), key(vmi), migrationFailure(b)), nil
			case virtv1.MigrationSucceeded:
				return engine.Failed("%s: VM %s is on %s after its migration back %s", s.describe(k), key(vmi), vmi.Status.NodeName, backName), nil
			}
		} else if err := r.migrate(ctx, s, k, tag, vmi, map[string]string{hostLabel: hostname}); err != nil {
			return engine.Outcome{}, err
		}
		waiting = append(waiting, key(vmi))
	}
	if len(waiting) > 0 {
		if passed, _ := s.Deadline(vmStepTimeout); passed {
			return engine.Failed("%s: VMs not back on it after %s: %s", s.describe(k), vmStepTimeout, strings.Join(waiting, ", ")), nil
		}
		return engine.Waiting(poll, "moving VMs back to %s: %s", node, strings.Join(waiting, ", ")), nil
	}
	msg := fmt.Sprintf("%d VMs back on %s", len(moved)-len(gone), node)
	if len(gone) > 0 {
		msg += fmt.Sprintf("; %s ended meanwhile", strings.Join(gone, ", "))
	}
	if len(moved) == 0 {
		return engine.Skipped("no VM was moved off %s", node), nil
	}
	return engine.Succeeded("%s", msg), nil
}

// hostname is node's kubernetes.io/hostname label, which a migration's addedNodeSelector
// names; the node's name when it has none.
func (r *Reconciler) hostname(ctx context.Context, node string) (string, error) {
	n := &corev1.Node{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: node}, n); apierrors.IsNotFound(err) {
		return node, nil
	} else if err != nil {
		return "", err
	}
	if h := n.Labels[hostLabel]; h != "" {
		return h, nil
	}
	return node, nil
}

// migrationName is the name of the flip's migration of vmi at node k's step tagged tag.
func migrationName(f *nwv1.BondModeFlipPlan, k int, tag string, vmi *virtv1.VirtualMachineInstance) string {
	return children.Name(f.Name, "n"+strconv.Itoa(k)+"-"+tag+"-"+shortHash(string(vmi.UID)))
}

// migrations are the flip's migrations of node k tagged tag, by name.
func (r *Reconciler) migrations(ctx context.Context, s *scope, k int, tag string) (map[string]*virtv1.VirtualMachineInstanceMigration, error) {
	var list virtv1.VirtualMachineInstanceMigrationList
	err := r.APIReader.List(ctx, &list, client.MatchingLabels{bondflip.LabelUID: string(s.f.UID), labelTag: "n" + strconv.Itoa(k) + "-" + tag})
	if meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]*virtv1.VirtualMachineInstanceMigration{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// labelTag, on a flip's migration, says which node's step made it and why.
const labelTag = "nodewright.spectrocloud.com/vm-step"

// migrate asks KubeVirt to move vmi (off its node, or to the node selector names).
func (r *Reconciler) migrate(ctx context.Context, s *scope, k int, tag string, vmi *virtv1.VirtualMachineInstance, to map[string]string) error {
	labels := map[string]string{bondflip.LabelStep: s.label(k), labelTag: "n" + strconv.Itoa(k) + "-" + tag}
	m := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: migrationName(s.f, k, tag, vmi), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: nwv1.GroupVersion.String(), Kind: bondflip.Kind.Name, Name: s.f.Name, UID: s.f.UID}}},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name, AddedNodeSelector: to},
	}
	return children.Ensure(ctx, r.Client, r.APIReader, bondflip.Descriptor.Owner(s.f), vmimKind, m)
}

// migrationFailure says why m failed, from its conditions.
func migrationFailure(m *virtv1.VirtualMachineInstanceMigration) string {
	var why []string
	for _, c := range m.Status.Conditions {
		if c.Message != "" {
			why = append(why, c.Message)
		} else if c.Reason != "" {
			why = append(why, c.Reason)
		}
	}
	if len(why) == 0 {
		return "its migration " + m.Name + " failed"
	}
	return "its migration " + m.Name + " failed: " + strings.Join(why, "; ")
}

// stopVMs halts the VMs running on node k, recording each one's run strategy on it.
func (r *Reconciler) stopVMs(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	node := s.node(k)
	vmis, served, err := r.vmisOn(ctx, node)
	if err != nil || !served {
		return engine.Skipped(noKubeVirt), err
	}
	if len(vmis) == 0 {
		stopped, err := r.stoppedVMs(ctx, s, k)
		if err != nil || stopped == 0 {
			return engine.Skipped("no VM runs on %s", node), err
		}
		return engine.Succeeded("%d VMs stopped on %s", stopped, node), nil
	}
	var waiting []string
	for i := range vmis {
		vmi := &vmis[i]
		waiting = append(waiting, key(vmi))
		name := ownerVM(vmi)
		if name == "" {
			return engine.Failed("%s: VMI %s belongs to no VirtualMachine: it cannot be stopped and started again", s.describe(k), key(vmi)), nil
		}
		vm := &virtv1.VirtualMachine{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, vm); err != nil {
			return engine.Outcome{}, client.IgnoreNotFound(err)
		}
		if strategy, _ := vm.RunStrategy(); strategy == virtv1.RunStrategyHalted {
			continue
		}
		if err := r.halt(ctx, s, k, vm); err != nil {
			return engine.Outcome{}, err
		}
	}
	if passed, _ := s.Deadline(vmStepTimeout); passed {
		return engine.Failed("%s: VMs still running on it after %s: %s", s.describe(k), vmStepTimeout, strings.Join(waiting, ", ")), nil
	}
	return engine.Waiting(poll, "stopping the VMs on %s: %s", node, strings.Join(waiting, ", ")), nil
}

// stoppedVMs counts the VMs the flip stopped for node k.
func (r *Reconciler) stoppedVMs(ctx context.Context, s *scope, k int) (int, error) {
	var list virtv1.VirtualMachineList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return 0, err
	}
	n := 0
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Annotations[AnnotationStopped], stoppedBy(s, k)) {
			n++
		}
	}
	return n, nil
}

// stoppedBy is the value of AnnotationStopped for node k of the flip.
func stoppedBy(s *scope, k int) string { return string(s.f.UID) + "/" + strconv.Itoa(k) + "/" }

// halt sets vm's run strategy to Halted, recording the one it had.
func (r *Reconciler) halt(ctx context.Context, s *scope, k int, vm *virtv1.VirtualMachine) error {
	strategy, err := vm.RunStrategy()
	if err != nil {
		return err
	}
	base := vm.DeepCopy()
	if vm.Annotations == nil {
		vm.Annotations = map[string]string{}
	}
	if !strings.HasPrefix(vm.Annotations[AnnotationStopped], string(s.f.UID)+"/") {
		vm.Annotations[AnnotationStopped] = stoppedBy(s, k) + string(strategy)
	}
	vm.Spec.Running = nil
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted)
	return r.Client.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// startVMs gives the VMs the flip stopped on node k their run strategy back, and waits until
// their VMIs run again.
func (r *Reconciler) startVMs(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	var list virtv1.VirtualMachineList
	if err := r.APIReader.List(ctx, &list); meta.IsNoMatchError(err) {
		return engine.Skipped(noKubeVirt), nil
	} else if err != nil {
		return engine.Outcome{}, err
	}
	var waiting []string
	count := 0
	for i := range list.Items {
		vm := &list.Items[i]
		value, ok := vm.Annotations[AnnotationStopped]
		rest, ours := strings.CutPrefix(value, stoppedBy(s, k))
		if !ok || !ours {
			continue
		}
		count++
		base := vm.DeepCopy()
		strategy, done := strings.CutSuffix(rest, "/"+restored)
		if !done {
			vm.Spec.Running = nil
			vm.Spec.RunStrategy = ptr.To(virtv1.VirtualMachineRunStrategy(strategy))
			vm.Annotations[AnnotationStopped] = value + "/" + restored
		} else {
			vmi := &virtv1.VirtualMachineInstance{}
			err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(vm), vmi)
			if err != nil && !apierrors.IsNotFound(err) {
				return engine.Outcome{}, err
			}
			runs := err == nil && vmi.Status.Phase == virtv1.Running
			if !runs && shouldRun(virtv1.VirtualMachineRunStrategy(strategy)) {
				waiting = append(waiting, key(vm))
				continue
			}
			delete(vm.Annotations, AnnotationStopped)
		}
		if err := r.Client.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return engine.Outcome{}, err
		}
		waiting = append(waiting, key(vm))
	}
	if count == 0 {
		return engine.Skipped("no VM was stopped on %s", s.node(k)), nil
	}
	if len(waiting) == 0 {
		return engine.Succeeded("%d VMs running again", count), nil
	}
	if passed, _ := s.Deadline(vmStepTimeout); passed {
		return engine.Failed("%s: VMs not running again after %s: %s", s.describe(k), vmStepTimeout, strings.Join(waiting, ", ")), nil
	}
	return engine.Waiting(poll, "starting the VMs stopped on %s: %s", s.node(k), strings.Join(waiting, ", ")), nil
}

// shouldRun reports whether a VM with strategy runs once started: Always and RerunOnFailure
// start it; Manual, Once and Halted leave it as it is.
func shouldRun(strategy virtv1.VirtualMachineRunStrategy) bool {
	return strategy == virtv1.RunStrategyAlways || strategy == virtv1.RunStrategyRerunOnFailure
}
