package site

import (
	"context"
	"fmt"
	"os"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The provisioner plays the external-provisioner with the CSI driver behind it, the PV
// controller's binding and the pvc-protection controller.

func (s *Site) setupProvisioner() error {
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool { return s.inScope(o.GetNamespace()) })
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-provisioner").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(inScope)).
		// A clone waits for its source claim to be bound.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(s.claimsRestoringFrom("", "PersistentVolumeClaim")),
			builder.WithPredicates(inScope)).
		// A claim's binding, and its clones, wait for its PV to reach the cache.
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(s.viaVolume(func(ctx context.Context, o client.Object) []reconcile.Request {
			return append(requests(o.GetNamespace(), []string{o.GetName()}), s.claimsRestoringFrom("", "PersistentVolumeClaim")(ctx, o)...)
		}))).
		// A restore waits for its snapshot to be ready, and for its content to reach the cache.
		Watches(&snapshotv1.VolumeSnapshot{}, handler.EnqueueRequestsFromMapFunc(s.claimsRestoringFrom(snapshotv1.GroupName, "VolumeSnapshot")),
			builder.WithPredicates(inScope)).
		Watches(&snapshotv1.VolumeSnapshotContent{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			ref := o.(*snapshotv1.VolumeSnapshotContent).Spec.VolumeSnapshotRef
			if !s.inScope(ref.Namespace) {
				return nil
			}
			vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
			return s.claimsRestoringFrom(snapshotv1.GroupName, "VolumeSnapshot")(ctx, vs)
		})).
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(s.claimsOfClass)).
		// Pods and VMIs consume WaitForFirstConsumer claims and hold the pvc-protection finalizer.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return requests(o.GetNamespace(), podClaims(o.(*corev1.Pod)))
		}), builder.WithPredicates(inScope)).
		Watches(&virtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return requests(o.GetNamespace(), vmiClaims(&o.(*virtv1.VirtualMachineInstance).Spec))
		}), builder.WithPredicates(inScope)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.Func(s.reconcileClaim))
}

func requests(ns string, names []string) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(names))
	for _, name := range names {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
	return out
}

// claimsRestoringFrom maps an object to the unbound claims whose data source it is.
func (s *Site) claimsRestoringFrom(group, kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		claims := &corev1.PersistentVolumeClaimList{}
		if err := s.client.List(ctx, claims, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var names []string
		for i := range claims.Items {
			src, ok := dataSource(&claims.Items[i])
			if ok && claims.Items[i].Spec.VolumeName == "" && src.group == group && src.kind == kind && src.name == o.GetName() {
				names = append(names, claims.Items[i].Name)
			}
		}
		return requests(o.GetNamespace(), names)
	}
}

func (s *Site) claimsOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	claims := &corev1.PersistentVolumeClaimList{}
	if err := s.client.List(ctx, claims); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range claims.Items {
		pvc := &claims.Items[i]
		if s.inScope(pvc.Namespace) && pvc.Spec.VolumeName == "" && ptr.Deref(pvc.Spec.StorageClassName, "") == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pvc)})
		}
	}
	return out
}

func (s *Site) reconcileClaim(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := s.client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.DeletionTimestamp != nil {
		return ctrl.Result{}, s.releaseProtection(ctx, pvc)
	}
	class, err := s.classOf(ctx, pvc)
	if class == nil || err != nil {
		return ctrl.Result{}, err
	}
	if pvc.Spec.VolumeName != "" {
		return ctrl.Result{}, s.completeBinding(ctx, pvc)
	}
	selectedNode := ""
	if ptr.Deref(class.VolumeBindingMode, storagev1.VolumeBindingImmediate) == storagev1.VolumeBindingWaitForFirstConsumer {
		users, err := s.claimUsers(ctx, pvc, true)
		if len(users) == 0 || err != nil {
			return ctrl.Result{}, err
		}
		selectedNode = s.opts.NodeName // what the scheduler would have chosen for the first user
	}
	pv, err := s.provision(ctx, pvc, class)
	if pv == nil || err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, s.bind(ctx, pvc, pv, selectedNode)
}

