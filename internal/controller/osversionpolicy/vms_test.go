package osversionpolicy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/osversionpolicy"
	"github.com/spectrocloud/nodewright/internal/testenv"
	kubevirtsite "github.com/spectrocloud/nodewright/test/site"
)

// vmDriver is the CSI driver the local site (test/site) provisions the VMs' claims with.
const vmDriver = "os.csi.nodewright.test"

// TestLiveMigrateMovesTheVMsOffTheNodeAndBack: a VM runs on the one node a policy upgrades,
// in a cluster of two (the local site's KubeVirt plays its live migrations). Its ProtectVMs
// moves the VM to the other node, which the policy does not upgrade, before the node is
// drained and rebooted; its RestoreVMs brings it back after the soak, and the VM runs there.
func TestLiveMigrateMovesTheVMsOffTheNodeAndBack(t *testing.T) {
	s, ns := vmSite(t, "osvm-1", "osvm-2")
	p := s.ended(s.policyWith("os-vms", newVersion, soakFor, 2*time.Minute, func(p *nwv1.OSVersionPolicy) {
		p.Spec.NodeSelector.MatchExpressions[0].Values = []string{"osvm-1"}
	}), nwv1.WorkflowSucceeded)
	if got := s.booted("osvm-1"); got.image != repository(s.images[newVersion]) || got.entry != "active" {
		t.Fatalf("osvm-1 runs %+v; want %s from its active slot", got, newVersion)
	}
	vmiNode(t, ns, "web", "osvm-1")

	var list virtv1.VirtualMachineInstanceMigrationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var got []string
	var out *virtv1.VirtualMachineInstanceMigration
	for i, m := range list.Items {
		route := ""
		if st := m.Status.MigrationState; st != nil {
			route = st.SourceNode + "->" + st.TargetNode
		}
		tag := m.Labels["nodewright.spectrocloud.com/vm-step"]
		got = append(got, fmt.Sprintf("%s %s %s %s", tag, m.Spec.VMIName, m.Status.Phase, route))
		if tag == "n1-out" {
			out = &list.Items[i]
		}
	}
	want := []string{"n1-out web Succeeded osvm-1->osvm-2", "n1-back web Succeeded osvm-2->osvm-1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") && strings.Join(got, "\n") != want[1]+"\n"+want[0] {
		t.Fatalf("the policy's migrations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The VM had left the node before its agent was asked to reboot it.
	reboot := &nwv1.NodeOperation{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: p.Name + "-n1-reboot"}, reboot); err != nil {
		t.Fatal(err)
	}
	if end := out.Status.MigrationState.EndTimestamp; end == nil || end.After(reboot.CreationTimestamp.Time) {
		t.Errorf("the VM's migration off osvm-1 ended at %v, after its reboot was asked for at %v", end, reboot.CreationTimestamp)
	}
	for part, msg := range map[string]string{"ProtectVMs": "1 VMs moved off osvm-1", "RestoreVMs": "1 VMs back on osvm-1"} {
		if got := partOf(p, 1, part); got != msg {
			t.Errorf("Node1%s says %q; want %q", part, got, msg)
		}
	}
}

// vmSite is two played Kairos nodes, first and second, with the local site's KubeVirt, and VM
// web running on first (the site starts every VM on its first node); it returns the site and
// the VM's namespace.
func vmSite(t *testing.T, first, second string) (*site, string) {
	t.Helper()
	ns := env.Namespace(t)
	kubevirtsite.Start(t, env.Config, kubevirtsite.Options{Nodes: []string{first, second}, Drivers: []string{vmDriver}, Namespaces: []string{ns},
		CopyBinary: kubevirtsite.BuildCopy(t)})
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "os-rwx"}, Provisioner: vmDriver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	if err := env.Client.Create(context.Background(), sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	s := plant(t, true, first+"=secondary", second+"=primary")
	startVM(t, ns, "web", sc.Name)
	if node := vmiNode(t, ns, "web", ""); node != first {
		t.Fatalf("VM web runs on %s, want %s", node, first)
	}
	return s, ns
}

// TestStopHaltsTheVMsAndACordonedNodeKeepsThemAway: with vmProtection Stop, the VM on the
// node is halted through its run strategy before the node is drained and rebooted, and started
// again after, its run strategy and annotations as they were. Then a person cordons the node
// and a second policy, LiveMigrate, moves the VM off it: the node is upgraded and left
// cordoned, and the VM is not moved back to a node no VM may be scheduled on.
func TestStopHaltsTheVMsAndACordonedNodeKeepsThemAway(t *testing.T) {
	s, ns := vmSite(t, "osvmstop-1", "osvmstop-2")
	only := func(node string, mode nwv1.VMProtection) func(*nwv1.OSVersionPolicy) {
		return func(p *nwv1.OSVersionPolicy) {
			p.Spec.NodeSelector.MatchExpressions[0].Values = []string{node}
			p.Spec.VMProtection = mode
		}
	}
	p := s.ended(s.policyWith("os-vms-stop", newVersion, soakFor, 2*time.Minute, only("osvmstop-1", nwv1.VMProtectionStop)), nwv1.WorkflowSucceeded)
	vmiNode(t, ns, "web", "")
	vm := &virtv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, vm); err != nil {
		t.Fatal(err)
	}
	if vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != virtv1.RunStrategyAlways || vm.Annotations[osversionpolicy.AnnotationStopped] != "" {
		t.Errorf("the VM's run strategy %v, annotations %v; want Always and no policy's", vm.Spec.RunStrategy, vm.Annotations)
	}
	for part, msg := range map[string]string{"ProtectVMs": "1 VMs stopped on osvmstop-1", "RestoreVMs": "1 VMs running again"} {
		if got := partOf(p, 1, part); got != msg {
			t.Errorf("Node1%s says %q; want %q", part, got, msg)
		}
	}
	deleted(t, p)

	node := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "osvmstop-1"}, node); err != nil {
		t.Fatal(err)
	}
	vmiNode(t, ns, "web", "osvmstop-1")
	node.Spec.Unschedulable = true
	if err := env.Client.Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	p = s.ended(s.policyWith("os-vms-cordoned", oldVersion, soakFor, 2*time.Minute, only("osvmstop-1", nwv1.VMProtectionLiveMigrate)), nwv1.WorkflowSucceeded)
	if got := s.booted("osvmstop-1"); got.image != repository(s.images[oldVersion]) || got.entry != "active" {
		t.Fatalf("osvmstop-1 runs %+v; want %s from its active slot", got, oldVersion)
	}
	vmiNode(t, ns, "web", "osvmstop-2")
	if cordoned, by := unschedulable(t, "osvmstop-1"); !cordoned || by != "" {
		t.Errorf("osvmstop-1: unschedulable %t, cordoned-by %q; want it left cordoned as the person did", cordoned, by)
	}
	if got, want := partOf(p, 1, "RestoreVMs"), "1 VMs stay where they run: osvmstop-1 was cordoned before, by someone else, and stays so"; got != want {
		t.Errorf("Node1RestoreVMs says %q; want %q", got, want)
	}
}

