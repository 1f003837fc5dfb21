// Package vmsnapshotpolicy is the controller of VMSnapshotPolicy: on the policy's schedule it
// creates a KubeVirt VirtualMachineSnapshot of each VM the policy selects, judges each one it
// made (internal/vmsnapshot.Judge: good only when KubeVirt says Succeeded and readyToUse,
// every volume's snapshot is ready, the consistency required holds and every volume expected
// is included), and keeps what the retention says, counting only good snapshots
// (vmsnapshot.Retention).
//
// It touches only the snapshots it made: labelled with the policy's and the VM's names and
// annotated with the policy's UID. The snapshots are not owned through ownerReferences:
// deleting a policy stops its runs and keeps its snapshots.
//
// A run is crash-safe: the snapshot's name comes from the policy, the VM and the scheduled
// time, so a run redone after a restart finds the snapshot it made (AlreadyExists), and the
// status that records the run is written after it. Between runs nothing is written: the
// status changes only when a snapshot does.
package vmsnapshotpolicy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/nodehealth"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmsnapshotpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=vmsnapshotpolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups=snapshot.kubevirt.io,resources=virtualmachinesnapshots,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=snapshot.kubevirt.io,resources=virtualmachinesnapshotcontents,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// The restores under way, whose snapshots retention keeps until they end.
// +kubebuilder:rbac:groups=snapshot.kubevirt.io,resources=virtualmachinerestores,verbs=get;list;watch

// Where a VM's volumes are, and whether they are in sync (putoff.go): its claims, their
// PersistentVolumes (a LINSTOR volume's CSI volume handle is its DRBD resource), and the
// agents' DRBD reports.
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups=nodewright.spectrocloud.com,resources=nodewrightagentstatuses,verbs=get;list;watch

// APIs are the kinds the policy needs: KubeVirt's VMs and snapshots.
var APIs = servedapis.Kinds{
	virtv1.GroupVersion.WithKind("VirtualMachine"),
	snapv1.SchemeGroupVersion.WithKind("VirtualMachineSnapshot"),
	snapv1.SchemeGroupVersion.WithKind("VirtualMachineSnapshotContent"),
	snapv1.SchemeGroupVersion.WithKind("VirtualMachineRestore"),
}

// The reasons of the policy's conditions and Events.
const (
	ReasonRunning         = "Running"
	ReasonFailing         = "Failing"
	ReasonInvalidSpec     = "InvalidSpec"
	ReasonAPIsMissing     = nwv1.ReasonAPIsMissing
	ReasonSuspended       = "Suspended"
	ReasonNotSuspended    = "NotSuspended"
	ReasonDegraded        = "ConsecutiveFailures"
	ReasonNotDegraded     = "NoConsecutiveFailures"
	ReasonSnapshotCreated = "SnapshotCreated"
	ReasonSnapshotFailed  = "SnapshotFailed"
	ReasonSnapshotDeleted = "SnapshotDeleted"
	ReasonRunSkipped      = "RunSkipped"
	ReasonRunPutOff       = "RunPutOff"
	ReasonRunFailed       = "RunFailed"
	ReasonGuestFrozen     = "GuestLeftFrozen"
	ReasonTooManyVMs      = "TooManyVMs"
)

// apisRetry is how often a policy waiting for the APIs asks again.
const apisRetry = time.Minute

// putOffRetry is how often a run put off (putoff.go) looks again.
const putOffRetry = 15 * time.Second

// failedRetry is how soon a VM's failed write (its snapshot's creation or deletion, a read) is
// tried again.
const failedRetry = 30 * time.Second

// frozenRecheck is how often a guest reported frozen is looked at again.
const frozenRecheck = time.Minute

// Reconciler runs VMSnapshotPolicies.
type Reconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	// APIReader reads the cluster-wide workflows' claim past the cache, in LockNamespace (the
	// operator's namespace): a run is put off while the workflow that holds it changes a node
	// of the VM's (putoff.go). Without LockNamespace, node work puts no run off.
	APIReader     client.Reader
	LockNamespace string
	// Discovery says whether the cluster serves APIs.
	Discovery servedapis.Discovery
	Clock     clock.PassiveClock

	mu         sync.Mutex
	controller controller.Controller
	watching   bool
	mgr        ctrl.Manager
}

// SetupWithManager registers the controller. The VMs and snapshots are watched once the
// cluster serves their APIs (a reconcile starts the watches): until then, every policy says
// so in its Healthy condition.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	c, err := ctrl.NewControllerManagedBy(mgr).Named("vmsnapshotpolicy").For(&nwv1.VMSnapshotPolicy{}).Build(r)
	if err != nil {
		return err
	}
	r.controller, r.mgr = c, mgr
	return nil
}

func (r *Reconciler) isWatching() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watching
}