// classOf returns the claim's StorageClass when the site is its provisioner, else nil.
func (s *Site) classOf(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, error) {
	name := ptr.Deref(pvc.Spec.StorageClassName, "")
	if name == "" {
		return nil, nil
	}
	class := &storagev1.StorageClass{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: name}, class); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !s.serves(class.Provisioner) {
		return nil, nil
	}
	return class, nil
}

// releaseProtection plays the pvc-protection controller: a claim being deleted keeps its
// finalizer while an unfinished pod or VMI uses it.
func (s *Site) releaseProtection(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if !controllerutil.ContainsFinalizer(pvc, pvcProtection) {
		return nil
	}
	users, err := s.claimUsers(ctx, pvc, false)
	if len(users) > 0 || err != nil {
		return err
	}
	before := pvc.DeepCopy()
	controllerutil.RemoveFinalizer(pvc, pvcProtection)
	return ignoreGone(s.client.Patch(ctx, pvc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

// dataRef is where a claim's first bytes come from.
type dataRef struct{ group, kind, name, namespace string }

// dataSource reads dataSourceRef, which the API server fills from dataSource, or dataSource.
func dataSource(pvc *corev1.PersistentVolumeClaim) (dataRef, bool) {
	if ref := pvc.Spec.DataSourceRef; ref != nil {
		return dataRef{group: ptr.Deref(ref.APIGroup, ""), kind: ref.Kind, name: ref.Name,
			namespace: ptr.Deref(ref.Namespace, pvc.Namespace)}, true
	}
	if ref := pvc.Spec.DataSource; ref != nil {
		return dataRef{group: ptr.Deref(ref.APIGroup, ""), kind: ref.Kind, name: ref.Name, namespace: pvc.Namespace}, true
	}
	return dataRef{}, false
}

// provision makes the claim's backing file and PV. It returns nil while the data source is
// not ready.
func (s *Site) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) (*corev1.PersistentVolume, error) {
	size, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil, reconcile.TerminalError(fmt.Errorf("claim %s/%s requests no storage", pvc.Namespace, pvc.Name))
	}
	handle := volumeName(pvc)
	path := s.files.volume(handle)
	from, ok := dataSource(pvc)
	if !ok {
		if err := createSparse(path, size.Value()); err != nil {
			return nil, err
		}
	} else {
		src, err := s.sourceFile(ctx, pvc, from, class.Provisioner)
		if src == "" || err != nil {
			return nil, err
		}
		if err := checkFits(src, size, pvc); err != nil {
			return nil, err
		}
		corrupt := s.opts.CorruptClone != nil && s.opts.CorruptClone(pvc)
		if err := copySparse(src, path, size.Value(), corrupt); err != nil {
			return nil, err
		}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: handle, Annotations: map[string]string{annProvisionedBy: class.Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    pvc.Spec.VolumeMode,
			StorageClassName:              class.Name,
			MountOptions:                  class.MountOptions,
			PersistentVolumeReclaimPolicy: ptr.Deref(class.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete),
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: class.Provisioner, VolumeHandle: handle, VolumeAttributes: class.Parameters}},
		},
	}
	err := s.client.Create(ctx, pv)
	if apierrors.IsAlreadyExists(err) {
		err = s.client.Get(ctx, client.ObjectKeyFromObject(pv), pv)
	}
	if err != nil {
		return nil, fmt.Errorf("creating PersistentVolume %s: %w", pv.Name, err)
	}
	return pv, nil
}

