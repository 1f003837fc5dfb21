package site

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// KubeVirt's live migration: virt-controller's migration controller, which walks a
// VirtualMachineInstanceMigration through its phases, and the virt-handlers of the source and
// target nodes, which move the VMI. There is no target virt-launcher pod and no guest memory to
// copy: the target is the first of the site's nodes that fits (placeOn), and the move is the
// VMI's status.nodeName changing. Each phase is written on its own, so that a client watching
// the migration sees every one, in KubeVirt's order.

// eventSource is the component of the Events the site's KubeVirt records.
const eventSource = "virt-controller"

// The reasons of the Events KubeVirt records on a migration.
const (
	reasonFailedMigration     = "FailedMigration"
	reasonSuccessfulMigration = "SuccessfulMigration"
	reasonSuccessfulHandOver  = "SuccessfulHandOver"
	reasonTargetUnschedulable = "migrationTargetPodUnschedulable"
)

func (s *Site) setupMigrations() error {
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool { return s.inScope(o.GetNamespace()) })
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-migration").
		For(&virtv1.VirtualMachineInstanceMigration{}, builder.WithPredicates(inScope)).
		Watches(&virtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(s.migrationsOfVMI), builder.WithPredicates(inScope)).
		// A migration without a target waits for a node to fit.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(s.schedulingMigrations)).
		// A held migration goes on when its hold is released.
		WatchesRawSource(source.Channel(s.migrations.released, &handler.EnqueueRequestForObject{})).
		Complete(reconcile.Func(s.reconcileMigration))
}

func (s *Site) migrationsOfVMI(ctx context.Context, o client.Object) []reconcile.Request {
	list := &virtv1.VirtualMachineInstanceMigrationList{}
	if err := s.client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if m := &list.Items[i]; m.Spec.VMIName == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
		}
	}
	return out
}

func (s *Site) schedulingMigrations(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &virtv1.VirtualMachineInstanceMigrationList{}
	if err := s.client.List(ctx, list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if m := &list.Items[i]; s.inScope(m.Namespace) && m.Status.Phase == virtv1.MigrationScheduling {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
		}
	}
	return out
}