// watch starts the watches of the VMs and snapshots, once.
func (r *Reconciler) watch() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watching {
		return nil
	}
	c := r.mgr.GetCache()
	ofPolicy := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		label := o.GetLabels()[nwv1.LabelSnapshotPolicy]
		if label == "" {
			return nil
		}
		// A name too long for a label is there as its hash: the namespace's policies are
		// matched by their label value.
		var out []reconcile.Request
		for _, req := range r.policiesIn(ctx, o) {
			if children.LabelValue(req.Name) == label {
				out = append(out, req)
			}
		}
		return out
	})
	inNamespace := handler.EnqueueRequestsFromMapFunc(r.policiesIn)
	for _, src := range []source.Source{
		source.Kind[client.Object](c, &snapv1.VirtualMachineSnapshot{}, ofPolicy),
		source.Kind[client.Object](c, &virtv1.VirtualMachine{}, inNamespace),
	} {
		if err := r.controller.Watch(src); err != nil {
			return err
		}
	}
	// What a run reads (putoff.go, the frozen-guest check) is cached from now on, not from
	// the first run on: a run does not wait for these informers to fill.
	for _, o := range []client.Object{&corev1.PersistentVolumeClaim{}, &corev1.PersistentVolume{},
		&nwv1.NodewrightAgentStatus{}, &virtv1.VirtualMachineInstance{}, &snapv1.VirtualMachineRestore{}} {
		if _, err := c.GetInformer(context.Background(), o, cache.BlockUntilSynced(false)); err != nil {
			return err
		}
	}
	r.watching = true
	return nil
}

// policiesIn maps an object to the policies of its namespace.
func (r *Reconciler) policiesIn(ctx context.Context, o client.Object) []reconcile.Request {
	var list nwv1.VMSnapshotPolicyList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// Reconcile runs the policy's due runs and retention, and writes what it sees.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &nwv1.VMSnapshotPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); apierrors.IsNotFound(err) {
		return ctrl.Result{}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := p.DeepCopy()
	// Status times are whole seconds: so is the clock, so that a reconcile that changes
	// nothing writes nothing.
	now := r.Clock.Now().Truncate(time.Second)
	res, runErr := r.reconcile(ctx, p, now)
	p.Status.ObservedGeneration = p.Generation
	if !equality.Semantic.DeepEqual(before.Status, p.Status) {
		// With the resourceVersion read: a reconcile on a stale read never writes over a newer
		// status.
		if err := r.Client.Status().Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, errors.Join(runErr, err)
		}
	}
	if runErr != nil {
		return ctrl.Result{}, runErr
	}
	return res, nil
}

