package site_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/spectrocloud/nodewright/test/site"
)

// vm is a VirtualMachine with one disk, "root", on the claim.
func (f *fix) vm(name, claim string, strategy virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(strategy),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
					Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
						PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
							PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
						},
					}}},
				},
			},
		},
	}
}

// vmIs waits for the VM's printable status and returns the VM.
func (f *fix) vmIs(name string, want virtv1.VirtualMachinePrintableStatus) *virtv1.VirtualMachine {
	f.t.Helper()
	vm := &virtv1.VirtualMachine{}
	f.eventually(func() string {
		if err := f.get(name, vm); err != nil {
			return err.Error()
		}
		if vm.Status.PrintableStatus != want {
			return fmt.Sprintf("VM %s is %q, want %q: %+v", name, vm.Status.PrintableStatus, want, vm.Status)
		}
		return ""
	})
	return vm
}

// vmiOn waits for the VM's VMI to be in phase with its root disk on claim.
func (f *fix) vmiOn(name string, phase virtv1.VirtualMachineInstancePhase, claim string) *virtv1.VirtualMachineInstance {
	f.t.Helper()
	vmi := &virtv1.VirtualMachineInstance{}
	f.eventually(func() string {
		if err := f.get(name, vmi); err != nil {
			return err.Error()
		}
		on := ""
		if v := vmi.Spec.Volumes; len(v) == 1 && v[0].PersistentVolumeClaim != nil {
			on = v[0].PersistentVolumeClaim.ClaimName
		}
		if vmi.Status.Phase != phase || on != claim {
			return fmt.Sprintf("VMI %s is %s on %q, want %s on %q", name, vmi.Status.Phase, on, phase, claim)
		}
		return ""
	})
	return vmi
}

func (f *fix) noVMI(name string) {
	f.t.Helper()
	f.eventually(func() string {
		if err := f.get(name, &virtv1.VirtualMachineInstance{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("VMI %s is still there (%v)", name, err)
		}
		return ""
	})
}

func TestVirtualMachineRunsStopsAndRestartsOnItsNewVolume(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("root-a", 10)
	f.volume("root-b", 11)
	f.create(f.vm("web", "root-a", virtv1.RunStrategyAlways))

	vmi := f.vmiOn("web", virtv1.Running, "root-a")
	vm := f.vmIs("web", virtv1.VirtualMachineStatusRunning)
	if !vm.Status.Ready || !vm.Status.Created || !metav1.IsControlledBy(vmi, vm) || vmi.Labels["app"] != "web" ||
		vmi.Status.NodeName != f.site.NodeName() {
		t.Errorf("VM status %+v; VMI owners %v labels %v node %q", vm.Status, vmi.OwnerReferences, vmi.Labels, vmi.Status.NodeName)
	}
	for _, c := range vmi.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceAgentConnected {
			t.Errorf("a VMI without a guest reports %s", c.Type)
		}
	}

	// Halted stops it; the new volume is put in while it is stopped.
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted)
	f.update(vm)
	f.noVMI("web")
	vm = f.vmIs("web", virtv1.VirtualMachineStatusStopped)
	if vm.Status.Ready || vm.Status.Created {
		t.Errorf("stopped VM status %+v", vm.Status)
	}
	vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "root-b"
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways)
	f.update(vm)
	f.vmiOn("web", virtv1.Running, "root-b")
	f.vmIs("web", virtv1.VirtualMachineStatusRunning)
}

func TestVirtualMachineWithoutItsClaimDoesNotStart(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.create(f.vm("web", "root", virtv1.RunStrategyAlways))
	vm := f.vmIs("web", virtv1.VirtualMachineStatusPvcNotFound)
	if vm.Status.Ready || vm.Status.Created {
		t.Errorf("VM status %+v", vm.Status)
	}
	if err := f.get("web", &virtv1.VirtualMachineInstance{}); !apierrors.IsNotFound(err) {
		t.Errorf("a VM without its claim has a VMI (%v)", err)
	}
	f.create(f.claim("root", nil))
	f.vmiOn("web", virtv1.Running, "root")
}

