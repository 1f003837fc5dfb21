// Package vmoperationrequest runs VMOperationRequests (docs/selfservice.md): a VM owner's
// snapshot now, restore or restart of one of their VMs.
//
// A request waits, and says why in its status, until every gate allows it: the
// SelfServicePolicy's approval, maintenance window, rate and the namespace's queue
// (selfservice.Gates), and no cluster-wide workflow holding the cluster: node work pre-empts
// it, and it never takes or delays the cluster-wide claim. Before it starts, the controller
// asks the API server again, by SubjectAccessReview as the requester, whether they may do it,
// and reads the VM and snapshot again (selfservice.Subject).
//
// A started request moves in steps, each written to its status before it acts, so that an
// operator killed at any point goes on where it stopped: a Restore stops the VM (its run
// strategy Halted, the one it had kept in status.runStrategy), makes a VirtualMachineRestore
// and waits for it, and gives the VM its run strategy back; a Restart stops the VM and starts
// it again; a SnapshotNow makes a VirtualMachineSnapshot and waits until it is judged. A
// finalizer keeps a started request until it ends: deleting it does not leave a VM stopped.
package vmoperationrequest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/selfservice"
	"github.com/spectrocloud/nodewright/internal/storage"
	"github.com/spectrocloud/nodewright/internal/text"
	"github.com/spectrocloud/nodewright/internal/vmrun"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmoperationrequests,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmoperationrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=selfservicepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=snapshot.kubevirt.io,resources=virtualmachinerestores,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=snapshot.kubevirt.io,resources=virtualmachinesnapshots,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// A MigrateVolume's VMVolumeMigration, which the migration's own admission and controller check
// and run as any other.
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmvolumemigrations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Finalizer keeps a started request until it ends.
const Finalizer = "nodewright.spectrocloud.com/vm-operation"

// AuditAction is the audit action of a request's transitions.
const AuditAction = "VMOperation"

// The reasons of the request's Events and conditions.
const (
	ReasonWaiting      = "Waiting"
	ReasonStarted      = "Started"
	ReasonSucceeded    = "Succeeded"
	ReasonFailed       = "Failed"
	ReasonRefused      = "Refused"
	ReasonAllowed      = "Allowed"
	ReasonDenied       = "Denied"
	ReasonNotRequired  = "NotRequired"
	ReasonAwaiting     = "AwaitingApproval"
	ReasonApproved     = "Approved"
	ReasonStepFinished = "StepFinished"
)

// The waits: how often a running request looks again, how often a waiting one does at most
// (a watched change wakes it sooner), and how long a stopped VM may take to go and a started
// one to run before the request fails.
const (
	runPoll      = 2 * time.Second
	waitPoll     = 30 * time.Second
	vmDeadline   = 10 * time.Minute
	restoreLimit = 30 * time.Minute
)

// Reconciler runs VMOperationRequests.
type Reconciler struct {
	// Client reads the requests and the policy from the cache, and writes.
	Client client.Client
	// APIReader reads KubeVirt's objects, the namespace's queue and the cluster-wide claim
	// past the cache: a decision to start is taken on what the API server holds now.
	APIReader client.Reader
	Recorder  record.EventRecorder
	// Audit receives the records of each request's start and end; Actor is the operator.
	Audit audit.Appender
	Actor string
	// LockNamespace is where the cluster-wide workflows keep their claim (engine.HolderOf).
	LockNamespace string
	Clock         clock.PassiveClock
}

// SetupWithManager registers the controller. A change of the SelfServicePolicy looks at every
// unfinished request again. The cluster-wide claim is not watched (that needs list and watch
// of Leases in its namespace, which a role granted only with the agents has): a waiting
// request reads it again at least every waitPoll.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).Named("vmoperationrequest").For(&nwv1.VMOperationRequest{}).
		Watches(&nwv1.SelfServicePolicy{}, handler.EnqueueRequestsFromMapFunc(r.unfinished)).
		Complete(r)
}