func (r *Reconciler) reconcile(ctx context.Context, p *nwv1.VMSnapshotPolicy, now time.Time) (ctrl.Result, error) {
	// Discovery is asked until the watches start; then the informers say what is served.
	var missing servedapis.Kinds
	if !r.isWatching() {
		var err error
		if missing, err = APIs.Missing(r.Discovery); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(missing) > 0 {
		r.condition(p, nwv1.ConditionHealthy, metav1.ConditionFalse, ReasonAPIsMissing,
			fmt.Sprintf("waiting: the API server does not serve %s (KubeVirt with its snapshot API); the policy runs once they are served", missing))
		return ctrl.Result{RequeueAfter: apisRetry}, nil
	}
	if err := r.watch(); err != nil {
		return ctrl.Result{}, err
	}
	sched, err := vmsnapshot.ParseSchedule(p.Spec.Schedule.Cron, p.Spec.Schedule.TimeZone, "spec.schedule")
	if err != nil {
		r.condition(p, nwv1.ConditionHealthy, metav1.ConditionFalse, ReasonInvalidSpec, err.Error())
		return ctrl.Result{}, nil
	}
	sel, err := selector(p.Spec.VMSelector)
	if err != nil {
		r.condition(p, nwv1.ConditionHealthy, metav1.ConditionFalse, ReasonInvalidSpec, "spec.vmSelector: "+err.Error())
		return ctrl.Result{}, nil
	}
	vms, total, err := r.selected(ctx, p, sel)
	if err != nil {
		return ctrl.Result{}, err
	}
	snaps, err := r.owned(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	ret := retention(p.Spec.Retention)
	w := &run{r: r, p: p, now: now, sched: sched, ret: ret, beyondCap: total - len(vms)}

	// Suspension: lifting it starts the schedule afresh, so that the runs it held are not
	// caught up.
	suspended := meta.IsStatusConditionTrue(p.Status.Conditions, nwv1.ConditionSuspended)
	switch {
	case p.Spec.Suspend:
		r.condition(p, nwv1.ConditionSuspended, metav1.ConditionTrue, ReasonSuspended, "spec.suspend holds the runs; retention still deletes failed snapshots")
		p.Status.NextRun = nil
	default:
		if suspended {
			w.since = now
		}
		r.condition(p, nwv1.ConditionSuspended, metav1.ConditionFalse, ReasonNotSuspended, "runs come on the schedule")
		p.Status.NextRun = ptr.To(metav1.NewTime(sched.Next(now)))
	}

	previous := map[string]nwv1.VMSnapshotStatus{}
	for _, v := range p.Status.VMs {
		previous[v.Name] = v
	}
	var out []nwv1.VMSnapshotStatus
	var failed []error
	wake := time.Duration(0)
	soon := func(d time.Duration) {
		if d > 0 && (wake == 0 || d < wake) {
			wake = d
		}
	}
	for _, vm := range vms {
		st := previous[vm.Name]
		st.Name = vm.Name
		if !w.since.IsZero() && (st.LastScheduled == nil || st.LastScheduled.Time.Before(w.since)) {
			st.LastScheduled = ptr.To(metav1.NewTime(w.since))
		}
		if st.LastScheduled == nil {
			// A VM the selector selects now: its runs start now.
			st.LastScheduled = ptr.To(metav1.NewTime(now))
		}
		// Only this VM's snapshots: those of a VM of the same name deleted before are left
		// alone.
		var ofVM []*snapv1.VirtualMachineSnapshot
		for _, sn := range snaps[vm.Name] {
			if sn.Annotations[nwv1.AnnotationSnapshotVMUID] == string(vm.UID) {
				ofVM = append(ofVM, sn)
			}
		}
		judged, err := w.judge(ctx, ofVM)
		if err != nil {
			// Its status stays as it was; the others go on.
			failed = append(failed, fmt.Errorf("%s: %w", vm.Name, err))
			out = append(out, previousOr(previous, vm.Name, st))
			continue
		}
		// One VM's failed write does not stop the others' runs, nor the status: the reconcile
		// is retried soon, without the backoff of an error that would delay the others' runs.
		if !p.Spec.Suspend {
			created, err := w.runVM(ctx, vm, &st, judged)
			if err != nil {
				failed = append(failed, fmt.Errorf("%s: %w", vm.Name, err))
			}
			if created != nil {
				m := vmsnapshot.JudgedBy(p, created, nil, w.now)
				judged = append(judged, judgedSnapshot{snap: created, scheduled: m.Scheduled, deadline: m.Deadline,
					j: vmsnapshot.Judgement{State: vmsnapshot.InProgress, Reason: "just created"}})
			}
		}
		if kept, err := w.retain(ctx, vm.Name, judged); err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", vm.Name, err))
		} else {
			judged = kept
		}
		w.summarize(&st, judged)
		if err := w.frozen(ctx, &st, judged); err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", vm.Name, err))
		}
		if st.GuestFrozen {
			soon(frozenRecheck) // VMIs are not watched: a thaw is seen this soon
		}
		soon(w.recheck(judged))
		out = append(out, st)
		delete(snaps, vm.Name)
	}
	// The snapshots of VMs no longer selected (or deleted) are kept, and left alone.
	p.Status.VMs = out
	p.Status.Selected = int32(total)
	p.Status.Kept = 0
	p.Status.LastSkipped = nil
	for _, v := range out {
		p.Status.Kept += v.Kept
		if v.LastRun != nil && (p.Status.LastRun == nil || p.Status.LastRun.Before(&v.LastRun.Scheduled)) {
			p.Status.LastRun = ptr.To(v.LastRun.Scheduled)
		}
		if v.LastSkipped != nil && (p.Status.LastSkipped == nil || p.Status.LastSkipped.Scheduled.Before(&v.LastSkipped.Scheduled)) {
			p.Status.LastSkipped = ptr.To(*v.LastSkipped)
			p.Status.LastSkipped.Reason = v.Name + ": " + v.LastSkipped.Reason
		}
	}
	w.conditions()
	if w.putOff {
		soon(putOffRetry)
	}
	if p.Status.NextRun != nil {
		// From the clock itself, not the whole second: the run starts on its minute.
		soon(max(p.Status.NextRun.Sub(r.Clock.Now()), time.Millisecond))
	}
	if len(failed) > 0 {
		ctrl.LoggerFrom(ctx).Error(errors.Join(failed...), "Some VMs' runs failed; retrying", "in", failedRetry)
		soon(failedRetry)
	}
	return ctrl.Result{RequeueAfter: wake}, nil
}

// previousOr is the VM's status before this reconcile, or st when it had none.
func previousOr(previous map[string]nwv1.VMSnapshotStatus, vm string, st nwv1.VMSnapshotStatus) nwv1.VMSnapshotStatus {
	if v, ok := previous[vm]; ok {
		return v
	}
	return st
}

// selector is the label part of the VM selector.
func selector(s nwv1.VMSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: s.MatchLabels, MatchExpressions: s.MatchExpressions})
}

