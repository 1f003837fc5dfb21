package vmvolumemigration

import (
	"context"
	"fmt"
	"strings"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// snapshotTimeout bounds the wait for a snapshot to become ready to use.
const snapshotTimeout = 10 * time.Minute

// jobStartTimeout bounds the wait for a data Job's pod to be created and to start.
const jobStartTimeout = 5 * time.Minute

// bindTimeout bounds the wait for the target PVC to be bound.
const bindTimeout = 10 * time.Minute

// podStartPoll is how often the wait for a data Job's pod to start looks at it: pods are not
// watched.
const podStartPoll = 2 * time.Second

// jobRecheck bounds the wait for a running data Job's end, which its watch delivers at once.
const jobRecheck = 30 * time.Second

// vmSteps are the steps that act on the VM; the others need neither the VM nor its record.
var vmSteps = map[migration.Step]bool{
	migration.FreezeGuest: true, migration.ThawGuest: true, migration.StopVM: true, migration.Repoint: true,
	migration.StartVM: true, migration.RollbackThawGuest: true, migration.RollbackStopVM: true,
	migration.RollbackRepoint: true, migration.RollbackStartVM: true,
}

// Actions are the steps' actions. Before any but Validate and RollbackCleanup, the VM and the
// migration's record on it must be there: a step that acts on a VM gone during a rollback has
// nothing to undo, and otherwise the step fails saying what is missing. The engine fails a step
// on what retrying cannot fix: a child's name taken by someone else's object, or a write the
// API server refuses as invalid or forbidden (KubeVirt's admission refusing a VM change, say).
func (r *Reconciler) Actions() engine.Actions[*nwv1.VMVolumeMigration] {
	type action = func(context.Context, *scope) (engine.Outcome, error)
	held := func(act action) action {
		return func(ctx context.Context, s *scope) (engine.Outcome, error) {
			step := s.State.Step
			if s.rec == nil && s.vm != nil {
				// The cache may not show the record Validate just wrote: ask the API server.
				if err := r.refreshVM(ctx, s); err != nil {
					return engine.Outcome{}, err
				}
			}
			switch {
			case s.vm == nil && s.State.Phase == nwv1.WorkflowRollingBack && vmSteps[step]:
				return engine.Skipped("%s", migration.VMDeleted(s.m.Spec.VMName, step, true)), nil
			case s.vm == nil:
				return engine.Failed("%s", migration.VMDeleted(s.m.Spec.VMName, step, s.State.Phase == nwv1.WorkflowRollingBack)), nil
			case s.rec == nil:
				return engine.Failed("the migration's record on VirtualMachine %s (annotation %s) is gone; what to restore is unknown", s.m.Spec.VMName, AnnotationMigration), nil
			}
			return act(ctx, s)
		}
	}
	return engine.Scoped(r.newScope, map[workflow.Step]action{
		migration.Validate: r.validate,
		migration.SnapshotSource: held(func(ctx context.Context, s *scope) (engine.Outcome, error) {
			return r.snapshot(ctx, s, migration.SuffixBefore, s.m.Status.SourcePVCName)
		}),
		migration.FreezeGuest: held(func(ctx context.Context, s *scope) (engine.Outcome, error) { return r.freeze(ctx, s, true) }),
		migration.CloneSource: held(func(ctx context.Context, s *scope) (engine.Outcome, error) { return r.createTarget(ctx, s, true) }),
		migration.ThawGuest:   held(r.thaw),
		migration.VerifyClone: held(r.verifyClone),
		migration.StopVM:      held(r.stopVM),
		migration.CreateTarget: held(func(ctx context.Context, s *scope) (engine.Outcome, error) {
			return r.createTarget(ctx, s, false)
		}),
		migration.Copy: held(func(ctx context.Context, s *scope) (engine.Outcome, error) {
			return r.dataJob(ctx, s, migration.SuffixCopy, "copy", s.m.Status.SourcePVCName, s.m.Status.TargetPVCName)
		}),
		migration.Repoint: held(func(ctx context.Context, s *scope) (engine.Outcome, error) {
			return r.repoint(ctx, s, targetSource(s.rec.Volume, s.m.Status.TargetPVCName), "volume %s now names PVC %s", s.m.Spec.VolumeName, s.m.Status.TargetPVCName)
		}),
		migration.StartVM: held(func(ctx context.Context, s *scope) (engine.Outcome, error) {
			return r.startVM(ctx, s, s.m.Status.TargetPVCName)
		}),
		migration.SnapshotTarget: held(func(ctx context.Context, s *scope) (engine.Outcome, error) {
			return r.snapshot(ctx, s, migration.SuffixAfter, s.m.Status.TargetPVCName)
		}),
		migration.ReleaseSource:     held(r.releaseSource),
		migration.RollbackThawGuest: held(r.thaw),
		migration.RollbackStopVM:    held(r.stopVM),
		migration.RollbackRepoint: held(func(ctx context.Context, s *scope) (engine.Outcome, error) {
			return r.repoint(ctx, s, s.rec.Volume, "volume %s points at PVC %s again", s.m.Spec.VolumeName, migration.ClaimOf(s.rec.Volume))
		}),
		migration.RollbackStartVM: held(func(ctx context.Context, s *scope) (engine.Outcome, error) {
			return r.startVM(ctx, s, migration.ClaimOf(s.rec.Volume))
		}),
		migration.RollbackCleanup: r.cleanup,
	})
}

// thaw thaws the guest (ThawGuest, and RollbackThawGuest for a guest that may still be
// frozen).
func (r *Reconciler) thaw(ctx context.Context, s *scope) (engine.Outcome, error) {
	return r.freeze(ctx, s, false)
}

// snapshot takes (or waits for) one of the bookends.
func (r *Reconciler) snapshot(ctx context.Context, s *scope, suffix, pvcName string) (engine.Outcome, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.m.Namespace, Name: pvcName}, pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return engine.Failed("PVC %s is gone", pvcName), nil
		}
		return engine.Outcome{}, err
	}
	class, problem, err := r.checker().SnapshotClass(ctx, s.m, ptr.Deref(pvc.Spec.StorageClassName, ""))
	if err != nil || problem != "" {
		return engine.Failed("%s", problem), err
	}
	name := migration.ChildName(s.m, suffix)
	vs := newSnapshot(s.m, name, pvcName, class)
	if err := r.ensure(ctx, s.m, vs); err != nil {
		return engine.Outcome{}, err
	}
	if suffix == migration.SuffixBefore {
		s.m.Status.Snapshots.Before = name
	} else {
		s.m.Status.Snapshots.After = name
	}
	// The snapshot controller reports its last error, which may be a passing one (a conflict
	// while it adds a finalizer): readiness wins, and an error fails the step only at the
	// deadline, with the error as the reason.
	ready, lastError := snapshotState(vs)
	if ready {
		return engine.Succeeded("VolumeSnapshot %s of PVC %s is ready (class %s)", name, pvcName, class), nil
	}
	waitingFor := "waiting for VolumeSnapshot " + name + " to be ready"
	if lastError != "" {
		waitingFor += "; its driver reported: " + lastError
	}
	if passed, left := s.Deadline(snapshotTimeout); passed {
		return engine.Failed("VolumeSnapshot %s was not ready within %s; %s", name, snapshotTimeout, waitingFor), nil
	} else {
		return engine.Waiting(left, "%s", waitingFor), nil
	}
}

