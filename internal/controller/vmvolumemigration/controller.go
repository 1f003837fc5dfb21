// Package vmvolumemigration is the controller of VMVolumeMigration: it moves one volume of a
// KubeVirt VM onto a new PVC, proves the copy exact with nodewright-copy, and brackets the
// change with snapshots, or rolls everything back. The steps and their order come from the
// pure state machine in internal/migration; this package observes the cluster, performs the
// one action the machine asks for, and records the outcome in status.steps, conditions,
// Events and the audit trail.
package vmvolumemigration

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmvolumemigrations,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmvolumemigrations/status,verbs=get;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmvolumemigrations/finalizers,verbs=update
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=subresources.kubevirt.io,resources=virtualmachineinstances/freeze;virtualmachineinstances/unfreeze,verbs=update
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshots,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshotclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Finalizer holds a migration until a running one is rolled back and the VM released.
const Finalizer = "nodewright.spectrocloud.com/migration"

// DefaultCopyImage is the image of the data Jobs unless the operator is told otherwise.
const DefaultCopyImage = "ghcr.io/spectrocloud/nodewright-copy:v0.1.0"

// Event reasons on VMVolumeMigration besides the transitions' (workflow.Event...).
const (
	// EventAPIsMissing: the migration waits for an API the cluster does not serve.
	EventAPIsMissing = "APIsMissing"
	// EventAuditRecordTooLong: the audit log refused a transition's record as too long for
	// one line of the trail; it was left out.
	EventAuditRecordTooLong = workflow.EventAuditRecordTooLong
)

// AuditLog receives the record of every transition; *audit.Log is one.
type AuditLog = audit.Appender

// Reconciler runs VMVolumeMigrations.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache where a stale or filtered read would mislead.
	APIReader client.Reader
	// Clientset calls KubeVirt's freeze subresource.
	Clientset kubernetes.Interface
	Recorder  record.EventRecorder
	Clock     clock.PassiveClock
	// CopyImage is the image with nodewright-copy that the data Jobs run.
	CopyImage string
	// Audit, when set, receives one record per transition; Actor is who the records say did it.
	Audit AuditLog
	Actor string
	// Discovery tells which APIs the cluster serves; one for the manager's API server when nil.
	Discovery servedapis.Discovery

	engine *engine.Engine[*nwv1.VMVolumeMigration]

	controller controller.Controller
	cache      cache.Cache
	// The watches watch starts once: on the APIs' definitions, on children and VMs.
	watchMu                               sync.Mutex
	watchingDefinitions, watchingChildren bool
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.CopyImage == "" {
		r.CopyImage = DefaultCopyImage
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Clientset == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		r.Clientset = cs
	}
	if r.Discovery == nil {
		d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("building the discovery client: %w", err)
		}
		r.Discovery = d
	}
	r.cache = mgr.GetCache()
	r.engine = &engine.Engine[*nwv1.VMVolumeMigration]{
		Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder, Clock: r.Clock,
		Kind: migration.Kind, Finalizer: Finalizer, Audit: r.Audit, Actor: r.Actor, Workflow: r,
	}
	c, err := r.engine.Setup(mgr, "vmvolumemigration", nil)
	if err != nil {
		return err
	}
	r.controller = c
	if missing, err := APIs.Missing(r.Discovery); err == nil && len(missing) > 0 {
		mgr.GetLogger().Info("VMVolumeMigrations wait for APIs the cluster does not serve; they start once these are installed", "missing", missing.String())
	}
	return nil
}

// byChildLabel maps a child to the migration whose UID it carries.
func (r *Reconciler) byChildLabel(ctx context.Context, o client.Object) []reconcile.Request {
	return r.matching(ctx, o.GetNamespace(), func(m *nwv1.VMVolumeMigration) bool {
		return string(m.UID) == o.GetLabels()[LabelMigrationUID]
	})
}

// byVM maps a VM or its VMI (same name) to the migrations of that VM.
func (r *Reconciler) byVM(ctx context.Context, o client.Object) []reconcile.Request {
	return r.matching(ctx, o.GetNamespace(), func(m *nwv1.VMVolumeMigration) bool { return m.Spec.VMName == o.GetName() })
}

