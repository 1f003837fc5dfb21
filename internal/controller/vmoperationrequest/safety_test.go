package vmoperationrequest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmoperationrequest"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
)

// onFakeClock puts the owner's controllers on a fake clock, set to now: the tests step it past
// the request's deadlines.
func (o *owner) onFakeClock() *clocktesting.FakePassiveClock {
	o.clock = clocktesting.NewFakePassiveClock(time.Now())
	return o.clock
}

// playedVM creates a VM that runs (run strategy Always) and its running instance, as KubeVirt
// would show them; no site runs: the test plays KubeVirt, stopping and starting it by hand.
func (o *owner) playedVM(name string) *virtv1.VirtualMachine {
	o.t.Helper()
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: name},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways), Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
	if err := env.Client.Create(context.Background(), vm); err != nil {
		o.t.Fatal(err)
	}
	o.playedInstance(name)
	return vm
}

// playedInstance creates a running instance of the VM, as KubeVirt starts one, on a node of
// the test's own name.
func (o *owner) playedInstance(name string) *virtv1.VirtualMachineInstance {
	o.t.Helper()
	// The VMI's status is not a subresource in KubeVirt's CRD: it is created with it.
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: name},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running, NodeName: "node-" + o.ns}}
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		o.t.Fatal(err)
	}
	return vmi
}

// deleteInstance deletes the VM's instance, as KubeVirt does once the guest is off.
func (o *owner) deleteInstance(name string) {
	o.t.Helper()
	if err := env.Client.Delete(context.Background(), &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: name}}); err != nil {
		o.t.Fatal(err)
	}
}

// vm reads the VM.
func (o *owner) vm(name string) *virtv1.VirtualMachine {
	o.t.Helper()
	vm := &virtv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: o.ns, Name: name}, vm); err != nil {
		o.t.Fatal(err)
	}
	return vm
}