// freeze freezes or thaws the guest when its agent is connected; without an agent the
// snapshot and the clone are crash-consistent, which the step says.
func (r *Reconciler) freeze(ctx context.Context, s *scope, frozen bool) (engine.Outcome, error) {
	if !agentConnected(s.vmi) {
		if frozen {
			return engine.Skipped("no guest agent connected: the snapshot and the clone are crash-consistent"), nil
		}
		return engine.Skipped("no guest agent connected: nothing to thaw"), nil
	}
	if err := setFrozen(ctx, r.Clientset, s.m.Namespace, s.vmi.Name, frozen); err != nil {
		if frozen {
			return engine.Failed("%v", err), nil
		}
		return engine.Outcome{}, err
	}
	if frozen {
		return engine.Succeeded("guest file systems frozen (KubeVirt thaws them after %s if the thaw never comes)", unfreezeGracePeriod), nil
	}
	return engine.Succeeded("guest file systems thawed"), nil
}

// createTarget creates the target PVC: empty for a copy, or a CSI clone of the source.
func (r *Reconciler) createTarget(ctx context.Context, s *scope, clone bool) (engine.Outcome, error) {
	src := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.m.Namespace, Name: s.m.Status.SourcePVCName}, src); err != nil {
		if apierrors.IsNotFound(err) {
			return engine.Failed("source PVC %s is gone", s.m.Status.SourcePVCName), nil
		}
		return engine.Outcome{}, err
	}
	size := migration.PVCSize(src)
	if s.m.Spec.Target.Size != nil {
		size = *s.m.Spec.Target.Size
	}
	var dataSource *corev1.TypedLocalObjectReference
	if clone {
		// A clone of the "before" snapshot, not of the live volume: the clone and the snapshot
		// are then the same moment whatever the guest writes, and the verify compares the two.
		dataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: s.m.Status.Snapshots.Before}
	}
	pvc := newTargetPVC(s.m, s.m.Status.TargetPVCName, size, dataSource)
	if err := r.ensure(ctx, s.m, pvc); err != nil {
		return engine.Outcome{}, err
	}
	how := "created"
	if clone {
		how = "cloned from VolumeSnapshot " + s.m.Status.Snapshots.Before
	}
	if migration.PVCBound(pvc) || !r.bindsImmediately(ctx, s.m.Spec.Target.StorageClassName) {
		return engine.Succeeded("PVC %s %s (%s, class %s)", pvc.Name, how, size.String(), s.m.Spec.Target.StorageClassName), nil
	}
	if passed, left := s.Deadline(bindTimeout); passed {
		return engine.Failed("PVC %s was not bound within %s (class %s)", pvc.Name, bindTimeout, s.m.Spec.Target.StorageClassName), nil
	} else {
		return engine.Waiting(left, "waiting for PVC %s to be bound", pvc.Name), nil
	}
}

