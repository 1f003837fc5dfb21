// Package vmprotect takes the VMs off a node before a workflow changes it, and brings them back
// after, as the workflow's spec.vmProtection says: LiveMigrate moves each VMI off the node
// with a VirtualMachineInstanceMigration and later back to it, pinned by the node's hostname;
// Stop halts each VM, recording its run strategy on it in an annotation, and later gives the
// strategy back and waits for the VM to run; None leaves them. The bond-mode flip and the OS
// version policy share it. It reads the VMs, VMIs and migrations from the API server: KubeVirt
// may be absent, and they are few.
package vmprotect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// StepTimeout bounds moving or stopping a node's VMs, and bringing them back.
const StepTimeout = 15 * time.Minute

// LabelTag is on a workflow's migration: which node's step made it and why ("n2-out").
const LabelTag = "nodewright.spectrocloud.com/vm-step"

// The tags of the migrations of each VM step: off the node (forward, rollback), back to it.
const (
	tagOut    = "out"
	tagRbOut  = "rbout"
	tagBack   = "back"
	tagRbBack = "rbback"
	restored  = "restored"
	// HostLabel is the Node label a migration back names.
	HostLabel  = "kubernetes.io/hostname"
	vmKind     = "VirtualMachine"
	vmimKind   = "VirtualMachineInstanceMigration"
	noKubeVirt = "KubeVirt is not installed: no VM to protect"
)

// Workflow is one workflow object as its VM steps see it.
type Workflow struct {
	Client client.Client
	// Reader reads the VMs, VMIs, migrations and Nodes from the API server.
	Reader client.Reader
	Mode   nwv1.VMProtection
	// Owner labels the workflow's migrations; Kind (BondModeFlipPlan) with it makes their
	// owner reference, so that they go with the workflow.
	Owner children.Owner
	Kind  string
	// Stopped is the annotation on a VM the workflow stopped: "<uid>/<position>/<strategy>",
	// ended "/restored" once its strategy is back, until its VMI runs again.
	Stopped string
	// Poll is how often a VM step looks again (no watch of the operator's sees a migration).
	Poll time.Duration
	// None is what Protect says of a node's VMs with vmProtection None, with the node's name
	// for its %s.
	None string
}

// Node is one node's VM step.
type Node struct {
	Name string
	// Position is the node's place in the workflow's order (from 1): the migrations' names and
	// the Stopped annotation carry it.
	Position int
	// Describe names the node in a failure: "edge-2 (node 1)".
	Describe string
	// Labels go on the step's migrations, with the workflow's own (the part that made them).
	Labels map[string]string
	// Rollback: the step undoes a failed change; its migrations have their own names.
	Rollback bool
	// Cordoned: a person had cordoned the node before the workflow; it stays cordoned, so the
	// VMs moved off it are not moved back (no VM may be scheduled there).
	Cordoned bool
	// Deadline says whether the part has run longer than a limit, and how long is left.
	Deadline func(time.Duration) (passed bool, left time.Duration)
}