// unfinished are the requests that have not ended.
func (r *Reconciler) unfinished(ctx context.Context, _ client.Object) []reconcile.Request {
	var list nwv1.VMOperationRequestList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if selfservice.Unfinished(list.Items[i].Status.Phase) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile moves the request on by one decision or one step, and writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	o := &nwv1.VMOperationRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, o); apierrors.IsNotFound(err) {
		return ctrl.Result{}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if !selfservice.Unfinished(o.Status.Phase) {
		return ctrl.Result{}, r.release(ctx, o)
	}
	if o.DeletionTimestamp != nil && o.Status.Phase != nwv1.VMOperationRunning {
		return ctrl.Result{}, r.release(ctx, o)
	}
	before := o.DeepCopy()
	now := r.Clock.Now().Truncate(time.Second)
	var res ctrl.Result
	var err error
	var records []audit.Record
	if o.Status.Phase == nwv1.VMOperationRunning {
		res, records, err = r.step(ctx, o, now)
	} else {
		res, records, err = r.decide(ctx, o, now)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	o.Status.ObservedGeneration = o.Generation
	// The records go in before the status that shows what they record.
	if r.Audit != nil && len(records) > 0 {
		if _, err := r.Audit.Append(ctx, records...); err != nil {
			return ctrl.Result{}, fmt.Errorf("recording the request in the audit trail: %w", err)
		}
	}
	if !equality.Semantic.DeepEqual(before.Status, o.Status) {
		// With the resourceVersion read: a stale read never writes over a newer status, and a
		// step is never taken twice on one.
		if err := r.Client.Status().Patch(ctx, o, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !selfservice.Unfinished(o.Status.Phase) {
		return ctrl.Result{}, r.release(ctx, o)
	}
	return res, nil
}

// release drops the finalizer of a request that ended or never started.
func (r *Reconciler) release(ctx context.Context, o *nwv1.VMOperationRequest) error {
	if !controllerutil.ContainsFinalizer(o, Finalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(o, Finalizer)
	return r.Client.Patch(ctx, o, patch)
}

// decide weighs whether a request that has not started may, and starts it. The gates come
// first: a request held by them waits, whatever happens to its VM meanwhile (node work may stop
// it). Once nothing holds it, the API server is asked again whether the requester may, and the
// VM and snapshot are read again; a no refuses it.
func (r *Reconciler) decide(ctx context.Context, o *nwv1.VMOperationRequest, now time.Time) (ctrl.Result, []audit.Record, error) {
	if o.Status.Phase == "" {
		o.Status.Phase = nwv1.VMOperationPending
	}
	if o.Spec.Requester == nil || o.Spec.Requester.Username == "" || o.Spec.Requester.Username != o.Annotations[nwv1.AnnotationRequestedBy] {
		return r.refuse(o, now, "spec.requester: not written by Nodewright's admission webhook (it must name the user in the "+nwv1.AnnotationRequestedBy+
			" annotation): the request was not admitted by it, and is not run", nil)
	}
	policy := &nwv1.SelfServicePolicy{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: nwv1.SelfServicePolicyName}, policy); apierrors.IsNotFound(err) {
		policy = nil
	} else if err != nil {
		return ctrl.Result{}, nil, err
	}
	ns := &corev1.Namespace{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: o.Namespace}, ns); err != nil {
		return ctrl.Result{}, nil, err
	}
	rules, why := selfservice.Offered(policy, o.Spec.Operation, o.Namespace, ns.Labels)
	if rules == nil {
		return r.refuse(o, now, why, nil)
	}
	if why := selfservice.Permits(rules, o); why != "" {
		return r.refuse(o, now, why, nil)
	}
	var reqs nwv1.VMOperationRequestList
	if err := r.APIReader.List(ctx, &reqs, client.InNamespace(o.Namespace)); err != nil {
		return ctrl.Result{}, nil, err
	}
	hold, err := selfservice.Gates(o, rules, reqs.Items, now)
	if err != nil {
		return r.refuse(o, now, err.Error(), nil)
	}
	if r.LockNamespace != "" {
		h, err := engine.HolderOf(ctx, r.APIReader, r.LockNamespace)
		if err != nil {
			return ctrl.Result{}, nil, fmt.Errorf("reading the cluster-wide workflows' claim: %w", err)
		}
		if h != nil && h.Phase != nwv1.WorkflowFailed {
			hold.Blockers = append(hold.Blockers, fmt.Sprintf("%s %s holds the cluster (node work comes first); the request starts when it ends", h.Kind, h.Name))
		}
	}
	st := &o.Status
	st.Approval, st.ApprovedBy, st.Window, st.QueuePosition = hold.Approval, hold.ApprovedBy, hold.Window, hold.Position
	st.NextWindowStart = nil
	if hold.NextWindowStart != nil {
		st.NextWindowStart = ptr.To(metav1.NewTime(*hold.NextWindowStart))
	}
	switch hold.Approval {
	case nwv1.ApprovalRequired:
		r.condition(o, nwv1.ConditionApproved, metav1.ConditionFalse, ReasonAwaiting, "SelfServicePolicy "+nwv1.SelfServicePolicyName+" asks an administrator to approve "+string(o.Spec.Operation))
	case nwv1.ApprovalGiven:
		r.condition(o, nwv1.ConditionApproved, metav1.ConditionTrue, ReasonApproved, "approved by "+hold.ApprovedBy)
	default:
		r.condition(o, nwv1.ConditionApproved, metav1.ConditionTrue, ReasonNotRequired, "SelfServicePolicy "+nwv1.SelfServicePolicyName+" needs no approval of "+string(o.Spec.Operation))
	}
	if len(hold.Blockers) > 0 {
		if len(hold.Blockers) > 8 {
			hold.Blockers = hold.Blockers[:8]
		}
		for i := range hold.Blockers {
			hold.Blockers[i] = text.Shorten(hold.Blockers[i], 1024)
		}
		if st.Phase != nwv1.VMOperationWaiting || strings.Join(st.BlockedBy, "\n") != strings.Join(hold.Blockers, "\n") {
			r.event(o, corev1.EventTypeNormal, ReasonWaiting, "waiting: "+strings.Join(hold.Blockers, "; "))
		}
		st.Phase, st.BlockedBy = nwv1.VMOperationWaiting, hold.Blockers
		st.Message = "waiting: " + text.Shorten(strings.Join(hold.Blockers, "; "), 1800)
		after := waitPoll
		if !hold.Retry.IsZero() && hold.Retry.Sub(now) < after {
			after = max(hold.Retry.Sub(now)+time.Second, time.Second)
		}
		return ctrl.Result{RequeueAfter: after}, nil, nil
	}
	checks, err := selfservice.Checks(o.Spec.Operation, o.Namespace, o.Spec.VM)
	if err != nil {
		return r.refuse(o, now, err.Error(), nil)
	}
	decisions, err := selfservice.Authorize(ctx, r.Client, *o.Spec.Requester, checks)
	if err != nil {
		return ctrl.Result{}, nil, err
	}
	if d := selfservice.Denied(decisions); d != nil {
		r.condition(o, nwv1.ConditionAuthorized, metav1.ConditionFalse, ReasonDenied, selfservice.Summary(decisions))
		return r.refuse(o, now, fmt.Sprintf("%s may no longer %s on VirtualMachine %s: the API server denied %s", o.Spec.Requester.Username, o.Spec.Operation, o.Spec.VM, d.Check), decisions)
	}
	r.condition(o, nwv1.ConditionAuthorized, metav1.ConditionTrue, ReasonAllowed, selfservice.Summary(decisions))
	vm, _, err := selfservice.Subject(ctx, r.APIReader, o, now)
	var refusal selfservice.Refusal
	if errors.As(err, &refusal) {
		return r.refuse(o, now, refusal.Message, decisions)
	} else if err != nil {
		return ctrl.Result{}, nil, err
	}
	return r.start(ctx, o, vm, now, decisions)
}

// start marks the request Running at its first step, with what it must give back, and holds
// it with the finalizer: nothing is done to the VM before both are stored.
func (r *Reconciler) start(ctx context.Context, o *nwv1.VMOperationRequest, vm *virtv1.VirtualMachine, now time.Time, decisions []selfservice.Decision) (ctrl.Result, []audit.Record, error) {
	if !controllerutil.ContainsFinalizer(o, Finalizer) {
		patch := client.MergeFromWithOptions(o.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(o, Finalizer)
		status := o.Status
		if err := r.Client.Patch(ctx, o, patch); err != nil {
			return ctrl.Result{}, nil, err
		}
		o.Status = status
	}
	st := &o.Status
	from := string(st.Phase)
	st.Phase, st.StartTime, st.BlockedBy, st.QueuePosition, st.NextWindowStart = nwv1.VMOperationRunning, ptr.To(metav1.NewTime(now)), nil, 0, nil
	st.VMUID = string(vm.UID)
	switch o.Spec.Operation {
	case nwv1.VMSnapshotNow:
		st.Step = nwv1.StepSnapshotVM
	case nwv1.VMMigrateVolume:
		st.Step = nwv1.StepMigrateVolume
	case nwv1.VMRestore, nwv1.VMRestart:
		strategy, err := vm.RunStrategy()
		if err != nil {
			return r.refuse(o, now, fmt.Sprintf("spec.vm: VirtualMachine %s: %v", vm.Name, err), decisions)
		}
		st.Step, st.RunStrategy = nwv1.StepStopVM, string(strategy)
		if o.Spec.Operation == nwv1.VMRestart {
			vmi := &virtv1.VirtualMachineInstance{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
				return ctrl.Result{}, nil, err
			}
			st.RestartedVMI = string(vmi.UID)
		}
	}
	st.Message = "started: " + stepText(o)
	details := []audit.Detail{{Name: "vm", Value: o.Spec.VM}, {Name: "requestedBy", Value: o.Spec.Requester.Username}}
	for i, d := range decisions {
		details = append(details, audit.Detail{Name: fmt.Sprintf("accessCheck%d", i+1), Value: d.String()})
	}
	if st.ApprovedBy != "" {
		details = append(details, audit.Detail{Name: "approvedBy", Value: st.ApprovedBy})
	}
	if o.Spec.Reason != "" {
		details = append(details, audit.Detail{Name: "reason", Value: o.Spec.Reason})
	}
	r.event(o, corev1.EventTypeNormal, ReasonStarted, st.Message)
	return ctrl.Result{RequeueAfter: time.Millisecond}, []audit.Record{r.record(o, from, string(nwv1.VMOperationRunning), ReasonStarted, st.Message, now, details...)}, nil
}

// refuse ends a request that was not started: nothing was done.
func (r *Reconciler) refuse(o *nwv1.VMOperationRequest, now time.Time, why string, decisions []selfservice.Decision) (ctrl.Result, []audit.Record, error) {
	from := string(o.Status.Phase)
	st := &o.Status
	st.Phase, st.CompletionTime, st.BlockedBy, st.QueuePosition, st.NextWindowStart = nwv1.VMOperationRefused, ptr.To(metav1.NewTime(now)), nil, 0, nil
	st.Message = text.Shorten("refused, nothing done: "+why, 2000)
	r.event(o, corev1.EventTypeWarning, ReasonRefused, st.Message)
	var details []audit.Detail
	for i, d := range decisions {
		details = append(details, audit.Detail{Name: fmt.Sprintf("accessCheck%d", i+1), Value: d.String()})
	}
	return ctrl.Result{}, []audit.Record{r.record(o, from, string(nwv1.VMOperationRefused), ReasonRefused, st.Message, now, details...)}, nil
}

// end ends a started request.
func (r *Reconciler) end(o *nwv1.VMOperationRequest, now time.Time, phase nwv1.VMOperationPhase, msg string) (ctrl.Result, []audit.Record, error) {
	st := &o.Status
	st.Phase, st.CompletionTime, st.Message = phase, ptr.To(metav1.NewTime(now)), text.Shorten(msg, 2000)
	typ, reason := corev1.EventTypeNormal, ReasonSucceeded
	if phase == nwv1.VMOperationFailed {
		typ, reason = corev1.EventTypeWarning, ReasonFailed
	}
	r.event(o, typ, reason, st.Message)
	return ctrl.Result{}, []audit.Record{r.record(o, string(nwv1.VMOperationRunning), string(phase), reason, st.Message, now)}, nil
}

// next moves a running request to its next step.
func (r *Reconciler) next(o *nwv1.VMOperationRequest, step, msg string) (ctrl.Result, []audit.Record, error) {
	o.Status.Step, o.Status.Message = step, text.Shorten(msg, 2000)
	r.event(o, corev1.EventTypeNormal, ReasonStepFinished, o.Status.Message)
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil, nil
}

// step does the running request's current step, or looks whether it is done.
func (r *Reconciler) step(ctx context.Context, o *nwv1.VMOperationRequest, now time.Time) (ctrl.Result, []audit.Record, error) {
	switch o.Status.Step {
	case nwv1.StepSnapshotVM:
		return r.snapshot(ctx, o, now)
	case nwv1.StepStopVM:
		return r.stopVM(ctx, o, now)
	case nwv1.StepRestoreVM:
		return r.restore(ctx, o, now)
	case nwv1.StepStartVM:
		return r.startVM(ctx, o, now)
	case nwv1.StepMigrateVolume:
		return r.migrate(ctx, o, now)
	case nwv1.StepGiveBack:
		return r.giveBackStep(ctx, o, now)
	}
	return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("status.step %q is not a step of %s: the status was written by someone else; the VM is as its own status shows", o.Status.Step, o.Spec.Operation))
}

// owner names the request as its children's labels do.
func owner(o *nwv1.VMOperationRequest) children.Owner {
	return children.Owner{Name: o.Name, NameLabel: nwv1.LabelVMOperationRequest, UID: o.UID, UIDLabel: nwv1.LabelVMOperationRequestUID, Noun: "VMOperationRequest"}
}

// patchVM patches the VM with change (vmrun.Stop or vmrun.GiveBack: the field its owner uses
// is kept) when it changes the spec, failing on a conflict with a concurrent writer rather
// than overwriting it.
func (r *Reconciler) patchVM(ctx context.Context, vm *virtv1.VirtualMachine, change func(*virtv1.VirtualMachine) bool) error {
	base := vm.DeepCopy()
	if !change(vm) {
		return nil
	}
	return r.Client.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// giveBackTo is the change that gives a VM strategy back.
func giveBackTo(strategy virtv1.VirtualMachineRunStrategy) func(*virtv1.VirtualMachine) bool {
	return func(vm *virtv1.VirtualMachine) bool { return vmrun.GiveBack(vm, strategy) }
}

// errReplaced: the VM of the request's name is not the one it started on.
var errReplaced = errors.New("replaced")

// vm reads the request's VM: NotFound when it is gone, errReplaced when a VM made again under
// its name is there.
func (r *Reconciler) vm(ctx context.Context, o *nwv1.VMOperationRequest) (*virtv1.VirtualMachine, error) {
	vm := &virtv1.VirtualMachine{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Spec.VM}, vm); err != nil {
		return nil, err
	}
	if o.Status.VMUID != "" && string(vm.UID) != o.Status.VMUID {
		return nil, errReplaced
	}
	return vm, nil
}

// vmGone ends a request whose VM is gone or was made again under its name; ok is false when
// it is still there.
func (r *Reconciler) vmGone(o *nwv1.VMOperationRequest, now time.Time, err error, what string) (bool, ctrl.Result, []audit.Record, error) {
	switch {
	case apierrors.IsNotFound(err):
		res, recs, err := r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachine %s was deleted %s", o.Spec.VM, what))
		return true, res, recs, err
	case errors.Is(err, errReplaced):
		res, recs, err := r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachine %s was deleted and made again (it was UID %s) %s; nothing is done to the new one", o.Spec.VM, o.Status.VMUID, what))
		return true, res, recs, err
	case err != nil:
		return true, ctrl.Result{}, nil, err
	}
	return false, ctrl.Result{}, nil, nil
}

// vmi reads the VM's instance; nil when it has none.
func (r *Reconciler) vmi(ctx context.Context, o *nwv1.VMOperationRequest) (*virtv1.VirtualMachineInstance, error) {
	vmi := &virtv1.VirtualMachineInstance{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Spec.VM}, vmi); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return vmi, nil
}

// since is how long ago the request started: the bound of its waits for the VM.
func since(o *nwv1.VMOperationRequest, now time.Time) time.Duration {
	if o.Status.StartTime == nil {
		return 0
	}
	return now.Sub(o.Status.StartTime.Time)
}

// stopVM halts the VM and waits for its instance to go.
func (r *Reconciler) stopVM(ctx context.Context, o *nwv1.VMOperationRequest, now time.Time) (ctrl.Result, []audit.Record, error) {
	vm, err := r.vm(ctx, o)
	// This step runs until the instance is gone: the VM may have been set Halted already.
	if gone, res, recs, err := r.vmGone(o, now, err, "while it was being stopped: nothing else was done"); gone {
		return res, recs, err
	}
	if err := r.patchVM(ctx, vm, vmrun.Stop); err != nil {
		return ctrl.Result{}, nil, fmt.Errorf("stopping VirtualMachine %s: %w", vm.Name, err)
	}
	vmi, err := r.vmi(ctx, o)
	if err != nil {
		return ctrl.Result{}, nil, err
	}
	if vmi != nil {
		if since(o, now) > vmDeadline {
			return r.giveBack(o, fmt.Sprintf("its VirtualMachineInstance was still %s %s after it was stopped", vmi.Status.Phase, vmDeadline))
		}
		o.Status.Message = fmt.Sprintf("stopping VirtualMachine %s (run strategy Halted; it was %s): its instance is %s", vm.Name, o.Status.RunStrategy, vmi.Status.Phase)
		return ctrl.Result{RequeueAfter: runPoll}, nil, nil
	}
	if o.Spec.Operation == nwv1.VMRestore {
		return r.next(o, nwv1.StepRestoreVM, fmt.Sprintf("VirtualMachine %s stopped; restoring it from %s", vm.Name, o.Spec.Params.Snapshot))
	}
	return r.next(o, nwv1.StepStartVM, fmt.Sprintf("VirtualMachine %s stopped; starting it again (run strategy %s)", vm.Name, o.Status.RunStrategy))
}

// giveBack moves a request that cannot go on after it stopped the VM to its GiveBack step,
// with why: the step is stored before the run strategy is given back (giveBackStep), so a
// retry never stops the VM again, nor takes its own start for someone else's.
func (r *Reconciler) giveBack(o *nwv1.VMOperationRequest, why string) (ctrl.Result, []audit.Record, error) {
	return r.next(o, nwv1.StepGiveBack, text.Shorten(why, 1500))
}

// giveBackStep gives the VM its run strategy back and fails the request, saying why and what
// state the VM is in.
func (r *Reconciler) giveBackStep(ctx context.Context, o *nwv1.VMOperationRequest, now time.Time) (ctrl.Result, []audit.Record, error) {
	why := o.Status.Message
	vm, err := r.vm(ctx, o)
	if gone, res, recs, err := r.vmGone(o, now, err, "while it was stopped ("+why+")"); gone {
		return res, recs, err
	}
	if err := r.patchVM(ctx, vm, giveBackTo(virtv1.VirtualMachineRunStrategy(o.Status.RunStrategy))); err != nil {
		return ctrl.Result{}, nil, fmt.Errorf("giving VirtualMachine %s its run strategy %s back: %w", vm.Name, o.Status.RunStrategy, err)
	}
	disks := "on the disks it had: nothing was restored"
	if o.Status.Restore != "" {
		disks = "on the volumes VirtualMachineRestore " + o.Status.Restore + " left it (look at the restore's status and the VM's volumes)"
	}
	if o.Spec.Operation == nwv1.VMRestart {
		disks = "on its disks"
	}
	return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("%s: VirtualMachine %s has its run strategy %s back, %s", why, vm.Name, o.Status.RunStrategy, disks))
}

