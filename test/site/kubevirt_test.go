package site_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// rwxVolume makes a bound ReadWriteMany claim: a disk a VM can live-migrate with.
func (f *fix) rwxVolume(name string) {
	f.t.Helper()
	pvc := f.claim(name, nil)
	pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	f.create(pvc)
	f.bound(name)
}

// patchVM merges patch into the VM's spec, as kubectl patch does: no conflict with the site's
// writes of its status.
func (f *fix) patchVM(name, spec string) {
	f.t.Helper()
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	if err := env.Client.Patch(f.ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"spec":`+spec+`}`))); err != nil {
		f.t.Fatalf("patching VM %s with %s: %v", name, spec, err)
	}
}

// pinned is a VM whose template's node selector names node.
func pinned(vm *virtv1.VirtualMachine, node string) *virtv1.VirtualMachine {
	vm.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	return vm
}

// vmiCondition returns the VMI's condition of type t, nil if it has none.
func vmiCondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

// runsOn waits until the VMI runs on node, as its status and its label say, and returns it.
func (f *fix) runsOn(name, node string) *virtv1.VirtualMachineInstance {
	f.t.Helper()
	vmi := &virtv1.VirtualMachineInstance{}
	f.eventually(func() string {
		if err := f.get(name, vmi); err != nil {
			return err.Error()
		}
		if vmi.Status.Phase != virtv1.Running || vmi.Status.NodeName != node || vmi.Labels[virtv1.NodeNameLabel] != node {
			return fmt.Sprintf("VMI %s is %s on node %q (label %q), want Running on %q",
				name, vmi.Status.Phase, vmi.Status.NodeName, vmi.Labels[virtv1.NodeNameLabel], node)
		}
		return ""
	})
	return vmi
}

func TestSiteRegistersANodePerSiteNode(t *testing.T) {
	f := newNodesFixture(t, 3, site.Options{})
	if f.site.NodeName() != f.node(1) {
		t.Errorf("the kubelet's node is %q, want the first, %q", f.site.NodeName(), f.node(1))
	}
	for _, name := range f.site.Nodes() {
		node := &corev1.Node{}
		if err := env.Client.Get(f.ctx, client.ObjectKey{Name: name}, node); err != nil {
			t.Fatalf("Node %s: %v", name, err)
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		if node.Labels[corev1.LabelHostname] != name || !ready {
			t.Errorf("Node %s: labels %v, conditions %+v", name, node.Labels, node.Status.Conditions)
		}
	}
}

func TestVMIRunsOnTheNodeItsSelectorNames(t *testing.T) {
	f := newNodesFixture(t, 3, site.Options{})
	f.volume("root-a", 21)
	f.volume("root-b", 22)
	f.volume("root-c", 23)
	f.create(pinned(f.vm("second", "root-a", virtv1.RunStrategyAlways), f.node(2)))
	f.create(f.vm("anywhere", "root-b", virtv1.RunStrategyAlways))
	f.runsOn("second", f.node(2))
	f.runsOn("anywhere", f.node(1)) // the first node that fits

	// A selector no site node matches: the VMI waits to be scheduled, as KubeVirt's does.
	f.create(pinned(f.vm("nowhere", "root-c", virtv1.RunStrategyAlways), "elsewhere"))
	vmi := &virtv1.VirtualMachineInstance{}
	f.eventually(func() string {
		if err := f.get("nowhere", vmi); err != nil {
			return err.Error()
		}
		c := vmiCondition(vmi, "PodScheduled")
		if vmi.Status.Phase != virtv1.Scheduling || c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
			return fmt.Sprintf("VMI nowhere is %s with conditions %+v, want Scheduling and unschedulable", vmi.Status.Phase, vmi.Status.Conditions)
		}
		return ""
	})
	if c := vmiCondition(vmi, "PodScheduled"); c.Message != "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector." {
		t.Errorf("unschedulable message %q", c.Message)
	}
	if vmi.Status.NodeName != "" {
		t.Errorf("an unscheduled VMI is on node %q", vmi.Status.NodeName)
	}
	f.vmIs("nowhere", virtv1.VirtualMachineStatusUnschedulable)
}

func TestVMIWaitsForACordonedNode(t *testing.T) {
	f := newNodesFixture(t, 2, site.Options{})
	cordon(t, f.node(2), true)
	f.volume("root", 24)
	f.create(pinned(f.vm("web", "root", virtv1.RunStrategyAlways), f.node(2)))
	f.eventually(func() string {
		vmi := &virtv1.VirtualMachineInstance{}
		if err := f.get("web", vmi); err != nil {
			return err.Error()
		}
		want := "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable."
		if c := vmiCondition(vmi, "PodScheduled"); c == nil || c.Message != want {
			return fmt.Sprintf("VMI web is %s with conditions %+v, want PodScheduled saying %q", vmi.Status.Phase, vmi.Status.Conditions, want)
		}
		return ""
	})
	cordon(t, f.node(2), false)
	vmi := f.runsOn("web", f.node(2))
	if c := vmiCondition(vmi, "PodScheduled"); c != nil {
		t.Errorf("a running VMI keeps %+v", c)
	}
}

// cordon marks the Node unschedulable, or schedulable again, as kubectl cordon does.
func cordon(t *testing.T, name string, unschedulable bool) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable))
	if err := env.Client.Patch(context.Background(), node, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

func TestLiveMigratableFollowsTheClaimsAccessModes(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.rwxVolume("shared")
	f.volume("local", 25)
	f.create(f.vm("rwx", "shared", virtv1.RunStrategyAlways))
	f.create(f.vm("rwo", "local", virtv1.RunStrategyAlways))

	rwx := f.vmiOn("rwx", virtv1.Running, "shared")
	if c := vmiCondition(rwx, virtv1.VirtualMachineInstanceIsMigratable); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("VMI on a ReadWriteMany claim: LiveMigratable %+v, want True", c)
	}
	if rwx.Status.MigrationMethod != virtv1.LiveMigration {
		t.Errorf("migration method %q", rwx.Status.MigrationMethod)
	}

	rwo := f.vmiOn("rwo", virtv1.Running, "local")
	want := virtv1.VirtualMachineInstanceCondition{
		Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionFalse, Reason: "DisksNotLiveMigratable",
		Message: "cannot migrate VMI: PVC local is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)",
	}
	if c := vmiCondition(rwo, virtv1.VirtualMachineInstanceIsMigratable); c == nil || c.Status != want.Status || c.Reason != want.Reason || c.Message != want.Message {
		t.Errorf("VMI on a ReadWriteOnce claim: LiveMigratable %+v, want %+v", c, want)
	}
	for _, vmi := range []*virtv1.VirtualMachineInstance{rwx, rwo} {
		if c := vmiCondition(vmi, virtv1.VirtualMachineInstanceReady); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("VMI %s: Ready %+v", vmi.Name, c)
		}
	}
}

func TestRunStrategyHaltedAndBackRunsOnTheSelectedNode(t *testing.T) {
	f := newNodesFixture(t, 2, site.Options{})
	f.volume("root", 26)
	f.create(pinned(f.vm("web", "root", virtv1.RunStrategyAlways), f.node(2)))
	first := f.runsOn("web", f.node(2))
	f.vmIs("web", virtv1.VirtualMachineStatusRunning)

	f.patchVM("web", `{"runStrategy":"Halted"}`)
	f.noVMI("web")
	vm := f.vmIs("web", virtv1.VirtualMachineStatusStopped)
	if vm.Status.Ready || vm.Status.Created || vm.Status.RunStrategy != virtv1.RunStrategyHalted {
		t.Errorf("halted VM status %+v", vm.Status)
	}

	f.patchVM("web", `{"runStrategy":"Always"}`)
	again := f.runsOn("web", f.node(2))
	if again.UID == first.UID {
		t.Error("the VM runs on the VMI it had before it was halted")
	}
	if vm = f.vmIs("web", virtv1.VirtualMachineStatusRunning); !vm.Status.Ready {
		t.Errorf("VM status %+v", vm.Status)
	}
}

func TestRunStrategyRerunOnFailureDoesNotRestartAStoppedVMI(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("root", 27)
	f.create(f.vm("web", "root", virtv1.RunStrategyRerunOnFailure))
	vmi := f.vmiOn("web", virtv1.Running, "root")
	f.vmIs("web", virtv1.VirtualMachineStatusRunning)

	// Stopped from outside, it stays stopped: KubeVirt restarts only a VMI that failed.
	f.delete(vmi)
	vm := f.vmIs("web", virtv1.VirtualMachineStatusStopped)
	if vm.Status.Created || vm.Status.RunStrategy != virtv1.RunStrategyRerunOnFailure {
		t.Errorf("VM status %+v", vm.Status)
	}
	if err := f.get("web", &virtv1.VirtualMachineInstance{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stopped VM has a VMI again (%v)", err)
	}

	// Halted and back to RerunOnFailure, as a VM's protection by Stop does: it runs again.
	f.patchVM("web", `{"runStrategy":"Halted"}`)
	f.eventually(func() string {
		if err := f.get("web", vm); err != nil {
			return err.Error()
		}
		if vm.Status.RunStrategy != virtv1.RunStrategyHalted {
			return fmt.Sprintf("VM status runStrategy %q, want Halted", vm.Status.RunStrategy)
		}
		return ""
	})
	f.patchVM("web", `{"runStrategy":"RerunOnFailure"}`)
	f.vmiOn("web", virtv1.Running, "root")
	f.vmIs("web", virtv1.VirtualMachineStatusRunning)
}

func TestRunStrategiesManualOnceAndRunning(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("root-manual", 28)
	f.volume("root-once", 29)
	f.volume("root-running", 30)

	// Manual: nothing starts it but virtctl's start request, which the site does not play.
	f.create(f.vm("manual", "root-manual", virtv1.RunStrategyManual))
	vm := f.vmIs("manual", virtv1.VirtualMachineStatusStopped)
	if vm.Status.RunStrategy != virtv1.RunStrategyManual {
		t.Errorf("VM status %+v", vm.Status)
	}
	if err := f.get("manual", &virtv1.VirtualMachineInstance{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Manual VM got a VMI (%v)", err)
	}

	f.create(f.vm("once", "root-once", virtv1.RunStrategyOnce))
	f.vmiOn("once", virtv1.Running, "root-once")
	f.vmIs("once", virtv1.VirtualMachineStatusRunning)

	// The deprecated spec.running: true runs, false stops.
	running := f.vm("running", "root-running", "")
	running.Spec.RunStrategy, running.Spec.Running = nil, ptr.To(true)
	f.create(running)
	f.vmiOn("running", virtv1.Running, "root-running")
	f.vmIs("running", virtv1.VirtualMachineStatusRunning)
	f.patchVM("running", `{"running":false}`)
	f.noVMI("running")
	if vm = f.vmIs("running", virtv1.VirtualMachineStatusStopped); vm.Status.RunStrategy != virtv1.RunStrategyHalted {
		t.Errorf("VM status %+v", vm.Status)
	}
}