func (s *Site) reconcileMigration(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &virtv1.VirtualMachineInstanceMigration{}
	if err := s.client.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			s.migrations.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	vmi, err := s.getVMI(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName})
	if err != nil {
		return ctrl.Result{}, err
	}
	if m.IsFinal() {
		return ctrl.Result{}, s.finishMigration(ctx, m, vmi)
	}
	if m.DeletionTimestamp == nil && (!controllerutil.ContainsFinalizer(m, virtv1.VirtualMachineInstanceMigrationFinalizer) ||
		m.Labels[virtv1.MigrationSelectorLabel] != m.Spec.VMIName) {
		// virt-controller's finalizer keeps a deleted migration until it is aborted; the label
		// is the one KubeVirt selects a VMI's migrations by.
		controllerutil.AddFinalizer(m, virtv1.VirtualMachineInstanceMigrationFinalizer)
		metav1.SetMetaDataLabel(&m.ObjectMeta, virtv1.MigrationSelectorLabel, m.Spec.VMIName)
		return ctrl.Result{}, ignoreGone(s.client.Update(ctx, m))
	}

	next := m.DeepCopy()
	var requeue time.Duration
	handedOff := vmi != nil && vmi.Status.MigrationState != nil && vmi.Status.MigrationState.MigrationUID == m.UID
	switch {
	case vmi == nil:
		// The site's cache may not show yet a VMI that was just created: its event would come.
		live := &virtv1.VirtualMachineInstance{}
		if err := s.mgr.GetAPIReader().Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}, live); err == nil {
			return ctrl.Result{}, nil
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		s.failMigration(next, "Migration failed because vmi does not exist.")
	case vmi.IsFinal():
		s.failMigration(next, "Migration failed vmi shutdown during migration.")
	case m.DeletionTimestamp != nil && !handedOff:
		setAbortRequested(next)
		s.failMigration(next, "Migration failed due to being canceled")
	case m.TargetIsHandedOff() && !handedOff:
		s.failMigration(next, "VMI's migration state was cleared during the active migration.")
	case handedOff && vmi.Status.MigrationState.Failed:
		s.failMigration(next, "source node reported migration failed")
	case m.DeletionTimestamp != nil && !vmi.Status.MigrationState.Completed:
		setAbortRequested(next)
		if err := s.abortMigration(ctx, vmi); err != nil {
			return ctrl.Result{}, err
		}
	default:
		if requeue, err = s.advanceMigration(ctx, next, vmi); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := s.writeMigrationStatus(ctx, m, next); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// advanceMigration moves a migration of a live VMI one phase on, doing first what virt-handler
// does to the VMI for that phase. It returns when to look again at a migration that waits for
// time to pass.
func (s *Site) advanceMigration(ctx context.Context, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) (time.Duration, error) {
	switch m.Status.Phase {
	case virtv1.MigrationPhaseUnset:
		// KubeVirt's admission webhook refuses these two at creation; the site has none.
		conflict, err := s.migrationConflict(ctx, m)
		if err != nil {
			return 0, err
		}
		if conflict != "" {
			s.failMigration(m, conflict)
		} else if why := notMigratableReason(vmi); why != "" {
			s.failMigration(m, why)
		} else {
			setMigrationPhase(m, virtv1.MigrationPending)
		}
	case virtv1.MigrationPending:
		// The target pod is created once the VMI runs.
		if vmi.IsRunning() {
			if why := notMigratableReason(vmi); why != "" {
				s.failMigration(m, why)
			} else {
				setMigrationPhase(m, virtv1.MigrationScheduling)
			}
		}
	case virtv1.MigrationScheduling:
		return s.scheduleMigration(ctx, m, vmi)
	case virtv1.MigrationScheduled:
		// Once the VMI says it was handed this migration: the site's cache may not show it yet.
		if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID == m.UID && ms.TargetNode != "" {
			setMigrationPhase(m, virtv1.MigrationPreparingTarget)
		}
	case virtv1.MigrationPreparingTarget:
		// The target's virt-handler prepares the domain and says where to send it.
		if err := s.updateMigrationState(ctx, vmi, func(ms *virtv1.VirtualMachineInstanceMigrationState) {
			ms.TargetNodeAddress = siteIP
		}); err != nil {
			return 0, err
		}
		setMigrationPhase(m, virtv1.MigrationTargetReady)
	case virtv1.MigrationTargetReady:
		// The source's virt-handler starts the migration.
		if err := s.updateMigrationState(ctx, vmi, func(ms *virtv1.VirtualMachineInstanceMigrationState) {
			if ms.StartTimestamp == nil {
				ms.StartTimestamp = ptr.To(metav1.Now())
			}
			ms.Mode = virtv1.MigrationPreCopy
		}); err != nil {
			return 0, err
		}
		setMigrationPhase(m, virtv1.MigrationRunning)
	case virtv1.MigrationRunning:
		return 0, s.runMigration(ctx, m, vmi)
	}
	return 0, nil
}

// scheduleMigration is the scheduler's part for the target pod: the first of the site's nodes,
// not the VMI's, that fits the VMI's node selector with the migration's addedNodeSelector, its
// tolerations, and is Ready and not cordoned. Found, the migration is handed off to the VMI's
// virt-handlers: the VMI's migrationState names the source and target. Not found, the
// migration stays in Scheduling, as KubeVirt's does while its target pod is unschedulable, until
// the timeout (Options.MigrationUnschedulableTimeout or the migration's annotation), then fails.
func (s *Site) scheduleMigration(ctx context.Context, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) (time.Duration, error) {
	if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID == m.UID && ms.TargetNode != "" {
		setMigrationPhase(m, virtv1.MigrationScheduled) // handed off already
		return 0, nil
	}
	target, why, err := s.placeOn(ctx, mergeSelectors(vmi.Spec.NodeSelector, m.Spec.AddedNodeSelector), vmi.Spec.Tolerations, vmi.Status.NodeName)
	if err != nil {
		return 0, err
	}
	if target == "" {
		s.recorder.Eventf(m, corev1.EventTypeWarning, reasonTargetUnschedulable,
			"Migration target pod for VMI [%s/%s] is currently unschedulable.", vmi.Namespace, vmi.Name)
		waited := time.Since(phaseSince(m, virtv1.MigrationScheduling))
		timeout := s.unschedulableTimeout(m)
		if waited < timeout {
			return timeout - waited, nil
		}
		s.failMigration(m, fmt.Sprintf("Migration target pod was removed during active migration: "+
			"unschedulable pod timeout period exceeded (%s)", why))
		return 0, nil
	}
	vmi = vmi.DeepCopy()
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{
		MigrationUID: m.UID,
		SourceNode:   vmi.Status.NodeName,
		TargetNode:   target,
	}
	metav1.SetMetaDataLabel(&vmi.ObjectMeta, virtv1.MigrationTargetNodeNameLabel, target)
	if err := s.client.Update(ctx, vmi); err != nil {
		return 0, fmt.Errorf("handing migration %s/%s off to VirtualMachineInstance %s: %w", m.Namespace, m.Name, vmi.Name, err)
	}
	s.recorder.Event(m, corev1.EventTypeNormal, reasonSuccessfulHandOver, "Migration target pod is ready for preparation by virt-handler.")
	setMigrationPhase(m, virtv1.MigrationScheduled)
	return 0, nil
}

// runMigration is the virt-handlers' part while the migration runs: held by HoldMigration,
// failed by FailMigration, else done: the VMI runs on the target.
func (s *Site) runMigration(ctx context.Context, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) error {
	ms := vmi.Status.MigrationState
	if ms.Completed {
		s.recorder.Event(m, corev1.EventTypeNormal, reasonSuccessfulMigration, "Source node reported migration succeeded")
		setMigrationPhase(m, virtv1.MigrationSucceeded)
		return nil
	}
	if s.migrations.held(client.ObjectKeyFromObject(m), m.UID, vmi, s.opts.HoldMigration) {
		return nil
	}
	now := metav1.Now()
	if s.opts.FailMigration != nil && s.opts.FailMigration(vmi.DeepCopy()) {
		return s.updateMigrationState(ctx, vmi, func(ms *virtv1.VirtualMachineInstanceMigrationState) {
			ms.Failed = true
			ms.EndTimestamp = &now
			ms.FailureReason = "the site's FailMigration fault failed the migration"
		})
	}
	target := ms.TargetNode
	if err := s.updateVMI(ctx, vmi, func(vmi *virtv1.VirtualMachineInstance) {
		ms := vmi.Status.MigrationState
		ms.Completed = true
		ms.EndTimestamp = &now
		ms.TargetNodeDomainDetected = true
		ms.TargetNodeDomainReadyTimestamp = &now
		placeVMI(vmi, target)
		delete(vmi.Labels, virtv1.MigrationTargetNodeNameLabel)
	}); err != nil {
		return err
	}
	s.recorder.Event(m, corev1.EventTypeNormal, reasonSuccessfulMigration, "Source node reported migration succeeded")
	setMigrationPhase(m, virtv1.MigrationSucceeded)
	return nil
}

// abortMigration is virt-handler's abort of a migration that was handed off: the VMI stays on
// its source and its migrationState says the migration failed, aborted.
func (s *Site) abortMigration(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	now := metav1.Now()
	return s.updateMigrationState(ctx, vmi, func(ms *virtv1.VirtualMachineInstanceMigrationState) {
		ms.AbortRequested = true
		ms.AbortStatus = virtv1.MigrationAbortSucceeded
		ms.Failed = true
		ms.FailureReason = "Live migration aborted"
		if ms.EndTimestamp == nil {
			ms.EndTimestamp = &now
		}
	})
}

// finishMigration is what virt-controller does once a migration is over: it keeps the VMI's
// final migrationState on the migration and removes its finalizer.
func (s *Site) finishMigration(ctx context.Context, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) error {
	s.migrations.forget(client.ObjectKeyFromObject(m))
	if vmi != nil && vmi.Status.MigrationState != nil && vmi.Status.MigrationState.MigrationUID == m.UID {
		ms := vmi.Status.MigrationState
		if !ms.Completed && !ms.Failed && !vmi.IsFinal() {
			return nil // the site's cache does not show the VMI's end of it yet: its event comes
		}
		if ms.Completed || ms.Failed {
			// The target label goes once the migration is over, whichever way.
			if _, ok := vmi.Labels[virtv1.MigrationTargetNodeNameLabel]; ok {
				if err := s.updateVMI(ctx, vmi, func(vmi *virtv1.VirtualMachineInstance) {
					delete(vmi.Labels, virtv1.MigrationTargetNodeNameLabel)
				}); err != nil {
					return err
				}
			}
			if !equality.Semantic.DeepEqual(m.Status.MigrationState, ms) {
				next := m.DeepCopy()
				next.Status.MigrationState = ms.DeepCopy()
				return s.writeMigrationStatus(ctx, m, next)
			}
		}
	}
	if controllerutil.RemoveFinalizer(m, virtv1.VirtualMachineInstanceMigrationFinalizer) {
		return ignoreGone(s.client.Update(ctx, m))
	}
	return nil
}

// migrationConflict is why KubeVirt refuses a migration of a VMI that another one is moving,
// "" when there is none: another migration of the VMI is not over and has started, or is older.
// The migrations are read from the API server, not the site's cache, which may not show yet
// the end of one a client saw end.
func (s *Site) migrationConflict(ctx context.Context, m *virtv1.VirtualMachineInstanceMigration) (string, error) {
	list := &virtv1.VirtualMachineInstanceMigrationList{}
	if err := s.mgr.GetAPIReader().List(ctx, list, client.InNamespace(m.Namespace)); err != nil {
		return "", err
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == m.UID || o.Spec.VMIName != m.Spec.VMIName || o.IsFinal() {
			continue
		}
		older := o.CreationTimestamp.Before(&m.CreationTimestamp) ||
			o.CreationTimestamp.Equal(&m.CreationTimestamp) && o.Name < m.Name
		if o.Status.Phase != virtv1.MigrationPhaseUnset || older {
			return "VMI is not eligible for migration because another migration job is in progress.", nil
		}
	}
	return "", nil
}

// notMigratableReason is the refusal KubeVirt's admission webhook gives a migration of a VMI
// whose LiveMigratable condition is False, "" for a migratable one.
func notMigratableReason(vmi *virtv1.VirtualMachineInstance) string {
	for _, c := range vmi.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceIsMigratable && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("Cannot migrate VMI, Reason: %s, Message: %s", c.Reason, c.Message)
		}
	}
	return ""
}