// sourceFile finds the file a claim is restored or cloned from; "" while it is not ready.
func (s *Site) sourceFile(ctx context.Context, pvc *corev1.PersistentVolumeClaim, from dataRef, driver string) (string, error) {
	switch {
	case from.namespace != pvc.Namespace:
		return "", nil // cross-namespace sources are not supported: the claim stays pending
	case from.group == snapshotv1.GroupName && from.kind == "VolumeSnapshot":
		vs := &snapshotv1.VolumeSnapshot{}
		if err := s.client.Get(ctx, types.NamespacedName{Namespace: pvc.Namespace, Name: from.name}, vs); err != nil {
			return "", client.IgnoreNotFound(err)
		}
		// A restore is not started from a snapshot being deleted, as the external-provisioner
		// does; the pending claim keeps the snapshot from going.
		if vs.DeletionTimestamp != nil || vs.Status == nil || !ptr.Deref(vs.Status.ReadyToUse, false) || vs.Status.BoundVolumeSnapshotContentName == nil {
			return "", nil
		}
		content := &snapshotv1.VolumeSnapshotContent{}
		if err := s.client.Get(ctx, types.NamespacedName{Name: *vs.Status.BoundVolumeSnapshotContentName}, content); err != nil {
			return "", client.IgnoreNotFound(err)
		}
		if content.Spec.Driver != driver || content.Status == nil || content.Status.SnapshotHandle == nil {
			return "", nil
		}
		return s.files.snapshot(*content.Status.SnapshotHandle), nil
	case from.group == "" && from.kind == "PersistentVolumeClaim":
		src := &corev1.PersistentVolumeClaim{}
		if err := s.client.Get(ctx, types.NamespacedName{Namespace: pvc.Namespace, Name: from.name}, src); err != nil {
			return "", client.IgnoreNotFound(err)
		}
		if src.DeletionTimestamp != nil {
			return "", nil // the external-provisioner does not clone a claim being deleted
		}
		path, pv, err := s.boundFile(ctx, src)
		if path == "" || err != nil || pv.Spec.CSI.Driver != driver {
			return "", err
		}
		return path, nil
	}
	return "", nil // a volume populator's source: not the site's to fill
}

// checkFits refuses a claim smaller than its source, as CSI drivers do.
func checkFits(src string, size resource.Quantity, pvc *corev1.PersistentVolumeClaim) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	if info.Size() > size.Value() {
		return reconcile.TerminalError(fmt.Errorf("claim %s/%s requests %s, less than its source's %d bytes",
			pvc.Namespace, pvc.Name, size.String(), info.Size()))
	}
	return nil
}

// bind plays the PV controller: the volume already names the claim; the claim names the
// volume, then both say Bound. A WaitForFirstConsumer claim also records the selected node.
func (s *Site) bind(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, selectedNode string) error {
	before := pvc.DeepCopy()
	pvc.Spec.VolumeName = pv.Name
	if selectedNode != "" {
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, annSelectedNode, selectedNode)
	}
	metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, annBindCompleted, "yes")
	metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, annBoundByController, "yes")
	metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, annStorageProvisioner, pv.Spec.CSI.Driver)
	if err := ignoreGone(s.client.Patch(ctx, pvc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))); err != nil {
		return fmt.Errorf("binding claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return s.completeBinding(ctx, pvc)
}

// completeBinding writes the Bound status of a claim that names one of the site's volumes.
func (s *Site) completeBinding(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	pv := &corev1.PersistentVolume{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return nil // not a volume the site made for this claim
	}
	if pv.Status.Phase != corev1.VolumeBound {
		before := pv.DeepCopy()
		pv.Status.Phase = corev1.VolumeBound
		if err := ignoreGone(s.client.Status().Patch(ctx, pv, client.MergeFrom(before))); err != nil {
			return fmt.Errorf("marking PersistentVolume %s Bound: %w", pv.Name, err)
		}
	}
	if pvc.Status.Phase == corev1.ClaimBound {
		return nil
	}
	before := pvc.DeepCopy()
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.Capacity = pv.Spec.Capacity
	pvc.Status.AccessModes = pv.Spec.AccessModes
	if err := ignoreGone(s.client.Status().Patch(ctx, pvc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))); err != nil {
		return fmt.Errorf("marking claim %s/%s Bound: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}
