// Package vmvolumemigration is the controller of VMVolumeMigration: it moves one volume of a
// KubeVirt VM onto a new PVC, proves the copy exact with nodewright-copy, and brackets the
// change with snapshots, or rolls everything back. The steps and their order come from the
// pure state machine in internal/migration; this package observes the cluster, performs the
// one action the machine asks for, and records the outcome in status.steps, conditions,
// Events and the audit trail.
package vmvolumemigration

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
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

// DefaultCopyImage is the image of the data Jobs unless the operator is told otherwise.
const DefaultCopyImage = "ghcr.io/spectrocloud/nodewright-copy:v0.1.0"

// APIs are the third-party kinds migrations read and write (migration.Descriptor.APIs).
var APIs = migration.Descriptor.APIs

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
	engine.Deps
	Client client.Client
	// APIReader reads past the cache where a stale or filtered read would mislead.
	APIReader client.Reader
	// Clientset calls KubeVirt's freeze subresource.
	Clientset kubernetes.Interface
	// CopyImage is the image with nodewright-copy that the data Jobs run.
	CopyImage string

	engine *engine.Engine[*nwv1.VMVolumeMigration]
}

// SetupWithManager registers the controller. The migration's children and VMs are watched
// once the cluster serves the APIs it needs (migration.Descriptor.APIs): until then its
// migrations wait, saying why, and admission refuses new ones.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.CopyImage == "" {
		r.CopyImage = DefaultCopyImage
	}
	if r.Clientset == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		r.Clientset = cs
	}
	e, err := engine.Start(mgr, migration.Descriptor, r, &r.Deps, &r.Client, &r.APIReader)
	r.engine = e
	return err
}

// SourcesOnceServed wakes the migrations of a VM when it or its VMI (same name) changes.
func (r *Reconciler) SourcesOnceServed(c cache.Cache) []source.Source {
	byVM := handler.EnqueueRequestsFromMapFunc(r.byVM)
	return []source.Source{
		source.Kind[client.Object](c, &virtv1.VirtualMachine{}, byVM),
		source.Kind[client.Object](c, &virtv1.VirtualMachineInstance{}, byVM),
	}
}

// byVM maps a VM or its VMI (same name) to the migrations of that VM.
func (r *Reconciler) byVM(ctx context.Context, o client.Object) []reconcile.Request {
	var list nwv1.VMVolumeMigrationList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Spec.VMName == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile advances one migration by at most one action (the workflow engine's loop).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.engine.Reconcile(ctx, req)
}

// Finish tidies up after a finished migration: the data Jobs and the snapshot view go, and
// the VM is released. A Failed migration keeps its hold on the VM, so that no other migration
// starts on a VM in an unknown state, until it is deleted.
func (r *Reconciler) Finish(ctx context.Context, run *engine.Run[*nwv1.VMVolumeMigration]) (engine.Finished, error) {
	s, err := r.newScope(ctx, run)
	if err != nil {
		return engine.Finished{}, err
	}
	gone, err := r.deleteEphemeral(ctx, s)
	if err != nil || !gone {
		return engine.Tidying(0, "removing the data Jobs"), err
	}
	switch {
	case s.vm == nil:
		return engine.Tidied("the data Jobs are gone; VirtualMachine %s no longer exists", s.m.Spec.VMName), nil
	case s.State.Phase != nwv1.WorkflowFailed:
		if err := unlockVM(ctx, r.Client, s.vm, s.m); err != nil {
			return engine.Finished{}, err
		}
		return engine.Tidied("the data Jobs are gone and VirtualMachine %s is released", s.m.Spec.VMName), nil
	case run.Deleting:
		if err := keepFailedRecord(ctx, r.Client, s.vm, s.m); err != nil {
			return engine.Finished{}, err
		}
		return engine.Tidied("the data Jobs are gone; VirtualMachine %s keeps the failed migration's record", s.m.Spec.VMName), nil
	}
	return engine.Tidied("the data Jobs are gone; VirtualMachine %s stays held by the failed migration until it is deleted", s.m.Spec.VMName), nil
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