// approve approves the request as an administrator; the webhook would stamp who.
func (o *owner) approve(name string, op nwv1.VMOperation) {
	o.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"admin"}}}`, nwv1.AnnotationApprove, op, nwv1.AnnotationApprovedBy)
	r := &nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: name}}
	if err := env.Client.Patch(context.Background(), r, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		o.t.Fatal(err)
	}
}

// stopping is a check that the request runs, waiting at its StopVM step for an instance in
// phase to go, with the VM's run strategy Halted.
func (o *owner) stopping(vm string, p virtv1.VirtualMachineInstancePhase) func(nwv1.VMOperationRequestStatus) string {
	return func(st nwv1.VMOperationRequestStatus) string {
		if st.Phase != nwv1.VMOperationRunning || st.Step != nwv1.StepStopVM || !strings.HasSuffix(st.Message, "its instance is "+string(p)) {
			return "not waiting at StopVM for an instance " + string(p) + " to go"
		}
		if s, err := o.vm(vm).RunStrategy(); s != virtv1.RunStrategyHalted {
			return fmt.Sprintf("the VM's run strategy is %s (%v), not Halted", s, err)
		}
		return ""
	}
}

// TestADeletedRunningRequestEndsFirst: a started request carries the finalizer; deleted while
// it waits for its stopped VM to go, it stays, and goes on: the VM gets its run strategy back
// and runs again, and only then is the request gone.
func TestADeletedRunningRequestEndsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOwner(t)
	o.playedVM("web")
	o.startOperator()
	o.request("restart", nwv1.VMRestart, "web", "")
	o.approve("restart", nwv1.VMRestart)
	o.until("restart", o.stopping("web", virtv1.Running))

	r := &nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "restart"}}
	if err := env.Client.Delete(ctx, r); err != nil {
		t.Fatal(err)
	}
	// The guest shuts down; the controller, looking again after the deletion, says so, and
	// keeps the request.
	vmi := o.vmi("web")
	vmi.Status.Phase = virtv1.Succeeded
	if err := env.Client.Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	o.until("restart", o.stopping("web", virtv1.Succeeded))
	held := func(what string) {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if r.DeletionTimestamp == nil || !slices.Contains(r.Finalizers, vmoperationrequest.Finalizer) {
			t.Fatalf("%s: deleted %v, finalizers %q", what, r.DeletionTimestamp, r.Finalizers)
		}
	}
	held("deleted while the VM stops")

	o.deleteInstance("web")
	o.until("restart", func(st nwv1.VMOperationRequestStatus) string {
		if st.Phase != nwv1.VMOperationRunning || st.Step != nwv1.StepStartVM || !strings.Contains(st.Message, "starting VirtualMachine web again (run strategy Always)") {
			return "not waiting at StartVM for a new instance"
		}
		return ""
	})
	held("deleted while the VM starts")
	if s := o.vm("web").Spec.RunStrategy; ptr.Deref(s, "") != virtv1.RunStrategyAlways {
		t.Fatalf("starting again, the VM's run strategy is %v, want Always", s)
	}

	o.playedInstance("web")
	testenv.Eventually(t, wait, func() string {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(r), r); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the request is still there (%v): phase %s, message %q", err, r.Status.Phase, r.Status.Message)
		}
		return ""
	})
	testenv.EventSaid(t, env.Client, wait, "VMOperationRequest", corev1.EventTypeNormal, vmoperationrequest.ReasonSucceeded,
		"VirtualMachine web restarted: a new instance runs on node-"+o.ns)
	if s := o.vm("web").Spec.RunStrategy; ptr.Deref(s, "") != virtv1.RunStrategyAlways {
		t.Errorf("after the request, the VM's run strategy is %v, want Always", s)
	}
}

// TestARestartKeepsTheFieldItsOwnerUses: a VM that says it runs with spec.running, not a run
// strategy, is stopped and started again in that field.
func TestARestartKeepsTheFieldItsOwnerUses(t *testing.T) {
	t.Parallel()
	o := newOwner(t)
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "old"},
		Spec: virtv1.VirtualMachineSpec{Running: ptr.To(true), Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	o.playedInstance("old")
	o.startOperator()
	o.request("restart", nwv1.VMRestart, "old", "")
	o.approve("restart", nwv1.VMRestart)
	o.until("restart", o.stopping("old", virtv1.Running))
	if spec := o.vm("old").Spec; spec.RunStrategy != nil || spec.Running == nil || *spec.Running {
		t.Errorf("stopped, the VM says run strategy %v, running %v; want no run strategy, running false", spec.RunStrategy, spec.Running)
	}
	o.deleteInstance("old")
	o.until("restart", func(st nwv1.VMOperationRequestStatus) string {
		if st.Step != nwv1.StepStartVM || st.RunStrategy != string(virtv1.RunStrategyAlways) {
			return "not at StartVM, to give back Always"
		}
		return ""
	})
	o.playedInstance("old")
	o.until("restart", phase(nwv1.VMOperationSucceeded))
	if spec := o.vm("old").Spec; spec.RunStrategy != nil || spec.Running == nil || !*spec.Running {
		t.Errorf("started again, the VM says run strategy %v, running %v; want no run strategy, running true", spec.RunStrategy, spec.Running)
	}
}

// TestAVMMadeAgainUnderItsNameFailsTheRequest: a Restart stopped its VM; while the operator is
// away, the VM is deleted and made again under its name, running. The request fails, naming
// the UID it started on, and the new VM is not touched.
func TestAVMMadeAgainUnderItsNameFailsTheRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOwner(t)
	old := o.playedVM("web")
	stop := o.startOperator()
	o.request("restart", nwv1.VMRestart, "web", "")
	o.approve("restart", nwv1.VMRestart)
	o.until("restart", o.stopping("web", virtv1.Running))
	stop()

	o.deleteInstance("web")
	if err := env.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() string {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), &virtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the old VM is still there (%v)", err)
		}
		return ""
	})
	made := o.playedVM("web")
	vmi := o.vmi("web")
	o.startOperator()

	st := o.until("restart", phase(nwv1.VMOperationFailed))
	if want := fmt.Sprintf("VirtualMachine web was deleted and made again (it was UID %s) while it was being stopped", old.UID); !strings.Contains(st.Message, want) ||
		!strings.Contains(st.Message, "nothing is done to the new one") || st.VMUID != string(old.UID) {
		t.Errorf("failed: %q (VM UID %s), want it to say %q", st.Message, st.VMUID, want)
	}
	now := o.vm("web")
	if now.UID != made.UID || now.Generation != made.Generation || ptr.Deref(now.Spec.RunStrategy, "") != virtv1.RunStrategyAlways {
		t.Errorf("the new VM was touched: UID %s, generation %d, run strategy %v; made as %s, %d, Always", now.UID, now.Generation, now.Spec.RunStrategy, made.UID, made.Generation)
	}
	if i := o.vmi("web"); i == nil || i.UID != vmi.UID {
		t.Errorf("the new VM's instance is gone or another")
	}
}

// TestAStuckSnapshotFailsItsRequest: a SnapshotNow whose VirtualMachineSnapshot is never judged
// good fails a minute past the snapshot's failure deadline, keeping the snapshot for a look:
// the defaults' 10m for one KubeVirt never ends, and the deadline of the VMSnapshotPolicy that
// selects the VM for one KubeVirt says Succeeded but that is never ready to use.
func TestAStuckSnapshotFailsItsRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOwner(t)
	clock := o.onFakeClock()
	o.playedVM("db")
	o.startOperator()
	made := func(name string) *snapv1.VirtualMachineSnapshot {
		t.Helper()
		st := o.until(name, func(st nwv1.VMOperationRequestStatus) string {
			if st.Phase != nwv1.VMOperationRunning || st.Snapshot == "" {
				return "no snapshot made yet"
			}
			return ""
		})
		snap := &snapv1.VirtualMachineSnapshot{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: st.Snapshot}, snap); err != nil {
			t.Fatal(err)
		}
		return snap
	}
	// pastDeadline sets the clock to just past the snapshot's failure deadline d and the
	// minute after it. The deadline counts from when the snapshot was made: the clock's time
	// then, or its creation by the API server's clock, which runs on meanwhile.
	pastDeadline := func(snap *snapv1.VirtualMachineSnapshot, d time.Duration) {
		made := clock.Now()
		if c := snap.CreationTimestamp.Time; c.After(made) {
			made = c
		}
		clock.SetTime(made.Add(d + vmsnapshot.PastDeadline + 2*time.Second))
	}
	kept := func(snap *snapv1.VirtualMachineSnapshot) {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(snap), &snapv1.VirtualMachineSnapshot{}); err != nil {
			t.Errorf("snapshot %s was not kept: %v", snap.Name, err)
		}
	}

	// No KubeVirt runs: the snapshot never gets a status.
	o.request("unended", nwv1.VMSnapshotNow, "db", "")
	snap := made("unended")
	if d := snap.Spec.FailureDeadline; d == nil || d.Duration != vmsnapshot.DefaultFailureDeadline {
		t.Fatalf("the snapshot's failure deadline is %v, want the default %s", d, vmsnapshot.DefaultFailureDeadline)
	}
	pastDeadline(snap, vmsnapshot.DefaultFailureDeadline)
	st := o.until("unended", phase(nwv1.VMOperationFailed))
	if want := "failed by the defaults (GuestAgent, 10m) (not ended 1m0s past its failure deadline of 10m0s (KubeVirt has not written its status yet)); it is kept for a look"; !strings.Contains(st.Message, want) {
		t.Errorf("unended: %q, want it to say %q", st.Message, want)
	}
	kept(snap)

	const deadline = 3 * time.Minute
	p := &nwv1.VMSnapshotPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "quick"}, Spec: nwv1.VMSnapshotPolicySpec{
		VMSelector: nwv1.VMSelector{Names: []string{"db"}}, Schedule: nwv1.SnapshotSchedule{Cron: "0 3 * * *"},
		Retention: nwv1.SnapshotRetention{KeepLast: 1}, FailureDeadline: metav1.Duration{Duration: deadline}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	o.request("stuck", nwv1.VMSnapshotNow, "db", "")
	snap = made("stuck")
	if d := snap.Spec.FailureDeadline; d == nil || d.Duration != deadline {
		t.Fatalf("the snapshot's failure deadline is %v, want the policy's %s", d, deadline)
	}
	// KubeVirt says Succeeded, and the snapshot never becomes ready to use.
	if err := env.Client.Status().Patch(ctx, snap, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Succeeded","readyToUse":false}}`))); err != nil {
		t.Fatal(err)
	}
	pastDeadline(snap, deadline)
	st = o.until("stuck", phase(nwv1.VMOperationFailed))
	if want := "is Succeeded by KubeVirt but not good by VMSnapshotPolicy quick 1m0s past its failure deadline (Succeeded, not readyToUse yet); it is kept for a look"; !strings.Contains(st.Message, want) {
		t.Errorf("stuck: %q, want it to say %q", st.Message, want)
	}
	kept(snap)
}

