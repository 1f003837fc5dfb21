package vmvolumemigration

import (
	"context"
	"fmt"
	"slices"
	"strings"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/servedapis"
)

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// APIs are the third-party kinds migrations read and write: KubeVirt's and the CSI
// snapshot API. A cluster may lack them, or gain them after the operator started.
var APIs = servedapis.Kinds{
	virtv1.SchemeGroupVersion.WithKind("VirtualMachine"),
	virtv1.SchemeGroupVersion.WithKind("VirtualMachineInstance"),
	snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshot"),
	snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshotClass"),
}

// EventAPIsMissing is the Warning on a migration that waits for the APIs it needs.
const EventAPIsMissing = "APIsMissing"

// watchChildren starts the watches on the migrations' children and VMs, once. Their kinds
// must be served: a watch on a kind the API server lacks fails the controller's start after
// its cache sync timeout, so on a cluster without them the watches wait for the first
// reconcile that finds every API served.
func (r *Reconciler) watchChildren() error {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	if r.watching {
		return nil
	}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[LabelManagedBy] == ManagedBy && o.GetLabels()[LabelMigrationUID] != ""
	})
	byChild, byVM := handler.EnqueueRequestsFromMapFunc(r.byChildLabel), handler.EnqueueRequestsFromMapFunc(r.byVM)
	for _, src := range []source.Source{
		source.Kind[client.Object](r.cache, &batchv1.Job{}, byChild, ours),
		source.Kind[client.Object](r.cache, &corev1.PersistentVolumeClaim{}, byChild, ours),
		source.Kind[client.Object](r.cache, &snapshotv1.VolumeSnapshot{}, byChild, ours),
		source.Kind[client.Object](r.cache, &virtv1.VirtualMachine{}, byVM),
		source.Kind[client.Object](r.cache, &virtv1.VirtualMachineInstance{}, byVM),
	} {
		if err := r.controller.Watch(src); err != nil {
			return fmt.Errorf("watching %s: %w", src, err)
		}
	}
	r.watching = true
	return nil
}

// watchDefinitions wakes every migration when a CustomResourceDefinition of one of the APIs'
// groups changes: installed, established, deleted. Only a cluster that lacked an API when
// the operator started needs it.
func (r *Reconciler) watchDefinitions() error {
	groups := r.APIs.Groups()
	ofOurGroups := predicate.NewTypedPredicateFuncs(func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return slices.Contains(groups, crd.Spec.Group)
	})
	all := handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ *apiextensionsv1.CustomResourceDefinition) []reconcile.Request {
		return r.matching(ctx, metav1.NamespaceAll, func(*nwv1.VMVolumeMigration) bool { return true })
	})
	return r.controller.Watch(source.Kind(r.cache, &apiextensionsv1.CustomResourceDefinition{}, all, ofOurGroups))
}

// waitForAPIs holds a migration while the cluster lacks an API it needs. One that has not
// started says why, in its Succeeded condition and a Warning Event, and starts when the
// definitions' watch wakes it with every API served: no restart is needed. A deleted one
// that never started has nothing to undo and is let go. One that had started cannot go on
// or roll back without the APIs: it is retried, with the reason as its error.
func (r *Reconciler) waitForAPIs(ctx context.Context, m *nwv1.VMVolumeMigration, missing servedapis.Kinds) (ctrl.Result, error) {
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := r.Client.List(ctx, &crds); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the CustomResourceDefinitions: %w", err)
	}
	why := servedapis.Explain(missing, crds.Items)
	if !r.startedOnce(m) {
		if !m.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, r.patchFinalizers(ctx, m, func() { controllerutil.RemoveFinalizer(m, Finalizer) })
		}
		msg := "waiting to start: " + why.Message + "; the migration starts once they are served, without a restart of the operator"
		if err := r.setWaitingCondition(ctx, m, msg); err != nil {
			return ctrl.Result{}, err
		}
	}
	if why.CatchingUp || r.startedOnce(m) {
		// An error, so that the retries back off: discovery catches up within moments,
		// while a started migration waits for a person to put the APIs back.
		return ctrl.Result{}, fmt.Errorf("%s", why.Message)
	}
	return ctrl.Result{}, nil
}

// startedOnce: the migration left Pending, so its steps may have changed the VM.
func (r *Reconciler) startedOnce(m *nwv1.VMVolumeMigration) bool {
	return stateOf(m).Phase != nwv1.WorkflowPending
}

// setWaitingCondition writes the Succeeded condition of a migration held before its start,
// and a Warning Event when the reason is new.
func (r *Reconciler) setWaitingCondition(ctx context.Context, m *nwv1.VMVolumeMigration, msg string) error {
	base := m.DeepCopy()
	m.Status.Phase = nwv1.WorkflowPending
	changed := m.Status.Phase != base.Status.Phase
	changed = meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: nwv1.ConditionSucceeded, Status: metav1.ConditionUnknown, Reason: nwv1.ReasonAPIsMissing,
		Message: truncate(msg, 32768), ObservedGeneration: m.Generation,
	}) || changed
	if !changed {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	if r.Recorder != nil {
		r.Recorder.Event(m, corev1.EventTypeWarning, EventAPIsMissing, truncate(msg, 1024))
	}
	ctrl.LoggerFrom(ctx).Info("Migration waits for APIs", "reason", strings.TrimPrefix(msg, "waiting to start: "))
	return nil
}