// restore makes the VirtualMachineRestore and waits for KubeVirt to complete it. Before it
// makes it, the snapshot is judged again; an object of the restore's name that is not the
// restore this request makes (someone else made it with the request's labels) fails it.
func (r *Reconciler) restore(ctx context.Context, o *nwv1.VMOperationRequest, now time.Time) (ctrl.Result, []audit.Record, error) {
	vm, err := r.vm(ctx, o)
	if gone, res, recs, err := r.vmGone(o, now, err, "while it was stopped for its restore: nothing was restored"); gone {
		return res, recs, err
	}
	rs := &snapv1.VirtualMachineRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: children.Name(o.Name, "restore")},
		Spec: snapv1.VirtualMachineRestoreSpec{
			Target:                     corev1.TypedLocalObjectReference{APIGroup: ptr.To(virtv1.GroupVersion.Group), Kind: "VirtualMachine", Name: vm.Name},
			VirtualMachineSnapshotName: o.Spec.Params.Snapshot,
			TargetReadinessPolicy:      ptr.To(snapv1.VirtualMachineRestoreFailImmediate),
		},
	}
	want := rs.Spec
	if o.Status.Restore == "" {
		existing := &snapv1.VirtualMachineRestore{}
		err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(rs), existing)
		switch {
		case apierrors.IsNotFound(err):
			if vmi, err := r.vmi(ctx, o); err != nil {
				return ctrl.Result{}, nil, err
			} else if vmi != nil {
				// Someone started it since it stopped: not restored under a running guest.
				return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachine %s was started again (its instance is %s) before the restore was made: nothing was restored, and its run strategy is as whoever started it left it", vm.Name, vmi.Status.Phase))
			}
			if _, _, err := selfservice.Subject(ctx, r.APIReader, o, now); err != nil {
				var refusal selfservice.Refusal
				if errors.As(err, &refusal) {
					return r.giveBack(o, "the snapshot is no longer one to restore from: "+refusal.Message)
				}
				return ctrl.Result{}, nil, err
			}
		case err != nil:
			return ctrl.Result{}, nil, err
		}
	}
	if err := children.Ensure(ctx, r.Client, r.APIReader, owner(o), "VirtualMachineRestore", rs); err != nil {
		var notOurs children.NotOursError
		if errors.As(err, &notOurs) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return r.giveBack(o, "the VirtualMachineRestore could not be made: "+err.Error())
		}
		return ctrl.Result{}, nil, err
	}
	if !sameRestore(rs.Spec, want) {
		return r.giveBack(o, fmt.Sprintf("VirtualMachineRestore %s exists with this request's labels but is not the restore it makes (target %s, snapshot %s, readiness %s, patches or overrides set): someone else made it; the request does not use it",
			rs.Name, rs.Spec.Target.Name, rs.Spec.VirtualMachineSnapshotName, ptr.Deref(rs.Spec.TargetReadinessPolicy, "")))
	}
	o.Status.Restore = rs.Name
	if rs.Status != nil && ptr.Deref(rs.Status.Complete, false) {
		return r.next(o, nwv1.StepStartVM, fmt.Sprintf("VirtualMachine %s restored from %s (VirtualMachineRestore %s); starting it again (run strategy %s)", vm.Name, o.Spec.Params.Snapshot, rs.Name, o.Status.RunStrategy))
	}
	if c := restoreCondition(rs, snapv1.ConditionFailure); c != nil {
		return r.giveBack(o, fmt.Sprintf("KubeVirt failed VirtualMachineRestore %s: %s", rs.Name, c.Reason))
	}
	if since(o, now) > restoreLimit {
		return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachineRestore %s has not completed in %s: VirtualMachine %s is left stopped (run strategy Halted; it was %s) while KubeVirt goes on with it; look at the restore, then start the VM", rs.Name, restoreLimit, vm.Name, o.Status.RunStrategy))
	}
	progress := "made"
	if c := restoreCondition(rs, snapv1.ConditionProgressing); c != nil && c.Reason != "" {
		progress = c.Reason
	}
	o.Status.Message = fmt.Sprintf("restoring VirtualMachine %s from %s: VirtualMachineRestore %s: %s", vm.Name, o.Spec.Params.Snapshot, rs.Name, progress)
	return ctrl.Result{RequeueAfter: runPoll}, nil, nil
}