// selected are the VMs of the policy's namespace it selects, by name: the first
// MaxSnapshotPolicyVMs of them, the policy's bound, and how many it selects in all.
func (r *Reconciler) selected(ctx context.Context, p *nwv1.VMSnapshotPolicy, sel labels.Selector) ([]*virtv1.VirtualMachine, int, error) {
	var list virtv1.VirtualMachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(p.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, 0, err
	}
	var out []*virtv1.VirtualMachine
	for i := range list.Items {
		vm := &list.Items[i]
		if len(p.Spec.VMSelector.Names) > 0 && !slices.Contains(p.Spec.VMSelector.Names, vm.Name) {
			continue
		}
		if vm.DeletionTimestamp.IsZero() {
			out = append(out, vm)
		}
	}
	slices.SortFunc(out, func(a, b *virtv1.VirtualMachine) int { return strings.Compare(a.Name, b.Name) })
	total := len(out)
	if total > nwv1.MaxSnapshotPolicyVMs {
		out = out[:nwv1.MaxSnapshotPolicyVMs]
	}
	return out, total, nil
}

// owned are the snapshots the policy made, by VM: its labels and its UID.
func (r *Reconciler) owned(ctx context.Context, p *nwv1.VMSnapshotPolicy) (map[string][]*snapv1.VirtualMachineSnapshot, error) {
	var list snapv1.VirtualMachineSnapshotList
	if err := r.Client.List(ctx, &list, client.InNamespace(p.Namespace), client.MatchingLabels{nwv1.LabelSnapshotPolicy: children.LabelValue(p.Name)}); err != nil {
		return nil, err
	}
	out := map[string][]*snapv1.VirtualMachineSnapshot{}
	for i := range list.Items {
		s := &list.Items[i]
		if s.Annotations[nwv1.AnnotationSnapshotPolicyUID] != string(p.UID) || s.Spec.Source.Kind != "VirtualMachine" {
			continue
		}
		out[s.Spec.Source.Name] = append(out[s.Spec.Source.Name], s)
	}
	return out, nil
}

// retention is the spec's retention, parsed.
func retention(s nwv1.SnapshotRetention) vmsnapshot.Retention {
	r := vmsnapshot.Retention{KeepLast: int(s.KeepLast), KeepHourly: int(s.KeepHourly), KeepDaily: int(s.KeepDaily),
		KeepWeekly: int(s.KeepWeekly), MinGood: int(s.MinGood)}
	if s.MaxAge != nil {
		r.MaxAge = s.MaxAge.Duration
	}
	r.KeepLast = max(r.KeepLast, 1)
	r.MinGood = max(r.MinGood, 1)
	return r
}

// condition sets a condition of the policy.
func (r *Reconciler) condition(p *nwv1.VMSnapshotPolicy, t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: p.Generation})
}

// event records an Event on the policy.
func (r *Reconciler) event(p *nwv1.VMSnapshotPolicy, kind, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(p, kind, reason, msg)
	}
}

// run is one reconcile's work on a policy.
type run struct {
	r     *Reconciler
	p     *nwv1.VMSnapshotPolicy
	now   time.Time
	since time.Time
	sched vmsnapshot.Schedule
	ret   vmsnapshot.Retention
	// beyondCap counts the VMs selected past MaxSnapshotPolicyVMs, which get no snapshots.
	beyondCap int

	// Read once per reconcile, when a run is due: the workflow that holds the cluster (nil
	// when none does) and the agents' DRBD reports (putoff.go).
	holderRead bool
	holding    *engine.Holding
	reports    map[string][]nodehealth.ResourceReport
	putOff     bool
	// inRestore are the snapshots restores under way use, read once per reconcile.
	inRestore map[string]string
}

// judgedSnapshot is a snapshot with what it is.
type judgedSnapshot struct {
	snap      *snapv1.VirtualMachineSnapshot
	scheduled time.Time
	j         vmsnapshot.Judgement
	// stuck: KubeVirt said Succeeded, yet it is not good past its failure deadline (its
	// content not ready, or not read): retention keeps it, and no run waits for it.
	stuck bool
	// deadline is when its failure deadline passes.
	deadline time.Time
}

// judge says what each snapshot is. One KubeVirt has not ended a minute past its failure
// deadline counts as failed.
func (w *run) judge(ctx context.Context, snaps []*snapv1.VirtualMachineSnapshot) ([]judgedSnapshot, error) {
	out := make([]judgedSnapshot, 0, len(snaps))
	for _, s := range snaps {
		var content *snapv1.VirtualMachineSnapshotContent
		if s.Status != nil && s.Status.VirtualMachineSnapshotContentName != nil {
			c := &snapv1.VirtualMachineSnapshotContent{}
			err := w.r.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: *s.Status.VirtualMachineSnapshotContentName}, c)
			switch {
			case err == nil:
				content = c
			case !apierrors.IsNotFound(err):
				return nil, err
			}
		}
		m := vmsnapshot.JudgedBy(w.p, s, content, w.now)
		out = append(out, judgedSnapshot{snap: s, scheduled: m.Scheduled, j: m.Judgement, stuck: m.Stuck, deadline: m.Deadline})
	}
	return out, nil
}

func (w *run) failureDeadline() time.Duration {
	if d := w.p.Spec.FailureDeadline.Duration; d > 0 {
		return d
	}
	return vmsnapshot.DefaultFailureDeadline
}

