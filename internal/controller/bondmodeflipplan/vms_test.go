package bondmodeflipplan_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/bondmodeflipplan"
	kubevirtsite "github.com/spectrocloud/nodewright/test/site"
)

// The VM protection tests add the local site's KubeVirt (test/site): VMs whose VMIs run on the
// played nodes and live-migrate between them. The site registers the Nodes (Ready, labelled
// kubernetes.io/hostname); the first node of the site takes every VM that starts.

// vmDriver is the CSI driver the site provisions the VMs' claims with.
const vmDriver = "flip.csi.nodewright.test"

// vmSite is a played cluster of nodes (in the site's order: the first takes the VMs) with
// KubeVirt, and opts for the site.
func vmSite(t *testing.T, opts kubevirtsite.Options, nodes ...string) (*site, string) {
	t.Helper()
	ns := env.Namespace(t)
	for _, n := range nodes {
		name, _, _ := strings.Cut(n, "=")
		opts.Nodes = append(opts.Nodes, name)
	}
	opts.Drivers, opts.Namespaces, opts.CopyBinary = []string{vmDriver}, []string{ns}, kubevirtsite.BuildCopy(t)
	kubevirtsite.Start(t, env.Config, opts)
	for _, mode := range []string{"rwx", "rwo"} {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "flip-" + mode}, Provisioner: vmDriver,
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
		if err := env.Client.Create(context.Background(), sc); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return plantSite(t, true, nil, nodes...), ns
}

// runningVM starts VM name in ns on a block claim of access mode, and waits until its VMI runs;
// it returns the VMI's node.
func runningVM(t *testing.T, ns, name string, mode corev1.PersistentVolumeAccessMode, selector ...map[string]string) string {
	t.Helper()
	ctx := context.Background()
	class := "flip-rwx"
	if mode == corev1.ReadWriteOnce {
		class = "flip-rwo"
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-root", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{mode}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: ptr.To(class), Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}}}}
	if err := env.Client.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: virtv1.VirtualMachineSpec{
		RunStrategy: ptr.To(virtv1.RunStrategyAlways),
		Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
			NodeSelector: first(selector),
			Domain:       virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
			Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}}},
		}}}}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	return vmiOn(t, ns, name, "")
}

func first(selectors []map[string]string) map[string]string {
	if len(selectors) == 0 {
		return nil
	}
	return selectors[0]
}