// sameRestore reports whether a stored restore's spec is the one the request makes: its
// target, snapshot and readiness policy, and nothing more (no patches, overrides, in-place).
func sameRestore(got, want snapv1.VirtualMachineRestoreSpec) bool {
	return ptr.Deref(got.Target.APIGroup, "") == ptr.Deref(want.Target.APIGroup, "") && got.Target.Kind == want.Target.Kind && got.Target.Name == want.Target.Name &&
		got.VirtualMachineSnapshotName == want.VirtualMachineSnapshotName &&
		ptr.Deref(got.TargetReadinessPolicy, "") == snapv1.VirtualMachineRestoreFailImmediate &&
		len(got.Patches) == 0 && len(got.VolumeRestoreOverrides) == 0 &&
		(got.VolumeRestorePolicy == nil || *got.VolumeRestorePolicy != snapv1.VolumeRestorePolicyInPlace)
}

func restoreCondition(rs *snapv1.VirtualMachineRestore, t snapv1.ConditionType) *snapv1.Condition {
	if rs.Status == nil {
		return nil
	}
	for i := range rs.Status.Conditions {
		if c := &rs.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// startVM gives the VM its run strategy back, and for a Restart waits for a new instance to
// run.
func (r *Reconciler) startVM(ctx context.Context, o *nwv1.VMOperationRequest, now time.Time) (ctrl.Result, []audit.Record, error) {
	vm, err := r.vm(ctx, o)
	if gone, res, recs, err := r.vmGone(o, now, err, "while it was stopped"); gone {
		return res, recs, err
	}
	strategy := virtv1.VirtualMachineRunStrategy(o.Status.RunStrategy)
	if err := r.patchVM(ctx, vm, giveBackTo(strategy)); err != nil {
		return ctrl.Result{}, nil, fmt.Errorf("giving VirtualMachine %s its run strategy %s back: %w", vm.Name, strategy, err)
	}
	if o.Spec.Operation == nwv1.VMRestore {
		return r.end(o, now, nwv1.VMOperationSucceeded, fmt.Sprintf("VirtualMachine %s restored from %s (VirtualMachineRestore %s) and given its run strategy %s back", vm.Name, o.Spec.Params.Snapshot, o.Status.Restore, strategy))
	}
	vmi, err := r.vmi(ctx, o)
	if err != nil {
		return ctrl.Result{}, nil, err
	}
	if vmi != nil && string(vmi.UID) != o.Status.RestartedVMI && vmi.Status.Phase == virtv1.Running {
		return r.end(o, now, nwv1.VMOperationSucceeded, fmt.Sprintf("VirtualMachine %s restarted: a new instance runs on %s", vm.Name, vmi.Status.NodeName))
	}
	if since(o, now) > vmDeadline {
		phase := "none"
		if vmi != nil {
			phase = string(vmi.Status.Phase)
		}
		return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachine %s has its run strategy %s back, but no new instance runs %s after the restart began (instance: %s)", vm.Name, strategy, vmDeadline, phase))
	}
	o.Status.Message = fmt.Sprintf("starting VirtualMachine %s again (run strategy %s)", vm.Name, strategy)
	return ctrl.Result{RequeueAfter: runPoll}, nil, nil
}

// snapshot makes the VirtualMachineSnapshot and waits until it is judged, by the rules of the
// VMSnapshotPolicy that selects the VM (vmsnapshot.JudgeStored).
func (r *Reconciler) snapshot(ctx context.Context, o *nwv1.VMOperationRequest, now time.Time) (ctrl.Result, []audit.Record, error) {
	vm, err := r.vm(ctx, o)
	if o.Status.Snapshot == "" || !apierrors.IsNotFound(err) {
		what := "before it was snapshotted: nothing was done"
		if o.Status.Snapshot != "" {
			what = fmt.Sprintf("after VirtualMachineSnapshot %s was made, which is kept: nothing else was done", o.Status.Snapshot)
		}
		if gone, res, recs, err := r.vmGone(o, now, err, what); gone {
			return res, recs, err
		}
	}
	snap := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: children.Name(o.Name, "snapshot")}}
	if o.Status.Snapshot == "" {
		var policies nwv1.VMSnapshotPolicyList
		if err := r.APIReader.List(ctx, &policies, client.InNamespace(o.Namespace)); err != nil {
			return ctrl.Result{}, nil, err
		}
		deadline := vmsnapshot.DefaultFailureDeadline
		if p := vmsnapshot.PolicyOfVM(vm, policies.Items); p != nil && p.Spec.FailureDeadline.Duration > 0 {
			deadline = p.Spec.FailureDeadline.Duration
		}
		snap.Labels = map[string]string{nwv1.LabelSnapshotVM: children.LabelValue(vm.Name)}
		snap.Annotations = map[string]string{
			nwv1.AnnotationSnapshotStarted: now.UTC().Format(time.RFC3339),
			nwv1.AnnotationSnapshotVMUID:   string(vm.UID),
			nwv1.AnnotationSnapshotVolumes: strings.Join(vmsnapshot.ClaimVolumes(vm), ","),
		}
		snap.Spec = snapv1.VirtualMachineSnapshotSpec{
			Source:          corev1.TypedLocalObjectReference{APIGroup: ptr.To(virtv1.GroupVersion.Group), Kind: "VirtualMachine", Name: vm.Name},
			FailureDeadline: &metav1.Duration{Duration: deadline},
		}
	}
	if o.Status.Snapshot != "" {
		// Made: read it, never make it again (someone deleted it, say).
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(snap), snap); apierrors.IsNotFound(err) {
			return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachineSnapshot %s was deleted before it was judged; nothing else was done to the VM", snap.Name))
		} else if err != nil {
			return ctrl.Result{}, nil, err
		}
	} else if err := children.Ensure(ctx, r.Client, r.APIReader, owner(o), "VirtualMachineSnapshot", snap); err != nil {
		var notOurs children.NotOursError
		if errors.As(err, &notOurs) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return r.end(o, now, nwv1.VMOperationFailed, "the VirtualMachineSnapshot could not be made: "+err.Error()+"; nothing was done to the VM")
		}
		return ctrl.Result{}, nil, err
	}
	if src := snap.Spec.Source; src.Kind != "VirtualMachine" || src.Name != o.Spec.VM || ptr.Deref(src.APIGroup, "") != virtv1.GroupVersion.Group {
		return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachineSnapshot %s exists with this request's labels but is of %s %s: someone else made it; the request does not use it, and did nothing to the VM", snap.Name, src.Kind, src.Name))
	}
	o.Status.Snapshot = snap.Name
	m, policy, err := vmsnapshot.JudgeStored(ctx, r.APIReader, snap, now)
	if err != nil {
		return ctrl.Result{}, nil, err
	}
	by := "the defaults (GuestAgent, 10m)"
	if policy != nil {
		by = "VMSnapshotPolicy " + policy.Name
	}
	switch m.State {
	case vmsnapshot.Good:
		return r.end(o, now, nwv1.VMOperationSucceeded, fmt.Sprintf("VirtualMachineSnapshot %s of %s is good by %s (%s)", snap.Name, o.Spec.VM, by, m.Reason))
	case vmsnapshot.Failed:
		return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachineSnapshot %s of %s failed by %s (%s); it is kept for a look, and the VM was not otherwise touched", snap.Name, o.Spec.VM, by, m.Reason))
	}
	if m.Stuck {
		return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VirtualMachineSnapshot %s of %s is Succeeded by KubeVirt but not good by %s %s past its failure deadline (%s); it is kept for a look", snap.Name, o.Spec.VM, by, vmsnapshot.PastDeadline, m.Reason))
	}
	o.Status.Message = fmt.Sprintf("snapshotting %s: VirtualMachineSnapshot %s is %s (%s)", o.Spec.VM, snap.Name, m.State, m.Reason)
	return ctrl.Result{RequeueAfter: runPoll}, nil, nil
}