// TestARestartThatCannotGoOnGivesTheRunStrategyBack: a Restart's VM does not go in the 10
// minutes after it was stopped. The request moves to its GiveBack step, stored before the VM
// gets its run strategy back: an operator killed right after that write finds the step on its
// return, and ends the request Failed, saying why and that the VM has its run strategy back,
// without stopping the VM again.
func TestARestartThatCannotGoOnGivesTheRunStrategyBack(t *testing.T) {
	t.Parallel()
	o := newOwner(t)
	clock := o.onFakeClock()
	o.playedVM("web")
	stop := o.startOperator()
	o.request("restart", nwv1.VMRestart, "web", "")
	o.approve("restart", nwv1.VMRestart)
	o.until("restart", o.stopping("web", virtv1.Running))
	stop()

	clock.SetTime(clock.Now().Add(10*time.Minute + 2*time.Second))
	k := testenv.NewCrash(func(w testenv.Write) bool {
		vm, isVM := w.Object.(*virtv1.VirtualMachine)
		return isVM && ptr.Deref(vm.Spec.RunStrategy, "") == virtv1.RunStrategyAlways
	})
	env.RunUntilCrash(t, k, o.cacheOptions(), func(_ context.Context, mgr manager.Manager, c client.Client, r client.Reader) error {
		return o.reconciler(c, r, mgr).SetupWithManager(mgr)
	})
	why := "its VirtualMachineInstance was still Running 10m0s after it was stopped"
	r := &nwv1.VMOperationRequest{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: o.ns, Name: "restart"}, r); err != nil {
		t.Fatal(err)
	}
	if st := r.Status; st.Phase != nwv1.VMOperationRunning || st.Step != nwv1.StepGiveBack || st.Message != why {
		t.Fatalf("killed as it gave the run strategy back, the request says phase %s, step %s, %q; want Running, GiveBack, %q", st.Phase, st.Step, st.Message, why)
	}
	givenBack := o.vm("web")

	o.startOperator()
	st := o.until("restart", phase(nwv1.VMOperationFailed))
	if want := why + ": VirtualMachine web has its run strategy Always back, on its disks"; st.Message != want || st.Step != nwv1.StepGiveBack {
		t.Errorf("failed at step %s: %q, want GiveBack: %q", st.Step, st.Message, want)
	}
	if vm := o.vm("web"); ptr.Deref(vm.Spec.RunStrategy, "") != virtv1.RunStrategyAlways || vm.Generation != givenBack.Generation {
		t.Errorf("the VM is %v at generation %d; given back Always at %d, it must not be stopped again", vm.Spec.RunStrategy, vm.Generation, givenBack.Generation)
	}
}