// served reports whether the cluster serves KubeVirt's VMIs. It asks with the kind the
// Preflight's check already asked for: a first request for a kind the cluster does not serve
// costs a discovery of the API server's groups (about a second), once per kind.
func (w *Workflow) served(ctx context.Context) (bool, error) {
	var list virtv1.VirtualMachineInstanceList
	if err := w.Reader.List(ctx, &list, client.Limit(1)); meta.IsNoMatchError(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}

// vmisOn lists the VMIs placed on nodes that have not ended; ok is false when the cluster does
// not serve KubeVirt.
func (w *Workflow) vmisOn(ctx context.Context, nodes ...string) ([]virtv1.VirtualMachineInstance, bool, error) {
	var list virtv1.VirtualMachineInstanceList
	if err := w.Reader.List(ctx, &list); meta.IsNoMatchError(err) {
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

// Check says why the VMs on nodes cannot be protected as the workflow's spec.vmProtection
// says, empty when they can: a cluster of fewer than two nodes (cluster counts them), a VM
// that is not live-migratable, or pinned to its node (LiveMigrate), a VMI no VM owns (Stop:
// stopped, it would not start again).
func (w *Workflow) Check(ctx context.Context, nodes []string, cluster int) (string, error) {
	if w.Mode == nwv1.VMProtectionNone {
		return "", nil
	}
	vmis, _, err := w.vmisOn(ctx, nodes...)
	if err != nil {
		return "", err
	}
	if w.Mode == nwv1.VMProtectionLiveMigrate && len(vmis) > 0 && cluster < 2 {
		return "spec.vmProtection: LiveMigrate needs a second node to move the VMs to", nil
	}
	for i := range vmis {
		vmi := &vmis[i]
		switch w.Mode {
		case nwv1.VMProtectionLiveMigrate:
			if pinned := vmi.Spec.NodeSelector[HostLabel]; pinned != "" && vmi.IsMigratable() {
				return fmt.Sprintf("spec.vmProtection: VM %s on %s cannot leave it: its spec.nodeSelector pins it to %s=%s; use vmProtection Stop or None, or unpin it",
					key(vmi), vmi.Status.NodeName, HostLabel, pinned), nil
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

// Protect takes the VMs off node n before it is changed: LiveMigrate moves each VMI to
// another node, Stop halts its VM (recording its run strategy), None leaves them. The
// migrations are read first, then the VMIs: KubeVirt places a VMI on its target before it
// says the migration Succeeded, so a VMI read after a Succeeded migration shows where it
// went. Read the other way round, a migration that ended in between looked like one that left
// the VM where it was.
func (w *Workflow) Protect(ctx context.Context, n Node) (engine.Outcome, error) {
	switch w.Mode {
	case nwv1.VMProtectionNone:
		return engine.Skipped(w.None, n.Name), nil
	case nwv1.VMProtectionStop:
		return w.stop(ctx, n)
	}
	if served, err := w.served(ctx); err != nil || !served {
		return engine.Skipped(noKubeVirt), err
	}
	tag := tagOut
	if n.Rollback {
		tag = tagRbOut
	}
	migrations, err := w.migrations(ctx, n, tag)
	if err != nil {
		return engine.Outcome{}, err
	}
	vmis, served, err := w.vmisOn(ctx, n.Name)
	if err != nil || !served {
		return engine.Skipped(noKubeVirt), err
	}
	var waiting []string
	for _, m := range migrations {
		switch m.Status.Phase {
		case virtv1.MigrationFailed:
			return engine.Failed("%s: VM %s/%s did not move off it: %s", n.Describe, m.Namespace, m.Spec.VMIName, migrationFailure(m)), nil
		case virtv1.MigrationSucceeded:
		default:
			waiting = append(waiting, m.Namespace+"/"+m.Spec.VMIName)
		}
	}
	for i := range vmis {
		vmi := &vmis[i]
		name := w.migrationName(n, tag, vmi)
		if m := migrations[name]; m != nil {
			if m.Status.Phase == virtv1.MigrationSucceeded {
				return engine.Failed("%s: VM %s is still on it after its migration %s", n.Describe, key(vmi), name), nil
			}
			continue
		}
		if vmi.Status.Phase != virtv1.Running {
			waiting = append(waiting, key(vmi)+" ("+string(vmi.Status.Phase)+")")
			continue
		}
		if err := w.migrate(ctx, n, tag, vmi, nil); err != nil {
			return engine.Outcome{}, err
		}
		waiting = append(waiting, key(vmi))
	}
	if len(waiting) == 0 {
		if len(migrations) == 0 {
			return engine.Skipped("no VM runs on %s", n.Name), nil
		}
		return engine.Succeeded("%d VMs moved off %s", len(migrations), n.Name), nil
	}
	if passed, _ := n.Deadline(StepTimeout); passed {
		return engine.Failed("%s: VMs still on it after %s: %s", n.Describe, StepTimeout, strings.Join(waiting, ", ")), nil
	}
	return engine.Waiting(w.Poll, "moving VMs off %s: %s", n.Name, strings.Join(waiting, ", ")), nil
}

// moved are the VMIs the workflow's migrations moved off node n (forward and rollback), by
// namespace/name.
func (w *Workflow) moved(ctx context.Context, n Node) (map[string]*virtv1.VirtualMachineInstanceMigration, error) {
	moved := map[string]*virtv1.VirtualMachineInstanceMigration{}
	for _, t := range []string{tagOut, tagRbOut} {
		ms, err := w.migrations(ctx, n, t)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if m.Status.Phase == virtv1.MigrationSucceeded {
				moved[m.Namespace+"/"+m.Spec.VMIName] = m
			}
		}
	}
	return moved, nil
}

// NotRunning names the VMs the workflow moved off node n that should run and do not: the VM
// wants to run (run strategy Always or RerunOnFailure) and its VMI is gone or Failed. A VM a
// person halted or deleted meanwhile, or whose VMI is being started again, is not named.
func (w *Workflow) NotRunning(ctx context.Context, n Node) ([]string, error) {
	if w.Mode != nwv1.VMProtectionLiveMigrate {
		return nil, nil
	}
	moved, err := w.moved(ctx, n)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(moved)) {
		m := moved[name]
		vmi := &virtv1.VirtualMachineInstance{}
		err := w.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.VMIName}, vmi)
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return nil, err
		case err == nil && vmi.Status.Phase != virtv1.Failed:
			continue
		}
		vm := &virtv1.VirtualMachine{}
		if err := w.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.VMIName}, vm); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		if strategy, _ := vm.RunStrategy(); !shouldRun(strategy) {
			continue
		}
		if vmi.Status.Phase == virtv1.Failed {
			out = append(out, fmt.Sprintf("%s (Failed on %s)", name, vmi.Status.NodeName))
		} else {
			out = append(out, name+" (no VMI, its VM wants one)")
		}
	}
	return out, nil
}

