package vmrun

import (
	"testing"

	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// spec is a VM's two run fields as text: "runStrategy=X" or "running=B" or "neither".
func spec(vm *virtv1.VirtualMachine) string {
	switch {
	case vm.Spec.Running != nil && vm.Spec.RunStrategy != nil:
		return "both"
	case vm.Spec.Running != nil:
		if *vm.Spec.Running {
			return "running=true"
		}
		return "running=false"
	case vm.Spec.RunStrategy != nil:
		return "runStrategy=" + string(*vm.Spec.RunStrategy)
	}
	return "neither"
}

func withRunning(b bool) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{Spec: virtv1.VirtualMachineSpec{Running: ptr.To(b)}}
}

func withStrategy(s virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(s)}}
}

// Stop writes the field the VM has, and says whether it changed anything.
func TestStopKeepsTheOwnersField(t *testing.T) {
	for _, tc := range []struct {
		vm      *virtv1.VirtualMachine
		want    string
		changed bool
	}{
		{withRunning(true), "running=false", true},
		{withRunning(false), "running=false", false},
		{withStrategy(virtv1.RunStrategyAlways), "runStrategy=Halted", true},
		{withStrategy(virtv1.RunStrategyManual), "runStrategy=Halted", true},
		{withStrategy(virtv1.RunStrategyHalted), "runStrategy=Halted", false},
		{&virtv1.VirtualMachine{}, "runStrategy=Halted", true},
	} {
		was := spec(tc.vm)
		if changed := Stop(tc.vm); spec(tc.vm) != tc.want || changed != tc.changed {
			t.Errorf("Stop of %s: %s, changed %v; want %s, %v", was, spec(tc.vm), changed, tc.want, tc.changed)
		}
	}
}

// GiveBack writes spec.running on a VM that has it when it can say the strategy, else the run
// strategy alone, and says whether it changed anything; a VM stopped and given back what it
// had is as it was.
func TestGiveBackKeepsTheOwnersField(t *testing.T) {
	for _, tc := range []struct {
		vm       *virtv1.VirtualMachine
		strategy virtv1.VirtualMachineRunStrategy
		want     string
		changed  bool
	}{
		{withRunning(false), virtv1.RunStrategyAlways, "running=true", true},
		{withRunning(false), virtv1.RunStrategyHalted, "running=false", false},
		{withRunning(true), virtv1.RunStrategyAlways, "running=true", false},
		{withRunning(false), virtv1.RunStrategyRerunOnFailure, "runStrategy=RerunOnFailure", true},
		{withStrategy(virtv1.RunStrategyHalted), virtv1.RunStrategyAlways, "runStrategy=Always", true},
		{withStrategy(virtv1.RunStrategyHalted), virtv1.RunStrategyManual, "runStrategy=Manual", true},
		{withStrategy(virtv1.RunStrategyManual), virtv1.RunStrategyManual, "runStrategy=Manual", false},
	} {
		was := spec(tc.vm)
		if changed := GiveBack(tc.vm, tc.strategy); spec(tc.vm) != tc.want || changed != tc.changed {
			t.Errorf("GiveBack(%s) of %s: %s, changed %v; want %s, %v", tc.strategy, was, spec(tc.vm), changed, tc.want, tc.changed)
		}
	}
	for _, vm := range []*virtv1.VirtualMachine{withRunning(true), withRunning(false), withStrategy(virtv1.RunStrategyAlways), withStrategy(virtv1.RunStrategyRerunOnFailure), withStrategy(virtv1.RunStrategyManual)} {
		was := spec(vm)
		strategy, err := vm.RunStrategy()
		if err != nil {
			t.Fatal(err)
		}
		Stop(vm)
		GiveBack(vm, strategy)
		if spec(vm) != was {
			t.Errorf("%s stopped and given %s back: %s", was, strategy, spec(vm))
		}
	}
}
