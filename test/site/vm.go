package site

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// VMPatience bounds the waits of RunningVM: long enough for a busy CI machine, and no cost
// when the state holds sooner.
const VMPatience = 3 * time.Minute

// RunningVM creates, through c, a VM named name in ns whose volume "root" is a block claim
// "<name>-root" of size bytes and of class, which the site must serve. It fills the first
// half of the volume with random data (the rest is a hole of zeros), waits until the VM runs,
// and returns the volume's bytes.
func (s *Site) RunningVM(t testing.TB, c client.Client, ns, name, class string, size int64) []byte {
	t.Helper()
	ctx := context.Background()
	claim := name + "-root"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
		},
	}
	if err := c.Create(ctx, pvc); err != nil {
		t.Fatalf("creating PVC %s: %v", claim, err)
	}
	testenv.Eventually(t, VMPatience, func() string {
		if _, err := s.BackingFile(ctx, ns, claim); err != nil {
			return fmt.Sprintf("PVC %s has no backing file: %v", claim, err)
		}
		return ""
	})
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(size), uint64(len(ns))))
	for i := range data[:size/2] {
		data[i] = byte(rng.Uint32())
	}
	if err := s.Fill(ctx, ns, claim, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
				Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
					PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
					},
				}}},
			}},
		},
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatalf("creating VM %s: %v", name, err)
	}
	WaitVMRunsOn(t, c, ns, name, claim)
	return data
}

// WaitVMRunsOn waits until VM ns/name runs with its volume "root" on claim.
func WaitVMRunsOn(t testing.TB, c client.Client, ns, name, claim string) {
	t.Helper()
	testenv.Eventually(t, VMPatience, func() string {
		vmi := &virtv1.VirtualMachineInstance{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vmi); err != nil {
			return fmt.Sprintf("VMI %s: %v", name, err)
		}
		on := ""
		for _, v := range vmi.Spec.Volumes {
			if v.Name == "root" && v.PersistentVolumeClaim != nil {
				on = v.PersistentVolumeClaim.ClaimName
			}
		}
		if vmi.Status.Phase != virtv1.Running || on != claim {
			return fmt.Sprintf("VMI %s is %s on %q, want Running on %q", name, vmi.Status.Phase, on, claim)
		}
		return ""
	})
}
