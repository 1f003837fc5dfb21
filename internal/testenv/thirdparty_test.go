package testenv_test

import (
	"context"
	"os"
	"slices"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	vmsnapshotv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// TestKubeVirtSchemaKeepsWhatTheTypesSay writes a VirtualMachine as a user would and reads
// it back unchanged: the derived schema prunes nothing the Go types carry, the template's
// metadata included, and the status goes through its subresource.
func TestKubeVirtSchemaKeepsWhatTheTypesSay(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "kept"}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{
						Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
						Devices: virtv1.Devices{Disks: []virtv1.Disk{{
							Name:       "root",
							DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}},
						}}},
					},
					Volumes: []virtv1.Volume{{
						Name: "root",
						VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
							PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-root"},
						}},
					}},
				},
			},
		},
	}
	want := vm.Spec.DeepCopy()
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatalf("creating a VirtualMachine: %v", err)
	}
	got := &virtv1.VirtualMachine{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(*want, got.Spec) {
		t.Errorf("the API server changed the VM's spec:\nwrote %+v\nread  %+v", *want, got.Spec)
	}

	got.Status.PrintableStatus = virtv1.VirtualMachineStatusRunning
	got.Status.Ready = true
	if err := env.Client.Status().Update(ctx, got); err != nil {
		t.Fatalf("updating the VM's status through its subresource: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil || got.Status.PrintableStatus != virtv1.VirtualMachineStatusRunning {
		t.Errorf("status after the update: %q (err %v)", got.Status.PrintableStatus, err)
	}

	// A VMI has no status subresource: virt-handler writes its status with the object.
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: *want.Template.Spec.DeepCopy()}
	vmi.Status.Phase = virtv1.Running
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatalf("creating a VirtualMachineInstance: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil || vmi.Status.Phase != virtv1.Running {
		t.Errorf("VMI phase %q (err %v), want it written with the object", vmi.Status.Phase, err)
	}
}

// TestSnapshotCRDsValidate checks the snapshot CRDs are the real ones, with their rules: a
// VolumeSnapshot must name exactly one source.
func TestSnapshotCRDsValidate(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	ok := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: ns},
		Spec: snapshotv1.VolumeSnapshotSpec{
			VolumeSnapshotClassName: ptr.To("linstor"),
			Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("web-root")},
		},
	}
	if err := env.Client.Create(ctx, ok); err != nil {
		t.Fatalf("creating a VolumeSnapshot: %v", err)
	}
	bad := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "nothing", Namespace: ns}}
	if err := env.Client.Create(ctx, bad); err == nil {
		t.Error("a VolumeSnapshot without a source was accepted")
	}
}

// TestVirtualMachineInstanceMigrationIsServed creates a migration as a client would and writes
// its status through the subresource, as KubeVirt's migration controller does; the short name
// and category are KubeVirt's.
func TestVirtualMachineInstanceMigrationIsServed(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	vmim := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "web-away", Namespace: ns},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{
			VMIName: "web", AddedNodeSelector: map[string]string{corev1.LabelHostname: "edge-2"},
		},
	}
	want := vmim.Spec.DeepCopy()
	if err := env.Client.Create(ctx, vmim); err != nil {
		t.Fatalf("creating a VirtualMachineInstanceMigration: %v", err)
	}
	if !equality.Semantic.DeepEqual(*want, vmim.Spec) {
		t.Errorf("the API server changed the migration's spec:\nwrote %+v\nread  %+v", *want, vmim.Spec)
	}
	vmim.Status.Phase = virtv1.MigrationPending
	if err := env.Client.Update(ctx, vmim); err != nil {
		t.Fatal(err)
	}
	if vmim.Status.Phase != "" {
		t.Errorf("an update of the object wrote the status phase %q: the status has no subresource", vmim.Status.Phase)
	}
	vmim.Status.Phase = virtv1.MigrationPending
	if err := env.Client.Status().Update(ctx, vmim); err != nil || vmim.Status.Phase != virtv1.MigrationPending {
		t.Errorf("status after the update through the subresource: %q (err %v)", vmim.Status.Phase, err)
	}

	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "virtualmachineinstancemigrations.kubevirt.io"}, crd); err != nil {
		t.Fatal(err)
	}
	if names := crd.Spec.Names; !slices.Equal(names.ShortNames, []string{"vmim", "vmims"}) || !slices.Equal(names.Categories, []string{"all"}) {
		t.Errorf("short names %v, categories %v", names.ShortNames, names.Categories)
	}
}

// TestVirtualMachineSnapshotIsServed creates a VirtualMachineSnapshot as a client would and
// writes what KubeVirt's snapshot controller writes through the status subresource: its phase,
// readiness, indications and volumes survive the API server's schema.
func TestVirtualMachineSnapshotIsServed(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	vms := &vmsnapshotv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns},
		Spec: vmsnapshotv1.VirtualMachineSnapshotSpec{
			Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "web"},
		},
	}
	if err := env.Client.Create(ctx, vms); err != nil {
		t.Fatalf("creating a VirtualMachineSnapshot: %v", err)
	}
	vms.Status = &vmsnapshotv1.VirtualMachineSnapshotStatus{
		Phase: vmsnapshotv1.Succeeded, ReadyToUse: ptr.To(true),
		Indications:                       []vmsnapshotv1.Indication{vmsnapshotv1.VMSnapshotOnlineSnapshotIndication, vmsnapshotv1.VMSnapshotGuestAgentIndication},
		SnapshotVolumes:                   &vmsnapshotv1.SnapshotVolumesLists{IncludedVolumes: []string{"root"}, ExcludedVolumes: []string{"scratch"}},
		VirtualMachineSnapshotContentName: ptr.To("vmsnapshot-content-1"),
	}
	want := vms.Status.DeepCopy()
	if err := env.Client.Status().Update(ctx, vms); err != nil {
		t.Fatalf("writing the status through its subresource: %v", err)
	}
	got := &vmsnapshotv1.VirtualMachineSnapshot{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vms), got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(want, got.Status) {
		t.Errorf("the API server changed the snapshot's status:\nwrote %+v\nread  %+v", want, got.Status)
	}
	for name, short := range map[string][]string{
		"virtualmachinesnapshots.snapshot.kubevirt.io":        {"vmsnapshot", "vmsnapshots"},
		"virtualmachinesnapshotcontents.snapshot.kubevirt.io": {"vmsnapshotcontent", "vmsnapshotcontents"},
		"virtualmachinerestores.snapshot.kubevirt.io":         {"vmrestore", "vmrestores"},
	} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatal(err)
		}
		if names := crd.Spec.Names; !slices.Equal(names.ShortNames, short) || !slices.Equal(names.Categories, []string{"all"}) {
			t.Errorf("%s: short names %v, categories %v", name, names.ShortNames, names.Categories)
		}
	}
}