// partOf is the message of part in the record of the node at position k.
func partOf(p *nwv1.OSVersionPolicy, k int, part string) string {
	for _, n := range p.Status.Nodes {
		if int(n.Position) != k {
			continue
		}
		for _, x := range n.Parts {
			if x.Name == part {
				return x.Message
			}
		}
	}
	return ""
}

// startVM starts VM name in ns on a ReadWriteMany block claim of class (live-migratable).
func startVM(t *testing.T, ns, name, class string) {
	t.Helper()
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-root", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: ptr.To(class), Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}}}}
	if err := env.Client.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: virtv1.VirtualMachineSpec{
		RunStrategy: ptr.To(virtv1.RunStrategyAlways),
		Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
			Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
			Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}}},
		}}}}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
}

// vmiNode waits until VM name's VMI runs, on node unless empty, and returns its node.
func vmiNode(t *testing.T, ns, name, node string) string {
	t.Helper()
	vmi := &virtv1.VirtualMachineInstance{}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vmi); err != nil {
			return err.Error()
		}
		if vmi.Status.Phase != virtv1.Running || (node != "" && vmi.Status.NodeName != node) {
			return fmt.Sprintf("VMI %s is %s on %q; want Running on %q", name, vmi.Status.Phase, vmi.Status.NodeName, node)
		}
		return ""
	})
	return vmi.Status.NodeName
}