func TestFailStartLeavesTheVMInCrashLoop(t *testing.T) {
	f := newFixture(t, site.Options{FailStart: func(vm *virtv1.VirtualMachine) bool { return vm.Name == "web" }})
	f.volume("root", 12)
	f.create(f.vm("web", "root", virtv1.RunStrategyAlways))
	f.vmiOn("web", virtv1.Failed, "root")
	vm := f.vmIs("web", virtv1.VirtualMachineStatusCrashLoopBackOff)
	if vm.Status.Ready || vm.Status.StartFailure == nil {
		t.Errorf("VM status %+v", vm.Status)
	}
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted)
	f.update(vm)
	f.noVMI("web")
	f.vmIs("web", virtv1.VirtualMachineStatusStopped)
}

func TestVolumeChangeOfARunningVMAsksForARestart(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("root-a", 13)
	f.volume("root-b", 14)
	f.create(f.vm("web", "root-a", virtv1.RunStrategyAlways))
	f.vmiOn("web", virtv1.Running, "root-a")
	vm := f.vmIs("web", virtv1.VirtualMachineStatusRunning)
	vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "root-b"
	f.update(vm)
	f.eventually(func() string {
		if err := f.get("web", vm); err != nil {
			return err.Error()
		}
		for _, c := range vm.Status.Conditions {
			if c.Type == virtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue {
				return ""
			}
		}
		return fmt.Sprintf("no RestartRequired condition: %+v", vm.Status.Conditions)
	})
	// The running VMI keeps the volume it started with; deleting it (a restart) brings the new one.
	vmi := f.vmiOn("web", virtv1.Running, "root-a")
	f.delete(vmi)
	f.vmiOn("web", virtv1.Running, "root-b")
}

func TestDeletedVMTakesItsVMI(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("root", 15)
	f.create(f.vm("web", "root", virtv1.RunStrategyAlways))
	f.vmiOn("web", virtv1.Running, "root")
	f.delete(&virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns}})
	f.noVMI("web")
	// With no VMI using it, the claim can go, and its volume and file with it.
	f.delete(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: f.ns}})
	f.nothingLeft()
}

func TestClaimOfARunningVMIsProtected(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("root", 16)
	f.create(f.vm("web", "root", virtv1.RunStrategyAlways))
	f.vmiOn("web", virtv1.Running, "root")
	f.delete(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: f.ns}})
	// A second claim deleted after it and gone proves the site has looked at the first.
	f.create(f.claim("probe", nil))
	f.bound("probe")
	f.delete(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: f.ns}})
	f.eventually(func() string {
		if err := f.get("probe", &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("claim probe is still there (%v)", err)
		}
		return ""
	})
	pvc := &corev1.PersistentVolumeClaim{}
	if err := f.get("root", pvc); err != nil {
		t.Fatalf("the claim of a running VM went: %v", err)
	}
	if _, err := f.site.BackingFile(f.ctx, f.ns, "root"); err != nil {
		t.Errorf("the running VM's volume is gone: %v", err)
	}
	vm := &virtv1.VirtualMachine{}
	if err := f.get("web", vm); err != nil {
		t.Fatal(err)
	}
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted)
	f.update(vm)
	f.delete(vm)
	f.nothingLeft()
}

func TestVMIWithoutAVMRunsOnceItsClaimIsBound(t *testing.T) {
	f := newFixture(t, site.Options{})
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: f.ns}, Spec: f.vm("solo", "root", virtv1.RunStrategyAlways).Spec.Template.Spec}
	f.create(vmi)
	f.vmiOn("solo", virtv1.Scheduling, "root")
	f.create(f.claim("root", nil))
	f.vmiOn("solo", virtv1.Running, "root")
	f.delete(vmi)
	f.delete(claimRef("root", f.ns))
	f.nothingLeft()
}