// vmiOn waits until VM name's VMI runs, on node unless empty, and returns its node.
func vmiOn(t *testing.T, ns, name, node string) string {
	t.Helper()
	vmi := &virtv1.VirtualMachineInstance{}
	eventually(t, func() string {
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

// migrations lists the flip's migrations in ns: "<tag> <vmi> <phase> <source>-><target>".
func migrations(t *testing.T, ns, flip string) []string {
	t.Helper()
	var list virtv1.VirtualMachineInstanceMigrationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range list.Items {
		if m.Labels["nodewright.spectrocloud.com/bondmodeflipplan"] != flip {
			continue
		}
		route := ""
		if st := m.Status.MigrationState; st != nil {
			route = st.SourceNode + "->" + st.TargetNode
		}
		out = append(out, fmt.Sprintf("%s %s %s %s", m.Labels["nodewright.spectrocloud.com/vm-step"], m.Spec.VMIName, m.Status.Phase, route))
	}
	return out
}

// TestLiveMigrateMovesTheVMsOffEachNodeAndBack: the VMs run on the primary, changed last; its
// ProtectVMs moves them to another node with KubeVirt's migrations, and its RestoreVMs brings
// them back once its bond is changed.
func TestLiveMigrateMovesTheVMsOffEachNodeAndBack(t *testing.T) {
	s, ns := vmSite(t, kubevirtsite.Options{}, "flipvm-a=primary", "flipvm-b=secondary", "flipvm-c=secondary")
	for _, vm := range []string{"web", "db"} {
		if node := runningVM(t, ns, vm, corev1.ReadWriteMany); node != "flipvm-a" {
			t.Fatalf("VM %s runs on %s, want flipvm-a", vm, node)
		}
	}
	f := s.ended(s.flip("flip-live", nwv1.VMProtectionLiveMigrate), nwv1.WorkflowSucceeded)
	s.nodesAre(f, nwv1.NodeFlipDone, nwv1.BondMode8023AD, "flipvm-b", "flipvm-c", "flipvm-a")
	for _, vm := range []string{"web", "db"} {
		vmiOn(t, ns, vm, "flipvm-a")
	}
	got := strings.Join(migrations(t, ns, f.Name), "\n")
	for _, want := range []string{"n3-out web Succeeded flipvm-a->flipvm-b", "n3-out db Succeeded flipvm-a->flipvm-b",
		"n3-back web Succeeded flipvm-b->flipvm-a", "n3-back db Succeeded flipvm-b->flipvm-a"} {
		if !strings.Contains(got, want) {
			t.Errorf("the flip's migrations:\n%s\nwant %q", got, want)
		}
	}
	if msg := partMessage(f, 3, "ProtectVMs"); msg != "2 VMs moved off flipvm-a" {
		t.Errorf("Node3ProtectVMs says %q", msg)
	}
}

func stepMessage(f *nwv1.BondModeFlipPlan, step string) string {
	for _, st := range f.Status.Steps {
		if st.Name == step {
			return st.Message
		}
	}
	return ""
}

// partMessage is the message of part in the record of the node at position k.
func partMessage(f *nwv1.BondModeFlipPlan, k int, part string) string {
	for _, n := range f.Status.Nodes {
		if int(n.Position) != k {
			continue
		}
		for _, p := range n.Parts {
			if p.Name == part {
				return p.Message
			}
		}
	}
	return ""
}

// TestAVMThatCannotLiveMigrateIsRefusedAtPreflight: a VM on a ReadWriteOnce claim is not
// live-migratable; the Preflight names it and KubeVirt's reason, and nothing changes.
func TestAVMThatCannotLiveMigrateIsRefusedAtPreflight(t *testing.T) {
	s, ns := vmSite(t, kubevirtsite.Options{}, "flipnm-a=primary", "flipnm-b=secondary")
	runningVM(t, ns, "pinned", corev1.ReadWriteOnce)
	f := s.ended(s.flip("flip-not-migratable", nwv1.VMProtectionLiveMigrate), nwv1.WorkflowRolledBack)
	want := fmt.Sprintf("spec.vmProtection: VM %s/pinned on flipnm-a cannot live-migrate (LiveMigratable False, DisksNotLiveMigratable", ns)
	if msg := stepMessage(f, "Preflight"); !strings.Contains(msg, want) {
		t.Errorf("the Preflight says %q; want %q", msg, want)
	}
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondModeActiveBackup {
			t.Errorf("%s runs %s", n, got)
		}
	}
}

// TestStopHaltsTheVMsAndStartsThemAgain: with vmProtection Stop, the VMs of the node being
// changed are halted through their run strategy, started again after, and their run strategy
// and annotations are as they were.
func TestStopHaltsTheVMsAndStartsThemAgain(t *testing.T) {
	s, ns := vmSite(t, kubevirtsite.Options{}, "flipstop-a=primary", "flipstop-b=secondary")
	runningVM(t, ns, "batch", corev1.ReadWriteOnce)
	f := s.ended(s.flip("flip-stop", nwv1.VMProtectionStop), nwv1.WorkflowSucceeded)
	vmiOn(t, ns, "batch", "")
	vm := &virtv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "batch"}, vm); err != nil {
		t.Fatal(err)
	}
	if vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != virtv1.RunStrategyAlways || vm.Annotations[bondmodeflipplan.AnnotationStopped] != "" {
		t.Errorf("the VM's run strategy %v, annotations %v; want Always and no flip's", vm.Spec.RunStrategy, vm.Annotations)
	}
	if msg := partMessage(f, 2, "ProtectVMs"); msg != "1 VMs stopped on flipstop-a" {
		t.Errorf("Node2ProtectVMs says %q", msg)
	}
}

