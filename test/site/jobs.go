package site

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The Job controller, for one pod at a time, and the garbage collector's handling of a Job's
// pods. The labels are the ones the Job controller puts on its pods.
const (
	labelJobName       = "batch.kubernetes.io/job-name"
	labelControllerUID = "batch.kubernetes.io/controller-uid"
	legacyJobName      = "job-name"
	legacyControllerID = "controller-uid"
)

func (s *Site) setupJobs() error {
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool { return s.inScope(o.GetNamespace()) })
	return ctrl.NewControllerManagedBy(s.mgr).
		Named("site-jobs").
		For(&batchv1.Job{}, builder.WithPredicates(inScope)).
		Owns(&corev1.Pod{}, builder.WithPredicates(inScope)).
		Complete(reconcile.Func(s.reconcileJob))
}

func (s *Site) reconcileJob(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	job := &batchv1.Job{}
	if err := s.client.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, s.collectJobPods(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	pods, err := s.podsOf(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if job.DeletionTimestamp != nil {
		return ctrl.Result{}, s.finishJobDeletion(ctx, job, pods)
	}
	if jobFinished(job) || ptr.Deref(job.Spec.Suspend, false) {
		return ctrl.Result{}, nil
	}
	now := metav1.Now()
	start := now
	if job.Status.StartTime != nil {
		start = *job.Status.StartTime
	}
	counts := countPods(pods)
	verdict := judgeJob(job, counts, start.Time, now.Time)
	switch {
	case verdict.failReason != "" || verdict.succeeded:
		for _, pod := range counts.active {
			if err := s.deletePod(ctx, pod); err != nil {
				return ctrl.Result{}, err
			}
		}
		counts.terminating += int32(len(counts.active))
		counts.active, counts.ready = nil, 0
	case len(counts.active) == 0 && counts.terminating == 0:
		pod, err := s.createJobPod(ctx, job, counts.succeeded+counts.failed)
		if err != nil {
			return ctrl.Result{}, err
		}
		counts.active = append(counts.active, pod)
	}
	status := jobStatus(job, counts, verdict, start, now)
	if !equality.Semantic.DeepEqual(status, job.Status) {
		before := job.DeepCopy()
		job.Status = status
		if err := ignoreGone(s.client.Status().Patch(ctx, job, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the status of Job %s/%s: %w", job.Namespace, job.Name, err)
		}
	}
	if !verdict.deadline.IsZero() && verdict.failReason == "" && !verdict.succeeded {
		return ctrl.Result{RequeueAfter: time.Until(verdict.deadline)}, nil
	}
	return ctrl.Result{}, nil
}

// podsOf lists the pods the Job controls.
func (s *Site) podsOf(ctx context.Context, job *batchv1.Job) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := s.client.List(ctx, list, client.InNamespace(job.Namespace), client.MatchingLabels{labelControllerUID: string(job.UID)}); err != nil {
		return nil, fmt.Errorf("listing the pods of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], job) {
			pods = append(pods, &list.Items[i])
		}
	}
	return pods, nil
}

// createJobPod makes the Job's attempt-th pod, bound to the site's node. The name is derived
// from the Job and the attempt, so a stale cache cannot make a second pod for one attempt.
func (s *Site) createJobPod(ctx context.Context, job *batchv1.Job, attempt int32) (*corev1.Pod, error) {
	tmpl := job.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       job.Namespace,
			Name:            job.Name + "-" + podSuffix(job.UID, attempt),
			Labels:          tmpl.Labels,
			Annotations:     tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: tmpl.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[labelJobName] = job.Name
	pod.Labels[legacyJobName] = job.Name
	pod.Labels[labelControllerUID] = string(job.UID)
	pod.Labels[legacyControllerID] = string(job.UID)
	pod.Spec.NodeName = s.opts.NodeName // the scheduler's part
	err := s.client.Create(ctx, pod)
	if apierrors.IsAlreadyExists(err) {
		err = s.client.Get(ctx, client.ObjectKeyFromObject(pod), pod)
	}
	if err != nil {
		return nil, fmt.Errorf("creating a pod for Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return pod, nil
}

// podSuffix is five characters of the alphabet generateName uses.
func podSuffix(uid types.UID, attempt int32) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", uid, attempt)
	sum := h.Sum64()
	out := make([]byte, 5)
	for i := range out {
		out[i] = alphabet[sum%uint64(len(alphabet))]
		sum /= uint64(len(alphabet))
	}
	return string(out)
}

// deletePod asks for a pod's deletion; the kubelet stops its process and finishes it.
func (s *Site) deletePod(ctx context.Context, pod *corev1.Pod) error {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	if err := ignoreGone(s.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})); err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// collectJobPods is the garbage collector: the pods of a Job that is gone are deleted.
func (s *Site) collectJobPods(ctx context.Context, key types.NamespacedName) error {
	list := &corev1.PodList{}
	if err := s.client.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingLabels{labelJobName: key.Name}); err != nil {
		return err
	}
	for i := range list.Items {
		pod := &list.Items[i]
		owner := metav1.GetControllerOf(pod)
		if owner == nil || owner.Kind != "Job" || owner.Name != key.Name {
			continue
		}
		gone, err := s.jobGone(ctx, key, owner.UID)
		if err != nil {
			return err
		}
		if gone {
			if err := s.deletePod(ctx, pod); err != nil {
				return err
			}
		}
	}
	return nil
}

// jobGone asks the API server, not the cache, whether the Job with uid still exists.
func (s *Site) jobGone(ctx context.Context, key types.NamespacedName, uid types.UID) (bool, error) {
	job := &batchv1.Job{}
	err := s.mgr.GetAPIReader().Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return err == nil && job.UID != uid, err
}

// finishJobDeletion plays the garbage collector's finalizers: orphan takes the Job's
// reference off its pods, foregroundDeletion deletes them and lets the Job go once they are
// gone.
func (s *Site) finishJobDeletion(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) error {
	switch {
	case controllerutil.ContainsFinalizer(job, metav1.FinalizerOrphanDependents):
		for _, pod := range pods {
			before := pod.DeepCopy()
			pod.OwnerReferences = slices.DeleteFunc(pod.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == job.UID })
			if err := ignoreGone(s.client.Patch(ctx, pod, client.MergeFrom(before))); err != nil {
				return fmt.Errorf("orphaning pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
		}
		return s.removeJobFinalizer(ctx, job, metav1.FinalizerOrphanDependents)
	case controllerutil.ContainsFinalizer(job, metav1.FinalizerDeleteDependents):
		for _, pod := range pods {
			if err := s.deletePod(ctx, pod); err != nil {
				return err
			}
		}
		if len(pods) > 0 {
			return nil // woken again as each pod goes
		}
		return s.removeJobFinalizer(ctx, job, metav1.FinalizerDeleteDependents)
	}
	return nil
}

func (s *Site) removeJobFinalizer(ctx context.Context, job *batchv1.Job, finalizer string) error {
	before := job.DeepCopy()
	controllerutil.RemoveFinalizer(job, finalizer)
	if err := ignoreGone(s.client.Patch(ctx, job, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))); err != nil {
		return fmt.Errorf("removing %s from Job %s/%s: %w", finalizer, job.Namespace, job.Name, err)
	}
	return nil
}
