package site

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Annotations and finalizers of the PV controller, the provisioner and the scheduler.
const (
	annProvisionedBy      = "pv.kubernetes.io/provisioned-by"
	annBindCompleted      = "pv.kubernetes.io/bind-completed"
	annBoundByController  = "pv.kubernetes.io/bound-by-controller"
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	annSelectedNode       = "volume.kubernetes.io/selected-node"
	pvcProtection         = "kubernetes.io/pvc-protection"
	pvProtection          = "kubernetes.io/pv-protection"
)

// volumeName is the deterministic name of the PV, and CSI volume handle, of a claim.
func volumeName(pvc *corev1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

// boundFile returns the backing file of a claim that one of the site's volumes is bound to,
// and "" while it is not bound (yet) or bound to a volume that is not the site's.
func (s *Site) boundFile(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, *corev1.PersistentVolume, error) {
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return "", nil, nil
	}
	pv := &corev1.PersistentVolume{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return "", nil, client.IgnoreNotFound(err)
	}
	if pv.Spec.CSI == nil || !s.serves(pv.Spec.CSI.Driver) || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return "", nil, nil
	}
	return s.files.volume(pv.Spec.CSI.VolumeHandle), pv, nil
}

// claimFile is boundFile for the claim called name in namespace ns.
func (s *Site) claimFile(ctx context.Context, ns, name string) (string, *corev1.PersistentVolume, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pvc); err != nil {
		return "", nil, client.IgnoreNotFound(err)
	}
	return s.boundFile(ctx, pvc)
}

// podClaims lists the claims a pod's volumes name.
func podClaims(pod *corev1.Pod) []string {
	var names []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return names
}

// vmiClaims lists the claims behind the volumes of a VMI (or VM template) spec; a dataVolume
// is the claim of the same name, as CDI makes it.
func vmiClaims(spec *virtv1.VirtualMachineInstanceSpec) []string {
	var names []string
	for _, v := range spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		case v.DataVolume != nil:
			names = append(names, v.DataVolume.Name)
		}
	}
	return names
}

func podFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func vmiFinished(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.Status.Phase == virtv1.Succeeded || vmi.Status.Phase == virtv1.Failed
}

// claimUsers names the unfinished pods and VMIs that use the claim: what keeps the
// pvc-protection finalizer on, and what makes a WaitForFirstConsumer claim wanted. Only pods
// on the site's node count for the latter; for protection every pod does.
func (s *Site) claimUsers(ctx context.Context, pvc *corev1.PersistentVolumeClaim, onNodeOnly bool) ([]string, error) {
	var users []string
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(pvc.Namespace)); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if podFinished(pod) || (onNodeOnly && pod.Spec.NodeName != s.opts.NodeName) {
			continue
		}
		for _, name := range podClaims(pod) {
			if name == pvc.Name {
				users = append(users, "pod "+pod.Name)
			}
		}
	}
	vmis := &virtv1.VirtualMachineInstanceList{}
	if err := s.client.List(ctx, vmis, client.InNamespace(pvc.Namespace)); err != nil {
		return nil, fmt.Errorf("listing VirtualMachineInstances: %w", err)
	}
	for i := range vmis.Items {
		vmi := &vmis.Items[i]
		if vmiFinished(vmi) {
			continue
		}
		for _, name := range vmiClaims(&vmi.Spec) {
			if name == pvc.Name {
				users = append(users, "vmi "+vmi.Name)
			}
		}
	}
	return users, nil
}

// viaVolume turns a map function of claims into one of volumes: a PV's event is its claim's.
// Reads of a claim's PV go through the cache, which may learn of a new PV after the claim's
// own events: this wakes whoever found no PV.
func (s *Site) viaVolume(ofClaim handler.MapFunc) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		ref := o.(*corev1.PersistentVolume).Spec.ClaimRef
		if ref == nil || !s.inScope(ref.Namespace) {
			return nil
		}
		return ofClaim(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}})
	}
}

// ignoreGone treats an object that disappeared under the site as done with.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsGone(err) {
		return nil
	}
	return err
}