// stepText says what a request's first step does.
func stepText(o *nwv1.VMOperationRequest) string {
	switch o.Spec.Operation {
	case nwv1.VMSnapshotNow:
		return "snapshotting VirtualMachine " + o.Spec.VM
	case nwv1.VMRestore:
		return fmt.Sprintf("stopping VirtualMachine %s (run strategy %s) to restore it from %s", o.Spec.VM, o.Status.RunStrategy, o.Spec.Params.Snapshot)
	case nwv1.VMMigrateVolume:
		return fmt.Sprintf("moving volume %s of VirtualMachine %s to StorageClass %s", o.Spec.Params.Volume, o.Spec.VM, o.Spec.Params.StorageClass)
	}
	return fmt.Sprintf("stopping VirtualMachine %s (run strategy %s) to start it again", o.Spec.VM, o.Status.RunStrategy)
}

func (r *Reconciler) condition(o *nwv1.VMOperationRequest, t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&o.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: text.Shorten(msg, 32768), ObservedGeneration: o.Generation})
}

func (r *Reconciler) event(o *nwv1.VMOperationRequest, typ, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(o, typ, reason, text.Shorten(msg, 1024))
	}
}

// record is the audit record of one of the request's transitions. Each happens once in its
// life, so a record built again after a crash is the same one.
func (r *Reconciler) record(o *nwv1.VMOperationRequest, from, to, reason, msg string, at time.Time, details ...audit.Detail) audit.Record {
	subject := audit.Subject{APIVersion: nwv1.GroupVersion.String(), Kind: "VMOperationRequest", Namespace: o.Namespace, Name: o.Name, UID: o.UID, Generation: o.Generation}
	for i := range details {
		details[i].Value = audit.Shorten(details[i].Value, 1024)
	}
	return audit.Transition(subject, r.Actor, AuditAction, from, to, reason, audit.Shorten(msg, 4096), "", at, details...)
}

