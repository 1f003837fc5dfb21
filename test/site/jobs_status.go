package site

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// jobPods counts a Job's pods the way the Job controller does.
type jobPods struct {
	succeeded, failed int32
	active            []*corev1.Pod // not finished, not being deleted
	terminating       int32         // not finished, being deleted
	ready             int32
}

func countPods(pods []*corev1.Pod) jobPods {
	var c jobPods
	for _, pod := range pods {
		switch {
		case pod.Status.Phase == corev1.PodSucceeded:
			c.succeeded++
		case pod.Status.Phase == corev1.PodFailed:
			c.failed++
		case pod.DeletionTimestamp != nil:
			c.terminating++
		default:
			c.active = append(c.active, pod)
			if podReady(pod) {
				c.ready++
			}
		}
	}
	return c
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// jobVerdict is what the Job controller concludes from the pods.
type jobVerdict struct {
	// failReason and failMessage are set once the Job has failed (FailureTarget).
	failReason, failMessage string
	// succeeded is set once enough pods succeeded (SuccessCriteriaMet).
	succeeded bool
	// deadline is when activeDeadlineSeconds runs out; zero without one.
	deadline time.Time
}

func judgeJob(job *batchv1.Job, pods jobPods, start, now time.Time) jobVerdict {
	var v jobVerdict
	if secs := job.Spec.ActiveDeadlineSeconds; secs != nil {
		v.deadline = start.Add(time.Duration(*secs) * time.Second)
	}
	switch {
	case jobCondition(job, batchv1.JobFailureTarget) != nil:
		c := jobCondition(job, batchv1.JobFailureTarget)
		v.failReason, v.failMessage = c.Reason, c.Message
	case jobCondition(job, batchv1.JobSuccessCriteriaMet) != nil:
		v.succeeded = true
	case pods.succeeded >= ptr.Deref(job.Spec.Completions, 1):
		v.succeeded = true
	case pods.failed > ptr.Deref(job.Spec.BackoffLimit, 6):
		v.failReason, v.failMessage = batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"
	case !v.deadline.IsZero() && !now.Before(v.deadline):
		v.failReason, v.failMessage = batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline"
	}
	return v
}

// jobStatus computes the Job's status as the Kubernetes 1.34 Job controller writes it: the
// interim condition (SuccessCriteriaMet or FailureTarget) first, and the terminal one
// (Complete with completionTime, or Failed) once no pod is left running or terminating.
func jobStatus(job *batchv1.Job, pods jobPods, v jobVerdict, start, now metav1.Time) batchv1.JobStatus {
	status := *job.Status.DeepCopy()
	if status.StartTime == nil {
		status.StartTime = &start
	}
	status.Active = int32(len(pods.active))
	status.Ready = ptr.To(pods.ready)
	status.Terminating = ptr.To(pods.terminating)
	status.Succeeded = max(status.Succeeded, pods.succeeded)
	status.Failed = max(status.Failed, pods.failed)
	if status.UncountedTerminatedPods == nil {
		status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}
	settled := status.Active == 0 && pods.terminating == 0
	switch {
	case v.failReason != "":
		status.Conditions = setJobCondition(status.Conditions, batchv1.JobFailureTarget, v.failReason, v.failMessage, now)
		if settled {
			status.Conditions = setJobCondition(status.Conditions, batchv1.JobFailed, v.failReason, v.failMessage, now)
		}
	case v.succeeded:
		status.Conditions = setJobCondition(status.Conditions, batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, "Reached expected number of succeeded pods", now)
		if settled {
			status.Conditions = setJobCondition(status.Conditions, batchv1.JobComplete, batchv1.JobReasonCompletionsReached, "Reached expected number of succeeded pods", now)
			if status.CompletionTime == nil {
				status.CompletionTime = &now
			}
		}
	}
	return status
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// jobFinished says whether the Job has its terminal condition.
func jobFinished(job *batchv1.Job) bool {
	return jobCondition(job, batchv1.JobComplete) != nil || jobCondition(job, batchv1.JobFailed) != nil
}

// setJobCondition adds a True condition once; a condition already True is left as it is.
func setJobCondition(conds []batchv1.JobCondition, t batchv1.JobConditionType, reason, message string, now metav1.Time) []batchv1.JobCondition {
	for _, c := range conds {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return conds
		}
	}
	return append(conds, batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastProbeTime: now, LastTransitionTime: now})
}
