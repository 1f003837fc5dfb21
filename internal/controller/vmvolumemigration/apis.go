package vmvolumemigration

import (
	"context"
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
// snapshot API. A cluster may lack them, gain them after the operator started, or lose them.
var APIs = servedapis.Kinds{
	virtv1.SchemeGroupVersion.WithKind("VirtualMachine"),
	virtv1.SchemeGroupVersion.WithKind("VirtualMachineInstance"),
	snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshot"),
	snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshotClass"),
}

// NewAPITracker tracks APIs for mgr through discovery, asking again whenever a
// CustomResourceDefinition of their groups changes in mgr's cache. The cache runs on every
// replica, so the tracker is right for the admission webhooks too, not only on the leader.
func NewAPITracker(ctx context.Context, mgr ctrl.Manager) (*servedapis.Tracker, error) {
	d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("building the discovery client: %w", err)
	}
	t := servedapis.NewTracker(APIs, d)
	informer, err := mgr.GetCache().GetInformer(ctx, &apiextensionsv1.CustomResourceDefinition{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("watching CustomResourceDefinitions: %w", err)
	}
	return t, t.InvalidateOn(informer)
}

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
// groups changes: installed, established, deleted. The tracker is told first, so that the
// reconciles it causes ask discovery again.
func (r *Reconciler) watchDefinitions() error {
	ofOurGroups := predicate.NewTypedPredicateFuncs(r.APIs.Concerns)
	all := handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ *apiextensionsv1.CustomResourceDefinition) []reconcile.Request {
		r.APIs.Invalidate()
		return r.matching(ctx, metav1.NamespaceAll, func(*nwv1.VMVolumeMigration) bool { return true })
	})
	return r.controller.Watch(source.Kind(r.cache, &apiextensionsv1.CustomResourceDefinition{}, all, ofOurGroups))
}

// waitForAPIs holds a migration while the cluster lacks an API it needs; the definitions'
// watch wakes it when they change, without a restart of the operator.
//   - One that has not started waits, saying why in its Succeeded condition and a Warning
//     Event; deleted, it has nothing to undo and is let go.
//   - One that is running or rolling back can neither go on nor undo anything: its step says
//     why it waits.
//   - A finished one has nothing to do until its VM can be read again (to be released): a
//     deleted one keeps its finalizer until then.
func (r *Reconciler) waitForAPIs(ctx context.Context, m *nwv1.VMVolumeMigration, missing servedapis.Kinds) (ctrl.Result, error) {
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := r.Client.List(ctx, &crds); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the CustomResourceDefinitions: %w", err)
	}
	why := servedapis.Explain(missing, crds.Items)
	state := stateOf(m)
	var err error
	switch {
	case state.Phase == nwv1.WorkflowPending && !m.DeletionTimestamp.IsZero():
		return ctrl.Result{}, r.patchFinalizers(ctx, m, func() { controllerutil.RemoveFinalizer(m, Finalizer) })
	case state.Phase == nwv1.WorkflowPending:
		msg := "waiting to start: " + why.Message + "; the migration starts once they are served"
		err = r.writeWaiting(ctx, m, msg, func() bool {
			m.Status.Phase = nwv1.WorkflowPending
			return meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
				Type: nwv1.ConditionSucceeded, Status: metav1.ConditionUnknown, Reason: nwv1.ReasonAPIsMissing,
				Message: truncate(msg, 32768), ObservedGeneration: m.Generation,
			})
		})
	case state.Step != "" && (state.Phase == nwv1.WorkflowRunning || state.Phase == nwv1.WorkflowRollingBack):
		msg := "waiting: " + why.Message + "; the step goes on once they are served again"
		err = r.writeWaiting(ctx, m, msg, func() bool { return stepMessage(m, state.Step, msg) })
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if why.CatchingUp {
		// An error, so that the retries back off: discovery has the definitions in moments,
		// and no further change of theirs will wake the migration.
		return ctrl.Result{}, fmt.Errorf("waiting for discovery: %s", why.Message)
	}
	return ctrl.Result{}, nil
}

// writeWaiting applies change to the migration's status and, when it changed something,
// patches it and reports msg, why the migration waits, in a Warning Event and the log.
func (r *Reconciler) writeWaiting(ctx context.Context, m *nwv1.VMVolumeMigration, msg string, change func() bool) error {
	base := m.DeepCopy()
	if !change() && base.Status.Phase == m.Status.Phase {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	if r.Recorder != nil {
		r.Recorder.Event(m, corev1.EventTypeWarning, EventAPIsMissing, truncate(msg, 1024))
	}
	ctrl.LoggerFrom(ctx).Info("Migration waits for APIs the cluster does not serve", "migration", klog.KObj(m), "reason", msg)
	return nil
}