// Restore brings back the VMs the workflow protected on node n: those its migrations moved off
// go back to it, those it stopped start again.
func (w *Workflow) Restore(ctx context.Context, n Node) (engine.Outcome, error) {
	switch w.Mode {
	case nwv1.VMProtectionNone:
		return engine.Skipped("vmProtection None: nothing to restore on %s", n.Name), nil
	case nwv1.VMProtectionStop:
		return w.start(ctx, n)
	}
	if served, err := w.served(ctx); err != nil || !served {
		return engine.Skipped(noKubeVirt), err
	}
	tag := tagBack
	if n.Rollback {
		tag = tagRbBack
	}
	moved, err := w.moved(ctx, n)
	if err != nil {
		return engine.Outcome{}, err
	}
	if n.Cordoned && len(moved) > 0 {
		return engine.Skipped("%d VMs stay where they run: %s was cordoned before, by someone else, and stays so", len(moved), n.Name), nil
	}
	back, err := w.migrations(ctx, n, tag)
	if err != nil {
		return engine.Outcome{}, err
	}
	hostname, err := w.hostname(ctx, n.Name)
	if err != nil {
		return engine.Outcome{}, err
	}
	var waiting, gone []string
	for _, name := range slices.Sorted(maps.Keys(moved)) {
		m := moved[name]
		vmi := &virtv1.VirtualMachineInstance{}
		if err := w.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.VMIName}, vmi); apierrors.IsNotFound(err) {
			gone = append(gone, name)
			continue
		} else if err != nil {
			return engine.Outcome{}, err
		}
		if vmi.IsFinal() {
			gone = append(gone, name)
			continue
		}
		if vmi.Status.NodeName == n.Name {
			continue
		}
		backName := w.migrationName(n, tag, vmi)
		if b := back[backName]; b != nil {
			switch b.Status.Phase {
			case virtv1.MigrationFailed:
				return engine.Failed("%s: VM %s did not come back to it: %s", n.Describe, key(vmi), migrationFailure(b)), nil
			case virtv1.MigrationSucceeded:
				return engine.Failed("%s: VM %s is on %s after its migration back %s", n.Describe, key(vmi), vmi.Status.NodeName, backName), nil
			}
		} else if err := w.migrate(ctx, n, tag, vmi, map[string]string{HostLabel: hostname}); err != nil {
			return engine.Outcome{}, err
		}
		waiting = append(waiting, key(vmi))
	}
	if len(waiting) > 0 {
		if passed, _ := n.Deadline(StepTimeout); passed {
			return engine.Failed("%s: VMs not back on it after %s: %s", n.Describe, StepTimeout, strings.Join(waiting, ", ")), nil
		}
		return engine.Waiting(w.Poll, "moving VMs back to %s: %s", n.Name, strings.Join(waiting, ", ")), nil
	}
	msg := fmt.Sprintf("%d VMs back on %s", len(moved)-len(gone), n.Name)
	if len(gone) > 0 {
		msg += fmt.Sprintf("; %s ended meanwhile", strings.Join(gone, ", "))
	}
	if len(moved) == 0 {
		return engine.Skipped("no VM was moved off %s", n.Name), nil
	}
	return engine.Succeeded("%s", msg), nil
}

// hostname is node's kubernetes.io/hostname label, which a migration's addedNodeSelector
// names; the node's name when it has none.
func (w *Workflow) hostname(ctx context.Context, node string) (string, error) {
	n := &corev1.Node{}
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: node}, n); apierrors.IsNotFound(err) {
		return node, nil
	} else if err != nil {
		return "", err
	}
	if h := n.Labels[HostLabel]; h != "" {
		return h, nil
	}
	return node, nil
}

// tag is the value of LabelTag on node n's migrations tagged t.
func tag(n Node, t string) string { return "n" + strconv.Itoa(n.Position) + "-" + t }