// migrate makes the VMVolumeMigration and follows it to its end: Hot where the source's
// backend can clone within its CSI driver, else Cold. The migration's own admission checks
// it (a refusal fails the request: nothing was done) and its own controller runs it, stopping
// and rolling back as it does.
func (r *Reconciler) migrate(ctx context.Context, o *nwv1.VMOperationRequest, now time.Time) (ctrl.Result, []audit.Record, error) {
	m := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: children.Name(o.Name, "migration")}}
	if o.Status.Migration != "" {
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), m); apierrors.IsNotFound(err) {
			return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VMVolumeMigration %s was deleted before it ended; its deletion rolled it back", m.Name))
		} else if err != nil {
			return ctrl.Result{}, nil, err
		}
	} else {
		vm, err := r.vm(ctx, o)
		if gone, res, recs, err := r.vmGone(o, now, err, "before its volume was moved: nothing was done"); gone {
			return res, recs, err
		}
		mode, err := r.migrationMode(ctx, o, vm)
		if err != nil {
			return ctrl.Result{}, nil, err
		}
		m.Spec = nwv1.VMVolumeMigrationSpec{VMName: o.Spec.VM, VolumeName: o.Spec.Params.Volume, Mode: mode,
			Target: nwv1.MigrationTarget{StorageClassName: o.Spec.Params.StorageClass}}
		if err := children.Ensure(ctx, r.Client, r.APIReader, owner(o), "VMVolumeMigration", m); err != nil {
			var notOurs children.NotOursError
			if errors.As(err, &notOurs) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
				return r.end(o, now, nwv1.VMOperationFailed, "the VMVolumeMigration could not be made: "+err.Error()+"; nothing was done to the VM")
			}
			return ctrl.Result{}, nil, err
		}
		if m.Spec.VMName != o.Spec.VM || m.Spec.VolumeName != o.Spec.Params.Volume || m.Spec.Target.StorageClassName != o.Spec.Params.StorageClass {
			return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VMVolumeMigration %s exists with this request's labels but moves volume %s of %s to %s: someone else made it; the request does not use it, and did nothing", m.Name, m.Spec.VolumeName, m.Spec.VMName, m.Spec.Target.StorageClassName))
		}
	}
	o.Status.Migration = m.Name
	msg := ""
	if c := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded); c != nil {
		msg = c.Message
	}
	switch m.Status.Phase {
	case nwv1.WorkflowSucceeded:
		return r.end(o, now, nwv1.VMOperationSucceeded, fmt.Sprintf("volume %s of VirtualMachine %s moved to StorageClass %s (VMVolumeMigration %s, %s): %s", o.Spec.Params.Volume, o.Spec.VM, o.Spec.Params.StorageClass, m.Name, m.Spec.Mode, msg))
	case nwv1.WorkflowRolledBack:
		return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VMVolumeMigration %s rolled back: VirtualMachine %s is on its old volume, as before: %s", m.Name, o.Spec.VM, msg))
	case nwv1.WorkflowFailed:
		return r.end(o, now, nwv1.VMOperationFailed, fmt.Sprintf("VMVolumeMigration %s failed and could not roll back; its status says what state the VM is in: %s", m.Name, msg))
	}
	o.Status.Message = fmt.Sprintf("moving volume %s of VirtualMachine %s to StorageClass %s: VMVolumeMigration %s is %s", o.Spec.Params.Volume, o.Spec.VM, o.Spec.Params.StorageClass, m.Name, orPending(m.Status.Phase))
	return ctrl.Result{RequeueAfter: runPoll}, nil, nil
}