// bindsImmediately reports whether the class binds PVCs at once; with WaitForFirstConsumer a
// PVC binds only when the data Job uses it.
func (r *Reconciler) bindsImmediately(ctx context.Context, class string) bool {
	sc := &storagev1.StorageClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: class}, sc); err != nil {
		return true
	}
	return sc.VolumeBindingMode == nil || *sc.VolumeBindingMode == "Immediate"
}

// verifyClone restores the "before" snapshot into a PVC and runs nodewright-copy verify
// between it and the clone.
func (r *Reconciler) verifyClone(ctx context.Context, s *scope) (engine.Outcome, error) {
	src := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.m.Namespace, Name: s.m.Status.SourcePVCName}, src); err != nil {
		if apierrors.IsNotFound(err) {
			return engine.Failed("source PVC %s is gone", s.m.Status.SourcePVCName), nil
		}
		return engine.Outcome{}, err
	}
	view := newViewPVC(s.m, migration.ChildName(s.m, migration.SuffixView), ptr.Deref(src.Spec.StorageClassName, ""), s.m.Status.Snapshots.Before, migration.PVCSize(src))
	if err := r.ensure(ctx, s.m, view); err != nil {
		return engine.Outcome{}, err
	}
	return r.dataJob(ctx, s, migration.SuffixVerify, "verify", view.Name, s.m.Status.TargetPVCName)
}