// runVM decides on the VM's due run and makes it: it returns the snapshot it created.
func (w *run) runVM(ctx context.Context, vm *virtv1.VirtualMachine, st *nwv1.VMSnapshotStatus, judged []judgedSnapshot) (*snapv1.VirtualMachineSnapshot, error) {
	p := w.p
	d := w.sched.Due(st.LastScheduled.Time, w.now, p.Spec.StartingDeadline.Duration, vmsnapshot.CatchUp(p.Spec.CatchUp))
	if d.Scheduled.IsZero() {
		return nil, nil
	}
	scheduled := metav1.NewTime(d.Scheduled)
	missed := func() {
		if d.Missed == 0 {
			return
		}
		more := ""
		if d.MissedMore {
			more = " (more than that)"
		}
		w.r.event(p, corev1.EventTypeWarning, ReasonRunSkipped, fmt.Sprintf("%s: %d scheduled runs before %s were missed%s and are not caught up",
			vm.Name, d.Missed, d.Scheduled.UTC().Format(time.RFC3339), more))
	}
	if !d.Run {
		missed()
		st.LastScheduled = &scheduled
		st.LastSkipped = &nwv1.SnapshotSkip{Scheduled: scheduled, Reason: d.Skipped}
		w.r.event(p, corev1.EventTypeWarning, ReasonRunSkipped, vm.Name+": "+d.Skipped)
		return nil, nil
	}
	// A run whose snapshot is there is done: its status was not seen yet (the cache lags the
	// write), or not written before a restart. Planned again, its deletions would be made
	// twice.
	if slices.ContainsFunc(judged, func(j judgedSnapshot) bool { return j.snap.Name == SnapshotName(p.Name, vm.Name, d.Scheduled) }) {
		st.LastScheduled = &scheduled
		if st.LastRun == nil || st.LastRun.Name != SnapshotName(p.Name, vm.Name, d.Scheduled) {
			st.LastRun = &nwv1.SnapshotRef{Name: SnapshotName(p.Name, vm.Name, d.Scheduled), Scheduled: scheduled}
		}
		clearWaited(st, scheduled)
		return nil, nil
	}
	// Node work and the replicas first: a snapshot freezes the guest and loads the storage
	// while a node of the VM's is drained, rebooted or its network changed, or while a
	// replica synchronises. Not acted on: the run is tried again soon, within its starting
	// deadline (or late, with catchUp RunOnce).
	why, err := w.putOffFor(ctx, vm)
	if err != nil {
		return nil, err
	}
	if why != "" {
		w.putOff = true
		skip := &nwv1.SnapshotSkip{Scheduled: scheduled, Reason: fmt.Sprintf(
			"put off: %s, within the starting deadline %s (or late, with catchUp RunOnce)", why, p.Spec.StartingDeadline.Duration)}
		if !equality.Semantic.DeepEqual(st.LastSkipped, skip) {
			st.LastSkipped = skip
			w.r.event(p, corev1.EventTypeNormal, ReasonRunPutOff, vm.Name+": "+skip.Reason)
		}
		return nil, nil
	}
	// A snapshot being deleted counts for nothing: not as the newest good one, nor toward
	// minGood.
	snaps := make([]vmsnapshot.Snapshot, 0, len(judged))
	for _, j := range judged {
		if j.snap.DeletionTimestamp.IsZero() && !j.stuck {
			snaps = append(snaps, vmsnapshot.Snapshot{Name: j.snap.Name, Created: j.scheduled, State: j.j.State})
		}
	}
	plan := w.ret.BeforeRun(snaps, w.now, w.sched.Location())
	if plan.Wait != "" {
		// Not acted on: the run is tried again when the snapshot ends, within its starting
		// deadline (or late, with catchUp RunOnce).
		skip := &nwv1.SnapshotSkip{Scheduled: scheduled, Reason: "waiting: " + plan.Wait}
		if !equality.Semantic.DeepEqual(st.LastSkipped, skip) {
			st.LastSkipped = skip
		}
		return nil, nil
	}
	clearWaited(st, scheduled)
	missed()
	for _, v := range plan.Delete {
		if _, err := w.delete(ctx, judged, v); err != nil {
			w.r.event(p, corev1.EventTypeWarning, ReasonRunFailed, fmt.Sprintf("%s: the run of %s stopped: deleting %s first (%s) failed: %v",
				vm.Name, d.Scheduled.UTC().Format(time.RFC3339), v.Name, v.Reason, err))
			return nil, err
		}
	}
	s := w.snapshotOf(vm, d.Scheduled)
	err = w.r.Client.Create(ctx, s)
	switch {
	case apierrors.IsAlreadyExists(err):
		// Made before a restart: the status recording it was not written.
		got := &snapv1.VirtualMachineSnapshot{}
		if err := w.r.Client.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
			return nil, err
		}
		if got.Annotations[nwv1.AnnotationSnapshotPolicyUID] != string(p.UID) {
			st.LastScheduled = &scheduled
			st.LastSkipped = &nwv1.SnapshotSkip{Scheduled: scheduled, Reason: fmt.Sprintf("a VirtualMachineSnapshot %s is there that this policy did not make", s.Name)}
			return nil, nil
		}
		s = nil
	case err != nil:
		w.r.event(p, corev1.EventTypeWarning, ReasonRunFailed, fmt.Sprintf("%s: creating the snapshot of %s failed: %v", vm.Name, d.Scheduled.UTC().Format(time.RFC3339), err))
		return nil, err
	default:
		late := ""
		if d.Late {
			late = " (late: catchUp RunOnce)"
		}
		w.r.event(p, corev1.EventTypeNormal, ReasonSnapshotCreated, fmt.Sprintf("%s: created %s for the run of %s%s", vm.Name, s.Name, d.Scheduled.UTC().Format(time.RFC3339), late))
	}
	st.LastScheduled = &scheduled
	st.LastRun = &nwv1.SnapshotRef{Name: SnapshotName(p.Name, vm.Name, d.Scheduled), Scheduled: scheduled}
	return s, nil
}