// migrationName is the name of the workflow's migration of vmi at node n's step tagged t.
func (w *Workflow) migrationName(n Node, t string, vmi *virtv1.VirtualMachineInstance) string {
	return children.Name(w.Owner.Name, tag(n, t)+"-"+shortHash(string(vmi.UID)))
}

// shortHash names a VMI in a migration's name.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s + "\x00"))
	return hex.EncodeToString(sum[:])[:10]
}

// migrations are the workflow's migrations of node n tagged t, by name.
func (w *Workflow) migrations(ctx context.Context, n Node, t string) (map[string]*virtv1.VirtualMachineInstanceMigration, error) {
	var list virtv1.VirtualMachineInstanceMigrationList
	err := w.Reader.List(ctx, &list, client.MatchingLabels{w.Owner.UIDLabel: string(w.Owner.UID), LabelTag: tag(n, t)})
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

// migrate asks KubeVirt to move vmi (off its node, or to the node selector names).
func (w *Workflow) migrate(ctx context.Context, n Node, t string, vmi *virtv1.VirtualMachineInstance, to map[string]string) error {
	labels := maps.Clone(n.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelTag] = tag(n, t)
	m := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: w.migrationName(n, t, vmi), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: nwv1.GroupVersion.String(), Kind: w.Kind, Name: w.Owner.Name, UID: w.Owner.UID}}},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name, AddedNodeSelector: to},
	}
	return children.Ensure(ctx, w.Client, w.Reader, w.Owner, vmimKind, m)
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

// stop halts the VMs running on node n, recording each one's run strategy on it.
func (w *Workflow) stop(ctx context.Context, n Node) (engine.Outcome, error) {
	vmis, served, err := w.vmisOn(ctx, n.Name)
	if err != nil || !served {
		return engine.Skipped(noKubeVirt), err
	}
	if len(vmis) == 0 {
		stopped, err := w.stopped(ctx, n)
		if err != nil || stopped == 0 {
			return engine.Skipped("no VM runs on %s", n.Name), err
		}
		return engine.Succeeded("%d VMs stopped on %s", stopped, n.Name), nil
	}
	var waiting []string
	for i := range vmis {
		vmi := &vmis[i]
		waiting = append(waiting, key(vmi))
		name := ownerVM(vmi)
		if name == "" {
			return engine.Failed("%s: VMI %s belongs to no VirtualMachine: it cannot be stopped and started again", n.Describe, key(vmi)), nil
		}
		vm := &virtv1.VirtualMachine{}
		if err := w.Reader.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, vm); err != nil {
			return engine.Outcome{}, client.IgnoreNotFound(err)
		}
		if strategy, _ := vm.RunStrategy(); strategy == virtv1.RunStrategyHalted {
			continue
		}
		if err := w.halt(ctx, n, vm); err != nil {
			return engine.Outcome{}, err
		}
	}
	if passed, _ := n.Deadline(StepTimeout); passed {
		return engine.Failed("%s: VMs still running on it after %s: %s", n.Describe, StepTimeout, strings.Join(waiting, ", ")), nil
	}
	return engine.Waiting(w.Poll, "stopping the VMs on %s: %s", n.Name, strings.Join(waiting, ", ")), nil
}

// stopped counts the VMs the workflow stopped for node n.
func (w *Workflow) stopped(ctx context.Context, n Node) (int, error) {
	names, err := w.StoppedOn(ctx, n)
	return len(names), err
}

// StoppedOn names the VMs the workflow stopped for node n that still carry its record.
func (w *Workflow) StoppedOn(ctx context.Context, n Node) ([]string, error) {
	var list virtv1.VirtualMachineList
	if err := w.Reader.List(ctx, &list); meta.IsNoMatchError(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []string
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Annotations[w.Stopped], w.stoppedBy(n)) {
			out = append(out, key(&list.Items[i]))
		}
	}
	return out, nil
}

// stoppedBy is the value of the Stopped annotation for node n, without the strategy.
func (w *Workflow) stoppedBy(n Node) string {
	return string(w.Owner.UID) + "/" + strconv.Itoa(n.Position) + "/"
}

// halt sets vm's run strategy to Halted, recording the one it had.
func (w *Workflow) halt(ctx context.Context, n Node, vm *virtv1.VirtualMachine) error {
	strategy, err := vm.RunStrategy()
	if err != nil {
		return err
	}
	base := vm.DeepCopy()
	if vm.Annotations == nil {
		vm.Annotations = map[string]string{}
	}
	if !strings.HasPrefix(vm.Annotations[w.Stopped], string(w.Owner.UID)+"/") {
		vm.Annotations[w.Stopped] = w.stoppedBy(n) + string(strategy)
	}
	vm.Spec.Running = nil
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted)
	return w.Client.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// start gives the VMs the workflow stopped on node n their run strategy back, marking the