func orPending(p nwv1.WorkflowPhase) string {
	if p == "" {
		return string(nwv1.WorkflowPending)
	}
	return string(p)
}

// migrationMode is Hot when the source claim's backend can clone and the target class is of
// the same CSI driver, else Cold: the most the backend allows, never refused for the mode.
func (r *Reconciler) migrationMode(ctx context.Context, o *nwv1.VMOperationRequest, vm *virtv1.VirtualMachine) (nwv1.MigrationMode, error) {
	vol := migration.VolumeOf(vm, o.Spec.Params.Volume)
	if vol == nil {
		return nwv1.MigrationCold, nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: migration.ClaimOf(vol.VolumeSource)}, pvc); err != nil {
		return nwv1.MigrationCold, client.IgnoreNotFound(err)
	}
	src, dst := &storagev1.StorageClass{}, &storagev1.StorageClass{}
	if pvc.Spec.StorageClassName == nil {
		return nwv1.MigrationCold, nil
	}
	for name, c := range map[string]*storagev1.StorageClass{*pvc.Spec.StorageClassName: src, o.Spec.Params.StorageClass: dst} {
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, c); err != nil {
			return nwv1.MigrationCold, client.IgnoreNotFound(err)
		}
	}
	if storage.ForProvisioner(src.Provisioner).SupportsClone() && src.Provisioner == dst.Provisioner {
		return nwv1.MigrationHot, nil
	}
	return nwv1.MigrationCold, nil
}
