package vmvolumemigration

import (
	"context"
	"fmt"
	"slices"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	"github.com/spectrocloud/nodewright/internal/workflow"
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

// watch starts, once each, the watches a reconcile needs: while an API is missing, on the
// CustomResourceDefinitions of the APIs' groups, to wake the migrations that wait; once every
// API is served, on the migrations' children and VMs. They start from a reconcile, after the
// controller: a watch registered before would hold the controller's start until its cache
// syncs, and fail it where the kind is not served. The definitions are watched only once a
// migration waits, so that a role that may not read them (an older chart's) costs nothing
// where every API is served.
func (r *Reconciler) watch(served bool) error {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	if !served {
		if !r.watchingDefinitions {
			if err := r.controller.Watch(r.definitionsSource()); err != nil {
				return fmt.Errorf("watching CustomResourceDefinitions: %w", err)
			}
			r.watchingDefinitions = true
		}
		return nil
	}
	if r.watchingChildren {
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
	r.watchingChildren = true
	return nil
}

// definitionsSource wakes every migration when a CustomResourceDefinition of one of the APIs'
// groups changes: installed, established, deleted.
func (r *Reconciler) definitionsSource() source.Source {
	groups := APIs.Groups()
	ofOurGroups := predicate.NewTypedPredicateFuncs(func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return slices.Contains(groups, crd.Spec.Group)
	})
	all := handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ *apiextensionsv1.CustomResourceDefinition) []reconcile.Request {
		return r.matching(ctx, metav1.NamespaceAll, func(*nwv1.VMVolumeMigration) bool { return true })
	})
	return source.Kind(r.cache, &apiextensionsv1.CustomResourceDefinition{}, all, ofOurGroups)
}

// explain says why the missing APIs are not served, from their definitions. It waits a
// bounded time for the definitions' cache, which a role without read access to them (an
// older chart's) never fills: the reason is then the missing kinds alone.
func (r *Reconciler) explain(ctx context.Context, missing servedapis.Kinds) servedapis.Explanation {
	ctx, cancel := context.WithTimeout(ctx, definitionsWait)
	defer cancel()
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := r.Client.List(ctx, &crds); err != nil {
		return servedapis.Explanation{Message: fmt.Sprintf("the API server does not serve %s (their CustomResourceDefinitions cannot be read: %v)", missing, err)}
	}
	return servedapis.Explain(missing, crds.Items)
}

// definitionsWait bounds explain's wait for the definitions' cache.
const definitionsWait = 30 * time.Second

// waitForAPIs holds a migration while the cluster lacks an API it needs; the definitions'
// watch wakes it when they change, without a restart of the operator.
//   - One that has not started waits, saying why in its Succeeded condition and a Warning
//     Event; deleted, it has nothing to undo and is let go.
//   - One that is running or rolling back can neither go on nor undo anything: its step says
//     why it waits.
//   - A finished one has nothing to do until its VM can be read again (to be released): a
//     deleted one keeps its finalizer until then.
func (r *Reconciler) waitForAPIs(ctx context.Context, m *nwv1.VMVolumeMigration, missing servedapis.Kinds) (ctrl.Result, error) {
	why := r.explain(ctx, missing)
	state := workflow.StateOf(&m.Status.WorkflowStatus, migration.PlanOf(m))
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
				Message: audit.Shorten(msg, 32768), ObservedGeneration: m.Generation,
			})
		})
	case state.Step != "" && state.Phase.Active():
		msg := "waiting: " + why.Message + "; the step goes on once they are served again"
		err = r.writeWaiting(ctx, m, msg, func() bool { return workflow.StepMessage(&m.Status.WorkflowStatus, state.Step, msg) })
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
		r.Recorder.Event(m, corev1.EventTypeWarning, EventAPIsMissing, audit.Shorten(msg, 1024))
	}
	ctrl.LoggerFrom(ctx).Info("Migration waits for APIs the cluster does not serve", "migration", klog.KObj(m), "reason", msg)
	return nil
}
