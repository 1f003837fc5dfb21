package testenv_test

import (
	"context"
	"os"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
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