// record "/restored", waits until those that should run run, then removes the records, all
// in the same pass: the part's message counts every VM it started.
func (w *Workflow) start(ctx context.Context, n Node) (engine.Outcome, error) {
	var list virtv1.VirtualMachineList
	if err := w.Reader.List(ctx, &list); meta.IsNoMatchError(err) {
		return engine.Skipped(noKubeVirt), nil
	} else if err != nil {
		return engine.Outcome{}, err
	}
	var waiting []string
	var ours []*virtv1.VirtualMachine
	for i := range list.Items {
		vm := &list.Items[i]
		value, ok := vm.Annotations[w.Stopped]
		rest, mine := strings.CutPrefix(value, w.stoppedBy(n))
		if !ok || !mine {
			continue
		}
		ours = append(ours, vm)
		strategy, done := strings.CutSuffix(rest, "/"+restored)
		if !done {
			base := vm.DeepCopy()
			vm.Spec.Running = nil
			vm.Spec.RunStrategy = ptr.To(virtv1.VirtualMachineRunStrategy(strategy))
			vm.Annotations[w.Stopped] = value + "/" + restored
			if err := w.Client.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
				return engine.Outcome{}, err
			}
			waiting = append(waiting, key(vm))
			continue
		}
		vmi := &virtv1.VirtualMachineInstance{}
		err := w.Reader.Get(ctx, client.ObjectKeyFromObject(vm), vmi)
		if err != nil && !apierrors.IsNotFound(err) {
			return engine.Outcome{}, err
		}
		if runs := err == nil && vmi.Status.Phase == virtv1.Running; !runs && shouldRun(virtv1.VirtualMachineRunStrategy(strategy)) {
			waiting = append(waiting, key(vm))
		}
	}
	if len(ours) == 0 {
		return engine.Skipped("no VM was stopped on %s", n.Name), nil
	}
	if len(waiting) > 0 {
		if passed, _ := n.Deadline(StepTimeout); passed {
			return engine.Failed("%s: VMs not running again after %s: %s", n.Describe, StepTimeout, strings.Join(waiting, ", ")), nil
		}
		return engine.Waiting(w.Poll, "starting the VMs stopped on %s: %s", n.Name, strings.Join(waiting, ", ")), nil
	}
	var idle []string
	for _, vm := range ours {
		if strategy, _ := vm.RunStrategy(); !shouldRun(strategy) {
			idle = append(idle, fmt.Sprintf("%s (%s)", key(vm), strategy))
		}
		base := vm.DeepCopy()
		delete(vm.Annotations, w.Stopped)
		if err := w.Client.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return engine.Outcome{}, err
		}
	}
	if len(idle) > 0 {
		return engine.Succeeded("%d VMs running again; given back a strategy that does not start them: %s", len(ours)-len(idle), strings.Join(idle, ", ")), nil
	}
	return engine.Succeeded("%d VMs running again", len(ours)), nil
}

// shouldRun reports whether a VM with strategy runs once started: Always and RerunOnFailure
// start it; Manual, Once and Halted leave it as it is.
func shouldRun(strategy virtv1.VirtualMachineRunStrategy) bool {
	return strategy == virtv1.RunStrategyAlways || strategy == virtv1.RunStrategyRerunOnFailure
}

// Release gives the VMs the workflow stopped on node n their run strategy back, without
// waiting for them to run (a workflow deleted before it changed the node lets them go), and
// names them. The VMs it moved off stay where they run.
func (w *Workflow) Release(ctx context.Context, n Node) ([]string, error) {
	var list virtv1.VirtualMachineList
	if err := w.Reader.List(ctx, &list); meta.IsNoMatchError(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []string
	for i := range list.Items {
		vm := &list.Items[i]
		rest, ours := strings.CutPrefix(vm.Annotations[w.Stopped], w.stoppedBy(n))
		if !ours {
			continue
		}
		base := vm.DeepCopy()
		strategy, _ := strings.CutSuffix(rest, "/"+restored)
		vm.Spec.Running = nil
		vm.Spec.RunStrategy = ptr.To(virtv1.VirtualMachineRunStrategy(strategy))
		delete(vm.Annotations, w.Stopped)
		if err := w.Client.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, err
		}
		out = append(out, key(vm))
	}
	return out, nil
}