// dataJob runs nodewright-copy in a Job and turns its result into the step's outcome: the
// digests into status.checksum, its progress into status.progress.
func (r *Reconciler) dataJob(ctx context.Context, s *scope, suffix, command, source, target string) (engine.Outcome, error) {
	job := DataJob(s.m, migration.ChildName(s.m, suffix), r.CopyImage, command, source, target)
	if err := r.ensure(ctx, s.m, job); err != nil {
		return engine.Outcome{}, err
	}
	s.m.Status.JobName = job.Name
	pod, err := jobPod(ctx, r.Client, job)
	if err != nil {
		return engine.Outcome{}, err
	}
	done, jobFailed := jobFinished(job)
	if !done && (pod == nil || pod.Status.Phase == corev1.PodPending) {
		if passed, left := s.Deadline(jobStartTimeout); passed {
			return engine.Failed("Job %s did not start its pod within %s: %s", job.Name, jobStartTimeout, podTrouble(pod)), nil
		} else {
			return engine.Waiting(min(left, podStartPoll), "waiting for Job %s to start its pod: %s", job.Name, podTrouble(pod)), nil
		}
	}
	if !done {
		// The Job's watch wakes this when it ends. Its progress is in its pod's log, which
		// the operator does not read (migration.ReadCopyProgress): the person's tools do.
		return engine.Waiting(jobRecheck, "Job %s is running nodewright-copy %s (kubectl nodewright migrate watch shows its progress)", job.Name, command), nil
	}
	if pod != nil && !terminated(pod) {
		// The Job's status can reach the cache before its pod's: read the pod itself.
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil && !apierrors.IsNotFound(err) {
			return engine.Outcome{}, err
		}
		if !terminated(pod) {
			return engine.Waiting(time.Second, "Job %s finished; waiting for its pod's result", job.Name), nil
		}
	}
	res, err := jobResult(pod)
	if err != nil {
		if jobFailed {
			return engine.Failed("Job %s failed: %v", job.Name, err), nil
		}
		return engine.Failed("Job %s completed without a result: %v", job.Name, err), nil
	}
	s.m.Status.Checksum = &nwv1.MigrationChecksum{Algorithm: algorithmOf(s.m), Source: res.SourceDigest, Target: res.TargetDigest}
	match := !jobFailed && res.Status == "ok" && res.SourceDigest != "" && res.SourceDigest == res.TargetDigest
	if res.Status == "mismatch" || (!jobFailed && !match) {
		setVerified(s.m, false, describeFailure(res))
		return engine.Failed("%s", describeFailure(res)), nil
	}
	if jobFailed || !match {
		return engine.Failed("%s", describeFailure(res)), nil
	}
	if command == "copy" && vmStarted(s) {
		return engine.Failed("VM %s was started while its volume was copied: the copy may miss what it wrote", s.m.Spec.VMName), nil
	}
	setProgress(s.m, res.BytesTotal, res.BytesTotal)
	setVerified(s.m, true, fmt.Sprintf("the target reads back as %s, the source's digest", res.TargetDigest))
	verb := "copied"
	if command == "verify" {
		verb = "verified"
	}
	return engine.Succeeded("%d bytes %s in %.1fs; source and target both %s", res.BytesTotal, verb, res.Seconds, res.TargetDigest), nil
}

func algorithmOf(m *nwv1.VMVolumeMigration) nwv1.ChecksumAlgorithm {
	if m.Spec.ChecksumAlgorithm == "" {
		return nwv1.ChecksumBLAKE3
	}
	return m.Spec.ChecksumAlgorithm
}

func setVerified(m *nwv1.VMVolumeMigration, ok bool, message string) {
	c := metav1.Condition{Type: nwv1.ConditionVerified, Status: metav1.ConditionTrue, Reason: nwv1.ReasonChecksumMatch, Message: message, ObservedGeneration: m.Generation}
	if !ok {
		c.Status, c.Reason = metav1.ConditionFalse, nwv1.ReasonChecksumMismatch
	}
	meta.SetStatusCondition(&m.Status.Conditions, c)
}

// stopVM stops the VM (if it ran) and waits until its VMI is gone.
func (r *Reconciler) stopVM(ctx context.Context, s *scope) (engine.Outcome, error) {
	if !s.rec.WasRunning && s.vmi == nil {
		return engine.Skipped("the VM was not running"), nil
	}
	if err := stopVM(ctx, r.Client, s.vm); err != nil {
		return engine.Outcome{}, err
	}
	if s.vmi == nil {
		return engine.Succeeded("VM %s stopped", s.vm.Name), nil
	}
	limit := s.m.Spec.Timeouts.VMStop.Duration
	if passed, left := s.Deadline(limit); passed {
		return engine.Failed("VM %s did not stop within %s (VMI phase %s)", s.vm.Name, limit, s.vmi.Status.Phase), nil
	} else {
		return engine.Waiting(left, "waiting for VMI %s to go (phase %s)", s.vmi.Name, s.vmi.Status.Phase), nil
	}
}