// TestObjectsWithARequestsLabelsItDidNotMakeAreNotUsed: a snapshot and a restore of the names
// two requests make, labelled with them but not what they would make (of another VM), are
// there before the requests run. The SnapshotNow fails without touching the VM; the Restore
// stops the VM, finds the restore, gives the VM its run strategy back on the disks it had, and
// fails. Neither uses nor changes the object it found.
func TestObjectsWithARequestsLabelsItDidNotMakeAreNotUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newOwner(t)
	o.withSite()
	o.site.RunningVM(t, env.Client, o.ns, "app", o.ns, 1<<20)
	running := o.vmi("app")
	// Made in this order, they run in it, one at a time.
	o.request("a-snap", nwv1.VMSnapshotNow, "app", "")
	stolenSnap := o.request("b-stolen", nwv1.VMSnapshotNow, "app", "")
	back := o.request("c-back", nwv1.VMRestore, "app", "a-snap-snapshot")
	labels := func(r *nwv1.VMOperationRequest) map[string]string {
		return map[string]string{nwv1.LabelVMOperationRequest: r.Name, nwv1.LabelVMOperationRequestUID: string(r.UID)}
	}
	other := corev1.TypedLocalObjectReference{APIGroup: ptr.To(virtv1.GroupVersion.Group), Kind: "VirtualMachine", Name: "other"}
	snap := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "b-stolen-snapshot", Labels: labels(stolenSnap)},
		Spec: snapv1.VirtualMachineSnapshotSpec{Source: other}}
	restore := &snapv1.VirtualMachineRestore{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "c-back-restore", Labels: labels(back)},
		Spec: snapv1.VirtualMachineRestoreSpec{Target: other, VirtualMachineSnapshotName: "a-snap-snapshot",
			TargetReadinessPolicy: ptr.To(snapv1.VirtualMachineRestoreFailImmediate)}}
	for _, obj := range []client.Object{snap, restore} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	o.startOperator()

	if st := o.until("a-snap", phase(nwv1.VMOperationSucceeded)); st.Snapshot != "a-snap-snapshot" {
		t.Fatalf("a-snap made %q", st.Snapshot)
	}
	st := o.until("b-stolen", phase(nwv1.VMOperationFailed))
	if want := "VirtualMachineSnapshot b-stolen-snapshot exists with this request's labels but is of VirtualMachine other: someone else made it; the request does not use it, and did nothing to the VM"; st.Message != want || st.Snapshot != "" {
		t.Errorf("b-stolen: %q, snapshot %q; want %q and none", st.Message, st.Snapshot, want)
	}
	if vmi := o.vmi("app"); vmi == nil || vmi.UID != running.UID {
		t.Errorf("the SnapshotNow touched the VM: its instance is %v", vmi)
	}

	st = o.until("c-back", phase(nwv1.VMOperationFailed))
	if want := "VirtualMachineRestore c-back-restore exists with this request's labels but is not the restore it makes (target other, snapshot a-snap-snapshot, readiness FailImmediate, patches or overrides set): someone else made it; the request does not use it: VirtualMachine app has its run strategy Always back, on the disks it had: nothing was restored"; st.Message != want || st.Step != nwv1.StepGiveBack || st.Restore != "" {
		t.Errorf("c-back: %q at step %s, restore %q; want %q at GiveBack, and none", st.Message, st.Step, st.Restore, want)
	}
	testenv.Eventually(t, wait, func() string {
		vm := o.vm("app")
		vmi := o.vmi("app")
		if ptr.Deref(vm.Spec.RunStrategy, "") != virtv1.RunStrategyAlways || vmi == nil || vmi.Status.Phase != virtv1.Running {
			return fmt.Sprintf("the VM is %v, its instance %v", vm.Spec.RunStrategy, vmi)
		}
		if claim := vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName; claim != "app-root" {
			return "the VM runs on claim " + claim + ", not on app-root, the one it had"
		}
		return ""
	})

	gotSnap := &snapv1.VirtualMachineSnapshot{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(snap), gotSnap); err != nil || gotSnap.Generation != snap.Generation || gotSnap.Spec.Source.Name != "other" {
		t.Errorf("the snapshot found was changed: generation %d, was %d, of %s (%v)", gotSnap.Generation, snap.Generation, gotSnap.Spec.Source.Name, err)
	}
	gotRestore := &snapv1.VirtualMachineRestore{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(restore), gotRestore); err != nil || gotRestore.Generation != restore.Generation || gotRestore.Spec.Target.Name != "other" {
		t.Errorf("the restore found was changed: generation %d, was %d, of %s (%v)", gotRestore.Generation, restore.Generation, gotRestore.Spec.Target.Name, err)
	}
}