// TestAVMThatDoesNotComeBackRollsTheFlipBack: the VMs' migration back to their node fails
// once; the flip rolls back, every node to active-backup, and its rollback brings the VMs back
// where they were.
func TestAVMThatDoesNotComeBackRollsTheFlipBack(t *testing.T) {
	var mu sync.Mutex
	var first types.UID
	opts := kubevirtsite.Options{FailMigration: func(vmi *virtv1.VirtualMachineInstance) bool {
		st := vmi.Status.MigrationState
		if st == nil || st.TargetNode != "flipback-a" {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if first == "" {
			first = st.MigrationUID
		}
		return st.MigrationUID == first
	}}
	s, ns := vmSite(t, opts, "flipback-a=primary", "flipback-b=secondary")
	runningVM(t, ns, "web", corev1.ReadWriteMany)
	f := s.ended(s.flip("flip-no-return", nwv1.VMProtectionLiveMigrate), nwv1.WorkflowRolledBack)
	s.nodesAre(f, nwv1.NodeFlipRolledBack, nwv1.BondModeActiveBackup, "flipback-b", "flipback-a")
	if msg := partMessage(f, 2, "RestoreVMs"); !strings.Contains(msg, "VM "+ns+"/web did not come back to it") {
		t.Errorf("Node2RestoreVMs says %q", msg)
	}
	vmiOn(t, ns, "web", "flipback-a")
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondModeActiveBackup {
			t.Errorf("%s runs %s", n, got)
		}
	}
}

// TestABrokenPortBringsEveryVMBackWhereItWas: the VMs run on the first node changed; the last
// node's port never carries the new mode. The earlier nodes are flipped back, each with its VMs
// moved off while it is, and every VM ends on the node it started on.
func TestABrokenPortBringsEveryVMBackWhereItWas(t *testing.T) {
	s, ns := vmSite(t, kubevirtsite.Options{}, "flipbv-b=secondary", "flipbv-a=primary", "flipbv-c=secondary")
	s.net.NeverCarry("flipbv-a", nwv1.BondMode8023AD)
	if node := runningVM(t, ns, "web", corev1.ReadWriteMany); node != "flipbv-b" {
		t.Fatalf("VM web runs on %s, want flipbv-b", node)
	}
	f := s.ended(s.flip("flip-broken-vms", nwv1.VMProtectionLiveMigrate), nwv1.WorkflowRolledBack)
	s.nodesAre(f, nwv1.NodeFlipRolledBack, nwv1.BondModeActiveBackup, "flipbv-b", "flipbv-c", "flipbv-a")
	vmiOn(t, ns, "web", "flipbv-b")
	got := strings.Join(migrations(t, ns, f.Name), "\n")
	for _, want := range []string{"n1-out web Succeeded flipbv-b->", "n1-back web Succeeded", "n1-rbout web Succeeded flipbv-b->", "n1-rbback web Succeeded"} {
		if !strings.Contains(got, want) {
			t.Errorf("the flip's migrations:\n%s\nwant %q", got, want)
		}
	}
}

// TestAVMPinnedToItsNodeIsRefusedAtPreflight: a live-migratable VM whose node selector pins it
// to its node could not leave it; the Preflight names it.
func TestAVMPinnedToItsNodeIsRefusedAtPreflight(t *testing.T) {
	s, ns := vmSite(t, kubevirtsite.Options{}, "flippin-a=primary", "flippin-b=secondary")
	runningVM(t, ns, "pinned", corev1.ReadWriteMany, map[string]string{"kubernetes.io/hostname": "flippin-a"})
	vmiOn(t, ns, "pinned", "flippin-a")
	f := s.ended(s.flip("flip-pinned", nwv1.VMProtectionLiveMigrate), nwv1.WorkflowRolledBack)
	want := fmt.Sprintf("spec.vmProtection: VM %s/pinned on flippin-a cannot leave it: its spec.nodeSelector pins it to kubernetes.io/hostname=flippin-a", ns)
	if msg := stepMessage(f, "Preflight"); !strings.Contains(msg, want) {
		t.Errorf("the Preflight says %q; want %q", msg, want)
	}
}