// repoint points the VM's volume at src.
func (r *Reconciler) repoint(ctx context.Context, s *scope, src virtv1.VolumeSource, format string, args ...any) (engine.Outcome, error) {
	if migration.VolumeOf(s.vm, s.m.Spec.VolumeName) == nil {
		return engine.Failed("VirtualMachine %s no longer has a volume %q", s.vm.Name, s.m.Spec.VolumeName), nil
	}
	if s.State.Step == migration.Repoint && vmStarted(s) {
		return engine.Failed("VM %s was started after StopVM: it may have written to the source since the copy", s.vm.Name), nil
	}
	if err := pointVolume(ctx, r.Client, s.vm, s.m.Spec.VolumeName, src); err != nil {
		return engine.Outcome{}, err
	}
	return engine.Succeeded(format, args...), nil
}

// startVM starts the VM again (if it ran before) and waits until its VMI runs on claim.
func (r *Reconciler) startVM(ctx context.Context, s *scope, claim string) (engine.Outcome, error) {
	if s.State.Step == migration.RollbackStartVM {
		// A data Job may still hold the source; the VM could not attach it.
		gone, err := r.deleteEphemeral(ctx, s)
		if err != nil {
			return engine.Outcome{}, err
		}
		if pods, err := r.dataPods(ctx, s.m); err != nil || !gone || pods > 0 {
			return engine.Waiting(time.Second, "waiting for the data Jobs and their pods to go before the VM starts on its source"), err
		}
	}
	if !s.rec.WasRunning {
		return engine.Skipped("the VM was not running before the migration; it stays stopped"), nil
	}
	if err := restoreRunStrategy(ctx, r.Client, s.vm, s.rec); err != nil {
		return engine.Outcome{}, err
	}
	if vmiRunsOn(s.vmi, s.m.Spec.VolumeName, claim) {
		return engine.Succeeded("VM %s runs with volume %s on PVC %s", s.vm.Name, s.m.Spec.VolumeName, claim), nil
	}
	limit := s.m.Spec.Timeouts.VMStart.Duration
	status := string(s.vm.Status.PrintableStatus)
	if s.vmi != nil && s.vmi.Status.Phase == virtv1.Failed && vmiUses(s.vmi, s.m.Spec.VolumeName, claim) {
		return engine.Failed("VM %s failed to start on PVC %s (status %s)", s.vm.Name, claim, status), nil
	}
	if passed, left := s.Deadline(limit); passed {
		return engine.Failed("VM %s did not run on PVC %s within %s (status %s)", s.vm.Name, claim, limit, status), nil
	} else {
		return engine.Waiting(left, "waiting for VM %s to run on PVC %s (status %s)", s.vm.Name, claim, status), nil
	}
}

// vmiUses reports whether the VMI was started with the named volume on claim.
func vmiUses(vmi *virtv1.VirtualMachineInstance, volume, claim string) bool {
	for _, v := range vmi.Spec.Volumes {
		if v.Name == volume {
			return migration.ClaimOf(v.VolumeSource) == claim
		}
	}
	return false
}

// releaseSource deletes the source PVC once the VM runs on the verified target and both
// bookends exist.
func (r *Reconciler) releaseSource(ctx context.Context, s *scope) (engine.Outcome, error) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: s.m.Namespace, Name: s.m.Status.SourcePVCName}}
	if err := r.Client.Delete(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsForbidden(err) {
			return engine.Failed("deleting source PVC %s: %v", pvc.Name, err), nil
		}
		return engine.Outcome{}, err
	}
	return engine.Succeeded("source PVC %s deleted (spec.retainSource is false)", pvc.Name), nil
}