// clearWaited forgets the VM's last skipped run when it is the run scheduled then, which
// waited or was put off and went ahead.
func clearWaited(st *nwv1.VMSnapshotStatus, scheduled metav1.Time) {
	if st.LastSkipped != nil && st.LastSkipped.Scheduled.Equal(&scheduled) &&
		(strings.HasPrefix(st.LastSkipped.Reason, "waiting: ") || strings.HasPrefix(st.LastSkipped.Reason, "put off: ")) {
		st.LastSkipped = nil
	}
}

// SnapshotName is the name of the snapshot of vm by policy's run scheduled at t.
func SnapshotName(policy, vm string, t time.Time) string {
	return children.Name(policy+"-"+vm, t.UTC().Format("20060102-1504"))
}

// snapshotOf is the snapshot of vm for the run scheduled at t.
func (w *run) snapshotOf(vm *virtv1.VirtualMachine, t time.Time) *snapv1.VirtualMachineSnapshot {
	return &snapv1.VirtualMachineSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: w.p.Namespace, Name: SnapshotName(w.p.Name, vm.Name, t),
			Labels: map[string]string{nwv1.LabelSnapshotPolicy: children.LabelValue(w.p.Name), nwv1.LabelSnapshotVM: children.LabelValue(vm.Name)},
			Annotations: map[string]string{
				nwv1.AnnotationSnapshotPolicyUID: string(w.p.UID),
				nwv1.AnnotationSnapshotScheduled: t.UTC().Format(time.RFC3339),
				nwv1.AnnotationSnapshotStarted:   w.now.UTC().Format(time.RFC3339),
				nwv1.AnnotationSnapshotVMUID:     string(vm.UID),
				nwv1.AnnotationSnapshotVolumes:   strings.Join(vmsnapshot.ClaimVolumes(vm), ","),
			},
		},
		Spec: snapv1.VirtualMachineSnapshotSpec{
			Source:          corev1.TypedLocalObjectReference{APIGroup: ptr.To(virtv1.GroupVersion.Group), Kind: "VirtualMachine", Name: vm.Name},
			FailureDeadline: &metav1.Duration{Duration: w.failureDeadline()},
		},
	}
}

