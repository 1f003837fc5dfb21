// Package vmrun stops a KubeVirt VirtualMachine and gives it its run strategy back, through its
// spec, in the field its owner uses: spec.runStrategy, or spec.running, which KubeVirt
// deprecates and older VMs still use (it takes one or the other). Whoever stops a VM for a
// while (a volume migration, a VM owner's restore or restart) leaves the owner's choice of
// field as it found it.
package vmrun

import (
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// Stop sets vm's spec to stop it: spec.running false on a VM that has it, else run strategy
// Halted. It reports whether the spec changed.
func Stop(vm *virtv1.VirtualMachine) bool {
	if vm.Spec.Running != nil {
		changed := *vm.Spec.Running
		vm.Spec.Running = ptr.To(false)
		return changed
	}
	changed := ptr.Deref(vm.Spec.RunStrategy, "") != virtv1.RunStrategyHalted
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted)
	return changed
}

// GiveBack sets vm's spec to run as strategy again, in the field it has: on a VM with
// spec.running (Stop kept it), true for Always and false for Halted, the two strategies that
// field says; otherwise, or for another strategy, spec.runStrategy without spec.running. It
// reports whether the spec changed.
func GiveBack(vm *virtv1.VirtualMachine, strategy virtv1.VirtualMachineRunStrategy) bool {
	before := vm.Spec.DeepCopy()
	if vm.Spec.Running != nil && (strategy == virtv1.RunStrategyAlways || strategy == virtv1.RunStrategyHalted) {
		vm.Spec.Running = ptr.To(strategy == virtv1.RunStrategyAlways)
	} else {
		vm.Spec.Running = nil
		vm.Spec.RunStrategy = ptr.To(strategy)
	}
	return !ptr.Equal(before.Running, vm.Spec.Running) || !ptr.Equal(before.RunStrategy, vm.Spec.RunStrategy)
}