func (r *Reconciler) matching(ctx context.Context, namespace string, match func(*nwv1.VMVolumeMigration) bool) []reconcile.Request {
	var list nwv1.VMVolumeMigrationList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if match(&list.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile advances one migration by at most one action (the workflow engine's loop).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.engine.Reconcile(ctx, req)
}

// The migration as the engine's workflow: New, NewList, Plan, Prepare, Act and Finish.

// New is an empty migration.
func (r *Reconciler) New() *nwv1.VMVolumeMigration { return &nwv1.VMVolumeMigration{} }

// NewList is an empty list of migrations.
func (r *Reconciler) NewList() client.ObjectList { return &nwv1.VMVolumeMigrationList{} }

// Plan is the migration's plan.
func (r *Reconciler) Plan(m *nwv1.VMVolumeMigration) workflow.Plan { return migration.PlanOf(m) }

// Prepare holds a migration while the cluster does not serve the APIs it needs, and starts
// the watches of those it does.
func (r *Reconciler) Prepare(ctx context.Context, m *nwv1.VMVolumeMigration) (bool, ctrl.Result, error) {
	missing, err := APIs.Missing(r.Discovery)
	if err != nil {
		return true, ctrl.Result{}, err
	}
	if err := r.watch(len(missing) == 0); err != nil {
		return true, ctrl.Result{}, err
	}
	if len(missing) > 0 {
		result, err := r.waitForAPIs(ctx, m, missing)
		return true, result, err
	}
	return false, ctrl.Result{}, nil
}

// Act performs the running step's action.
func (r *Reconciler) Act(ctx context.Context, run *engine.Run[*nwv1.VMVolumeMigration]) (engine.Outcome, error) {
	s, err := r.newScope(ctx, run)
	if err != nil {
		return engine.Outcome{}, err
	}
	return r.perform(ctx, s)
}

// Finish tidies up after a finished migration: the data Jobs and the snapshot view go, and
// the VM is released. A Failed migration keeps its hold on the VM, so that no other migration
// starts on a VM in an unknown state, until it is deleted.
func (r *Reconciler) Finish(ctx context.Context, run *engine.Run[*nwv1.VMVolumeMigration]) (engine.Outcome, error) {
	s, err := r.newScope(ctx, run)
	if err != nil {
		return engine.Outcome{}, err
	}
	gone, err := r.deleteEphemeral(ctx, s)
	if err != nil || !gone {
		return engine.Outcome{Message: "removing the data Jobs"}, err
	}
	switch {
	case s.vm == nil:
	case s.State.Phase != nwv1.WorkflowFailed:
		if err := unlockVM(ctx, r.Client, s.vm, s.m); err != nil {
			return engine.Outcome{}, err
		}
	case run.Deleting:
		if err := keepFailedRecord(ctx, r.Client, s.vm, s.m); err != nil {
			return engine.Outcome{}, err
		}
	}
	return engine.Outcome{Release: run.Deleting && controllerutil.ContainsFinalizer(s.m, Finalizer)}, nil
}

func (r *Reconciler) patchFinalizers(ctx context.Context, m *nwv1.VMVolumeMigration, change func()) error {
	base := m.DeepCopy()
	change()
	err := r.Client.Patch(ctx, m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// scope is one reconcile's view of a migration and its VM.
type scope struct {
	*engine.Run[*nwv1.VMVolumeMigration]
	m    *nwv1.VMVolumeMigration
	plan migration.Plan
	vm   *virtv1.VirtualMachine
	vmi  *virtv1.VirtualMachineInstance
	// rec is the VM's migration record when this migration holds the VM.
	rec *vmRecord
}

func (r *Reconciler) newScope(ctx context.Context, run *engine.Run[*nwv1.VMVolumeMigration]) (*scope, error) {
	m := run.Object
	s := &scope{Run: run, m: m, plan: migration.PlanOf(m)}
	key := client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.VMName}
	vm := &virtv1.VirtualMachine{}
	if err := r.Client.Get(ctx, key, vm); err == nil {
		s.vm = vm
		// A record that does not parse is no one's: Validate refuses the VM with the reason.
		if rec, err := migration.RecordOf(vm); err == nil && rec.HeldBy(m) {
			s.rec = rec
		}
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	vmi := &virtv1.VirtualMachineInstance{}
	if err := r.Client.Get(ctx, key, vmi); err == nil {
		s.vmi = vmi
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	return s, nil
}