// delete deletes the snapshot of v, the one judged (by UID: never one made again since).
func (w *run) delete(ctx context.Context, judged []judgedSnapshot, v vmsnapshot.Verdict) (bool, error) {
	restoring, err := w.restoring(ctx)
	if err != nil {
		return false, err
	}
	if by := restoring[v.Name]; by != "" {
		return false, nil // kept until the restore ends; retention deletes it then
	}
	for _, j := range judged {
		if j.snap.Name != v.Name || !j.snap.DeletionTimestamp.IsZero() {
			continue
		}
		err := w.r.Client.Delete(ctx, j.snap, client.Preconditions{UID: &j.snap.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		if err == nil {
			w.r.event(w.p, corev1.EventTypeNormal, ReasonSnapshotDeleted, fmt.Sprintf("%s: deleted %s (%s, %s)", j.snap.Spec.Source.Name, j.snap.Name, j.j.State, v.Reason))
		}
	}
	return true, nil
}

// restoring reads, once per reconcile, the snapshots of the policy's namespace that a
// VirtualMachineRestore not ended (neither complete nor failed) restores from, each with the
// restore's name: retention does not delete them under it.
func (w *run) restoring(ctx context.Context) (map[string]string, error) {
	if w.inRestore != nil {
		return w.inRestore, nil
	}
	var list snapv1.VirtualMachineRestoreList
	if err := w.r.Client.List(ctx, &list, client.InNamespace(w.p.Namespace)); err != nil {
		return nil, fmt.Errorf("reading the namespace's VirtualMachineRestores: %w", err)
	}
	w.inRestore = map[string]string{}
	for _, r := range list.Items {
		if !restoreEnded(&r) {
			w.inRestore[r.Spec.VirtualMachineSnapshotName] = r.Name
		}
	}
	return w.inRestore, nil
}

// restoreEnded says whether KubeVirt completed or failed the restore.
func restoreEnded(r *snapv1.VirtualMachineRestore) bool {
	if r.Status == nil {
		return false
	}
	if ptr.Deref(r.Status.Complete, false) {
		return true
	}
	return slices.ContainsFunc(r.Status.Conditions, func(c snapv1.Condition) bool {
		return c.Type == snapv1.ConditionFailure && c.Status == corev1.ConditionTrue
	})
}

// retain deletes what retention drops, and returns what is left.
func (w *run) retain(ctx context.Context, vm string, judged []judgedSnapshot) ([]judgedSnapshot, error) {
	snaps := make([]vmsnapshot.Snapshot, 0, len(judged))
	for _, j := range judged {
		if j.snap.DeletionTimestamp.IsZero() {
			snaps = append(snaps, vmsnapshot.Snapshot{Name: j.snap.Name, Created: j.scheduled, State: j.j.State})
		}
	}
	drop := map[string]bool{}
	for _, v := range w.ret.Plan(snaps, w.now, w.sched.Location()) {
		if v.Keep {
			continue
		}
		deleted, err := w.delete(ctx, judged, v)
		if err != nil {
			w.r.event(w.p, corev1.EventTypeWarning, ReasonRunFailed, fmt.Sprintf("%s: deleting %s (%s) failed: %v", vm, v.Name, v.Reason, err))
			return nil, err
		}
		drop[v.Name] = deleted
	}
	kept := judged[:0:0]
	for _, j := range judged {
		if !drop[j.snap.Name] && j.snap.DeletionTimestamp.IsZero() {
			kept = append(kept, j)
		}
	}
	return kept, nil
}

// summarize writes what the VM's snapshots are into its status.
func (w *run) summarize(st *nwv1.VMSnapshotStatus, judged []judgedSnapshot) {
	slices.SortFunc(judged, func(a, b judgedSnapshot) int {
		if c := b.scheduled.Compare(a.scheduled); c != 0 {
			return c
		}
		return strings.Compare(a.snap.Name, b.snap.Name)
	})
	prevCount, prevFailed := st.ConsecutiveFailures, st.LastFailed
	st.LastGood, st.LastFailed, st.ConsecutiveFailures, st.Kept, st.KeptSnapshots = nil, nil, 0, 0, nil
	counting := true
	for _, j := range judged {
		ref := nwv1.SnapshotRef{Name: j.snap.Name, Scheduled: metav1.NewTime(j.scheduled)}
		switch j.j.State {
		case vmsnapshot.Good:
			counting = false
			ref.NoGuestAgent = j.j.NoGuestAgent
			if st.LastGood == nil {
				st.LastGood = &ref
			}
			st.Kept++
			if len(st.KeptSnapshots) < 20 {
				st.KeptSnapshots = append(st.KeptSnapshots, j.snap.Name)
			}
		case vmsnapshot.Failed:
			if counting {
				st.ConsecutiveFailures++
			}
			if st.LastFailed == nil {
				ref.Reason = j.j.Reason
				st.LastFailed = &ref
			}
		}
	}
	// Retention keeps only the newest failures of a burst (vmsnapshot.MaxFailedKept): the
	// older ones of the streak are counted from the status, as long as no good snapshot came
	// after them.
	if prevCount > 0 && prevFailed != nil && st.ConsecutiveFailures > 0 && (st.LastGood == nil || st.LastGood.Scheduled.Before(&prevFailed.Scheduled)) {
		newer := int32(0)
		for _, j := range judged {
			if j.j.State == vmsnapshot.Failed && j.scheduled.After(prevFailed.Scheduled.Time) {
				newer++
			}
		}
		st.ConsecutiveFailures = max(st.ConsecutiveFailures, prevCount+newer)
	}
	if st.LastRun != nil {
		for _, j := range judged {
			if j.snap.Name != st.LastRun.Name {
				continue
			}
			was := st.LastRun.Reason
			st.LastRun.NoGuestAgent = j.j.NoGuestAgent
			st.LastRun.Reason = ""
			if j.j.State != vmsnapshot.Good {
				st.LastRun.Reason = j.j.State.String() + ": " + j.j.Reason
			}
			if j.j.State == vmsnapshot.Failed && !strings.HasPrefix(was, "Failed") {
				w.r.event(w.p, corev1.EventTypeWarning, ReasonSnapshotFailed, fmt.Sprintf("%s: %s failed: %s", j.snap.Spec.Source.Name, j.snap.Name, j.j.Reason))
			}
		}
	}
}

// frozen says whether the VM's guest was left frozen: its newest snapshot failed, none is in
// progress, and its VMI says its file systems are frozen. A freeze is KubeVirt's and the
// guest agent's: the policy reports it and leaves it.
func (w *run) frozen(ctx context.Context, st *nwv1.VMSnapshotStatus, judged []judgedSnapshot) error {
	was := st.GuestFrozen
	st.GuestFrozen = false
	if st.ConsecutiveFailures == 0 || slices.ContainsFunc(judged, func(j judgedSnapshot) bool { return j.j.State == vmsnapshot.InProgress && !j.stuck }) {
		return nil
	}
	vmi := &virtv1.VirtualMachineInstance{}
	if err := w.r.Client.Get(ctx, client.ObjectKey{Namespace: w.p.Namespace, Name: st.Name}, vmi); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	st.GuestFrozen = vmi.Status.FSFreezeStatus == "frozen"
	if st.GuestFrozen && !was {
		w.r.event(w.p, corev1.EventTypeWarning, ReasonGuestFrozen, fmt.Sprintf(
			"%s: the guest's file systems are frozen, and no snapshot is in progress (the last failed: %s); the policy does not thaw it, as another tool may hold the freeze: virtctl unfreeze %s -n %s",
			st.Name, st.LastFailed.Reason, st.Name, w.p.Namespace))
	}
	return nil
}

// recheck is how soon a snapshot in progress passes its failure deadline.
func (w *run) recheck(judged []judgedSnapshot) time.Duration {
	var soonest time.Duration
	for _, j := range judged {
		if j.j.State != vmsnapshot.InProgress || j.stuck {
			continue
		}
		if d := j.deadline.Add(vmsnapshot.PastDeadline + time.Second).Sub(w.now); soonest == 0 || d < soonest {
			soonest = max(d, time.Second)
		}
	}
	return soonest
}

// conditions set Healthy and Degraded from the VMs' status.
func (w *run) conditions() {
	p := w.p
	degradedAfter := max(p.Spec.DegradedAfter, 1)
	var degraded, failing []string
	for _, v := range p.Status.VMs {
		switch {
		case v.ConsecutiveFailures >= degradedAfter:
			degraded = append(degraded, fmt.Sprintf("%s (%d: %s)", v.Name, v.ConsecutiveFailures, v.LastFailed.Reason))
		case v.ConsecutiveFailures > 0:
			failing = append(failing, fmt.Sprintf("%s (%d)", v.Name, v.ConsecutiveFailures))
		}
	}
	was := meta.IsStatusConditionTrue(p.Status.Conditions, nwv1.ConditionDegraded)
	if len(degraded) > 0 {
		msg := fmt.Sprintf("%d VM(s) failed %d or more runs in a row: %s; the policy goes on running", len(degraded), degradedAfter, strings.Join(degraded, "; "))
		w.r.condition(p, nwv1.ConditionDegraded, metav1.ConditionTrue, ReasonDegraded, msg)
		if !was {
			w.r.event(p, corev1.EventTypeWarning, ReasonDegraded, msg)
		}
	} else {
		w.r.condition(p, nwv1.ConditionDegraded, metav1.ConditionFalse, ReasonNotDegraded, fmt.Sprintf("no VM failed %d runs in a row", degradedAfter))
	}
	failing = append(degraded, failing...)
	var frozen []string
	for _, v := range p.Status.VMs {
		if v.GuestFrozen {
			frozen = append(frozen, v.Name)
		}
	}
	switch {
	case len(frozen) > 0:
		w.r.condition(p, nwv1.ConditionHealthy, metav1.ConditionFalse, ReasonGuestFrozen,
			fmt.Sprintf("the guest of %s was left frozen after a failed snapshot (virtctl unfreeze); failed runs in a row: %s", strings.Join(frozen, ", "), strings.Join(failing, "; ")))
	case w.beyondCap > 0:
		last := ""
		if n := len(p.Status.VMs); n > 0 {
			last = " after " + p.Status.VMs[n-1].Name
		}
		msg := fmt.Sprintf("the selector selects %d VMs: only the first %d by name are snapshotted, the %d%s are not; narrow it, or split the policy",
			int(p.Status.Selected), nwv1.MaxSnapshotPolicyVMs, w.beyondCap, last)
		if len(failing) > 0 {
			msg += "; failed runs in a row: " + strings.Join(failing, "; ")
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, nwv1.ConditionHealthy); c == nil || c.Reason != ReasonTooManyVMs {
			w.r.event(p, corev1.EventTypeWarning, ReasonTooManyVMs, msg)
		}
		w.r.condition(p, nwv1.ConditionHealthy, metav1.ConditionFalse, ReasonTooManyVMs, msg)
	case len(failing) > 0:
		w.r.condition(p, nwv1.ConditionHealthy, metav1.ConditionFalse, ReasonFailing, "failed runs in a row: "+strings.Join(failing, "; "))
	default:
		w.r.condition(p, nwv1.ConditionHealthy, metav1.ConditionTrue, ReasonRunning, fmt.Sprintf("%d VM(s) selected; every newest run is good or on its way", len(p.Status.VMs)))
	}
}
