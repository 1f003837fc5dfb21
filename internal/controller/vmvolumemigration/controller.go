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
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
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
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmvolumemigrations,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmvolumemigrations/status,verbs=get;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmvolumemigrations/finalizers,verbs=update
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=subresources.kubevirt.io,resources=virtualmachineinstances/freeze;virtualmachineinstances/unfreeze,verbs=update
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
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
	EventAuditRecordTooLong = "AuditRecordTooLong"
)

// AuditLog receives the record of every transition; *audit.Log is one.
type AuditLog = audit.Appender

// Reconciler runs VMVolumeMigrations.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache where a stale or filtered read would mislead.
	APIReader client.Reader
	// Clientset reads the data Jobs' logs (progress) and calls KubeVirt's freeze subresource.
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

	audited auditProgress

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
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named("vmvolumemigration").
		For(&nwv1.VMVolumeMigration{}).
		Build(r)
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

// Reconcile advances one migration by at most one transition.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &nwv1.VMVolumeMigration{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if m.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(m, Finalizer) {
		return ctrl.Result{}, r.patchFinalizers(ctx, m, func() { controllerutil.AddFinalizer(m, Finalizer) })
	}
	missing, err := APIs.Missing(r.Discovery)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.watch(len(missing) == 0); err != nil {
		return ctrl.Result{}, err
	}
	if len(missing) > 0 {
		return r.waitForAPIs(ctx, m, missing)
	}
	base := m.DeepCopy()
	s, err := r.newScope(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}

	var result ctrl.Result
	var from, to migration.State
	out, err := r.advance(ctx, s)
	if err == nil && out.event != "" {
		from = s.state
		to, err = s.plan.Next(s.state, out.event)
		if err == nil {
			transition(m, s.plan, from, to, out.event, out.message, out.skipped, s.now)
		}
	} else if s.state.Phase.Active() && s.state.Step != "" {
		msg := out.message
		if err != nil {
			msg = "retrying after an error: " + err.Error()
		}
		stepMessage(m, s.state.Step, msg)
		result.RequeueAfter = out.wait
	} else if err == nil {
		result.RequeueAfter = out.wait
	}
	if err == nil {
		m.Status.ObservedGeneration = m.Generation
	}
	if !equality.Semantic.DeepEqual(base.Status, m.Status) {
		if perr := r.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); perr != nil {
			return ctrl.Result{}, perr
		}
	}
	r.recordTransitions(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if out.event != "" {
		r.announce(ctx, m, from, to, out)
		return ctrl.Result{}, nil
	}
	if out.release {
		r.audited.forget(m.UID)
		return ctrl.Result{}, r.patchFinalizers(ctx, m, func() { controllerutil.RemoveFinalizer(m, Finalizer) })
	}
	return result, nil
}

// advance decides what happens now: a start, a cancel, the current step's action, or the
// housekeeping of a finished migration.
func (r *Reconciler) advance(ctx context.Context, s *scope) (outcome, error) {
	m := s.m
	deleting := !m.DeletionTimestamp.IsZero()
	switch phase := s.state.Phase; {
	case phase == nwv1.WorkflowPending && deleting:
		return outcome{release: controllerutil.ContainsFinalizer(m, Finalizer)}, nil
	case phase == nwv1.WorkflowPending:
		return outcome{event: migration.Start, message: "started"}, nil
	case phase == nwv1.WorkflowRunning && deleting && !s.plan.Irreversible(s.state.Step):
		// A step past undoing finishes first; the machine would keep it running anyway.
		return outcome{event: migration.Cancel}, nil
	case phase.Finished():
		return r.finish(ctx, s, deleting)
	}
	return r.act(ctx, s)
}

// finish tidies up after a finished migration: the data Jobs and the snapshot view go, and
// the VM is released. A Failed migration keeps its hold on the VM, so that no other migration
// starts on a VM in an unknown state, until it is deleted.
func (r *Reconciler) finish(ctx context.Context, s *scope, deleting bool) (outcome, error) {
	gone, err := r.deleteEphemeral(ctx, s)
	if err != nil || !gone {
		return outcome{message: "removing the data Jobs"}, err
	}
	switch {
	case s.vm == nil:
	case s.state.Phase != nwv1.WorkflowFailed:
		if err := unlockVM(ctx, r.Client, s.vm, s.m); err != nil {
			return outcome{}, err
		}
	case deleting:
		if err := keepFailedRecord(ctx, r.Client, s.vm, s.m); err != nil {
			return outcome{}, err
		}
	}
	return outcome{release: deleting && controllerutil.ContainsFinalizer(s.m, Finalizer)}, nil
}

// announce reports a transition: an Event and a log line. Its audit record is written by
// recordTransitions, from the status.
func (r *Reconciler) announce(ctx context.Context, m *nwv1.VMVolumeMigration, from, to migration.State, out outcome) {
	log := ctrl.LoggerFrom(ctx)
	log.Info("Migration transition", "migration", klog.KObj(m), "from", from.String(), "to", to.String(), "event", out.event, "message", out.message)
	if r.Recorder != nil {
		workflow.RecordTransition(r.Recorder, m, &m.Status.WorkflowStatus, migration.Kind, from, to, out.event, out.message, out.skipped)
	}
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

// outcome is what a step's action observed: an event for the machine, or nothing yet (the
// step waits, with a message saying for what, for a watch event or until wait has passed).
type outcome struct {
	event   migration.Event
	message string
	skipped bool
	wait    time.Duration
	// release: the finalizer may go.
	release bool
}

func succeeded(format string, args ...any) outcome {
	return outcome{event: migration.StepSucceeded, message: fmt.Sprintf(format, args...)}
}

func skipped(format string, args ...any) outcome {
	return outcome{event: migration.StepSucceeded, skipped: true, message: fmt.Sprintf(format, args...)}
}

func failed(format string, args ...any) outcome {
	return outcome{event: migration.StepFailed, message: fmt.Sprintf(format, args...)}
}

func waiting(after time.Duration, format string, args ...any) outcome {
	return outcome{message: fmt.Sprintf(format, args...), wait: after}
}

// scope is one reconcile's view of a migration and its VM.
type scope struct {
	m     *nwv1.VMVolumeMigration
	plan  migration.Plan
	state migration.State
	now   metav1.Time
	vm    *virtv1.VirtualMachine
	vmi   *virtv1.VirtualMachineInstance
	// rec is the VM's migration record when this migration holds the VM.
	rec *vmRecord
}

func (r *Reconciler) newScope(ctx context.Context, m *nwv1.VMVolumeMigration) (*scope, error) {
	s := &scope{m: m, plan: planOf(m), state: stateOf(m), now: metav1.NewTime(r.Clock.Now())}
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

// stepStarted is when the running step began (now, when the status does not say).
func (s *scope) stepStarted() time.Time {
	if started, ok := workflow.StepStarted(&s.m.Status.WorkflowStatus, s.state.Step); ok {
		return started.Time
	}
	return s.now.Time
}

// deadline reports whether the running step has taken longer than limit, and how long is
// left otherwise.
func (s *scope) deadline(limit time.Duration) (passed bool, left time.Duration) {
	left = s.stepStarted().Add(limit).Sub(s.now.Time)
	return left <= 0, left
}