// failMigration ends a migration in phase Failed and records why, as KubeVirt does, in a
// Warning Event.
func (s *Site) failMigration(m *virtv1.VirtualMachineInstanceMigration, why string) {
	s.recorder.Event(m, corev1.EventTypeWarning, reasonFailedMigration, why)
	setMigrationPhase(m, virtv1.MigrationFailed)
}

func setAbortRequested(m *virtv1.VirtualMachineInstanceMigration) {
	for _, c := range m.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceMigrationAbortRequested {
			return
		}
	}
	m.Status.Conditions = append(m.Status.Conditions, virtv1.VirtualMachineInstanceMigrationCondition{
		Type: virtv1.VirtualMachineInstanceMigrationAbortRequested, Status: corev1.ConditionTrue, LastProbeTime: metav1.Now(),
	})
}

// setMigrationPhase moves the migration to phase and stamps the transition.
func setMigrationPhase(m *virtv1.VirtualMachineInstanceMigration, phase virtv1.VirtualMachineInstanceMigrationPhase) {
	if m.Status.Phase == phase {
		return
	}
	m.Status.Phase = phase
	m.Status.PhaseTransitionTimestamps = append(m.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
}

// phaseSince is when the migration last entered phase; now if it never did.
func phaseSince(m *virtv1.VirtualMachineInstanceMigration, phase virtv1.VirtualMachineInstanceMigrationPhase) time.Time {
	for _, t := range slices.Backward(m.Status.PhaseTransitionTimestamps) {
		if t.Phase == phase {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return time.Now()
}

// unschedulableTimeout is how long the migration waits for a target node: its annotation's
// seconds, as in KubeVirt, else Options.MigrationUnschedulableTimeout.
func (s *Site) unschedulableTimeout(m *virtv1.VirtualMachineInstanceMigration) time.Duration {
	if v, ok := m.Annotations[virtv1.MigrationUnschedulablePodTimeoutSecondsAnnotation]; ok {
		if secs, err := strconv.Atoi(v); err == nil {
			return time.Duration(secs) * time.Second
		}
	}
	return s.opts.MigrationUnschedulableTimeout
}

func (s *Site) writeMigrationStatus(ctx context.Context, m, next *virtv1.VirtualMachineInstanceMigration) error {
	if equality.Semantic.DeepEqual(m.Status, next.Status) {
		return nil
	}
	if err := ignoreGone(s.client.Status().Update(ctx, next)); err != nil {
		return fmt.Errorf("writing the status of VirtualMachineInstanceMigration %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// updateMigrationState changes the VMI's migrationState as a virt-handler does.
func (s *Site) updateMigrationState(ctx context.Context, vmi *virtv1.VirtualMachineInstance, change func(*virtv1.VirtualMachineInstanceMigrationState)) error {
	return s.updateVMI(ctx, vmi, func(vmi *virtv1.VirtualMachineInstance) { change(vmi.Status.MigrationState) })
}

// mergeSelectors is a migration target's node selector: the VMI's, with the migration's
// addedNodeSelector for the keys the VMI does not set (KubeVirt keeps the VMI's values on a
// collision, so that a migration may restrict the VMI's placement but not bypass it).
func mergeSelectors(vmi, added map[string]string) map[string]string {
	out := maps.Clone(added)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, vmi)
	return out
}

// migrationHolds plays Options.HoldMigration: the hold of each migration that runs, asked once,
// and a wake-up for the migration when its hold is released.
type migrationHolds struct {
	mu       sync.Mutex
	holds    map[types.NamespacedName]hold
	released chan event.GenericEvent
	done     <-chan struct{} // the site stops
}

type hold struct {
	uid types.UID
	ch  <-chan struct{}
}

func newMigrationHolds() *migrationHolds {
	return &migrationHolds{holds: map[types.NamespacedName]hold{}, released: make(chan event.GenericEvent, 16)}
}

// held says whether the migration's hold keeps it running, asking hook for it the first time.
func (h *migrationHolds) held(key types.NamespacedName, uid types.UID, vmi *virtv1.VirtualMachineInstance,
	hook func(*virtv1.VirtualMachineInstance) <-chan struct{}) bool {
	if hook == nil {
		return false
	}
	h.mu.Lock()
	cur, ok := h.holds[key]
	if !ok || cur.uid != uid {
		cur = hold{uid: uid, ch: hook(vmi.DeepCopy())}
		h.holds[key] = cur
		if cur.ch != nil {
			go h.wake(key, cur.ch)
		}
	}
	h.mu.Unlock()
	if cur.ch == nil {
		return false
	}
	select {
	case <-cur.ch:
		return false
	default:
		return true
	}
}

// wake reconciles the migration once its hold is released.
func (h *migrationHolds) wake(key types.NamespacedName, ch <-chan struct{}) {
	select {
	case <-ch:
	case <-h.done:
		return
	}
	stub := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	select {
	case h.released <- event.GenericEvent{Object: stub}:
	case <-h.done:
	}
}

func (h *migrationHolds) forget(key types.NamespacedName) {
	h.mu.Lock()
	delete(h.holds, key)
	h.mu.Unlock()
}