// cleanup deletes everything the migration created and waits until it is gone. An object
// that bears one of its children's names but was not made by it is left alone, and named.
func (r *Reconciler) cleanup(ctx context.Context, s *scope) (engine.Outcome, error) {
	gone, err := r.deleteEphemeral(ctx, s)
	if err != nil {
		return engine.Outcome{}, err
	}
	made := []client.Object{
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: s.m.Namespace, Name: migration.ChildName(s.m, migration.SuffixTarget)}},
		&snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: s.m.Namespace, Name: migration.ChildName(s.m, migration.SuffixBefore)}},
		&snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: s.m.Namespace, Name: migration.ChildName(s.m, migration.SuffixAfter)}},
	}
	for _, obj := range made {
		g, err := deleteIfOurs(ctx, r.Client, s.m, obj)
		if err != nil {
			return engine.Outcome{}, err
		}
		gone = gone && g
	}
	if !gone {
		return engine.Waiting(0, "waiting for the migration's PVCs, snapshots and Jobs to be deleted"), nil
	}
	deleted := "deleted the migration's target PVC, snapshots and data Jobs"
	var untouched []string
	for _, obj := range made {
		// Read past the cache, which holds only the migration's own snapshots.
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return engine.Outcome{}, err
		}
		if migration.Owner(s.m).Owns(obj) {
			continue // ours, and being deleted
		}
		if _, pvc := obj.(*corev1.PersistentVolumeClaim); pvc {
			deleted = "deleted the migration's snapshots and data Jobs"
		}
		untouched = append(untouched, fmt.Sprintf("%s %s exists and was not made by this migration: left untouched", kindOf(obj), obj.GetName()))
	}
	if len(untouched) > 0 {
		return engine.Succeeded("%s; %s", deleted, strings.Join(untouched, "; ")), nil
	}
	return engine.Succeeded("%s", deleted), nil
}

// deleteEphemeral deletes the data Jobs (with their pods) and the snapshot view, reporting
// whether they are gone.
func (r *Reconciler) deleteEphemeral(ctx context.Context, s *scope) (bool, error) {
	gone := true
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, obj := range []struct {
		obj  client.Object
		opts []client.DeleteOption
	}{
		{&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: s.m.Namespace, Name: migration.ChildName(s.m, migration.SuffixCopy)}}, []client.DeleteOption{background}},
		{&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: s.m.Namespace, Name: migration.ChildName(s.m, migration.SuffixVerify)}}, []client.DeleteOption{background}},
		{&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: s.m.Namespace, Name: migration.ChildName(s.m, migration.SuffixView)}}, nil},
	} {
		g, err := deleteIfOurs(ctx, r.Client, s.m, obj.obj, obj.opts...)
		if err != nil {
			return false, err
		}
		gone = gone && g
	}
	return gone, nil
}

// vmStarted reports whether the VM runs, or is asked to, although the migration stopped it.
func vmStarted(s *scope) bool {
	return (s.vmi != nil && !s.vmi.IsFinal()) || (s.vm != nil && wantsRunning(s.vm))
}

// terminated reports whether the pod's data container has exited.
func terminated(pod *corev1.Pod) bool {
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name == migration.CopyContainer && c.State.Terminated != nil {
			return true
		}
	}
	return false
}

// podTrouble says why a data pod has not started, as far as its status tells.
func podTrouble(pod *corev1.Pod) string {
	if pod == nil {
		return "no pod yet (the Job's Events say why: a Pod Security level that forbids root, a quota...)"
	}
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf("pod %s: %s %s", pod.Name, w.Reason, w.Message)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return fmt.Sprintf("pod %s: %s: %s", pod.Name, c.Reason, c.Message)
		}
	}
	return fmt.Sprintf("pod %s is %s", pod.Name, pod.Status.Phase)
}

// dataPods counts the pods of the migration's data Jobs.
func (r *Reconciler) dataPods(ctx context.Context, m *nwv1.VMVolumeMigration) (int, error) {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabels{LabelMigrationUID: string(m.UID)}); err != nil {
		return 0, err
	}
	return len(pods.Items), nil
}

// refreshVM reads the VM and its record from the API server rather than the cache.
func (r *Reconciler) refreshVM(ctx context.Context, s *scope) error {
	vm := &virtv1.VirtualMachine{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.vm), vm); err != nil {
		if apierrors.IsNotFound(err) {
			s.vm = nil
			return nil
		}
		return err
	}
	s.vm = vm
	if rec, err := migration.RecordOf(vm); err == nil && rec.HeldBy(s.m) {
		s.rec = rec
	}
	return nil
}
