package site

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The pod statuses the kubelet reports.

const siteIP = "127.0.0.1"

func (k *kubelet) writeStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	if equality.Semantic.DeepEqual(status, pod.Status) {
		return nil
	}
	before := pod.DeepCopy()
	pod.Status = status
	if err := ignoreGone(k.s.client.Status().Patch(ctx, pod, client.MergeFrom(before))); err != nil {
		return fmt.Errorf("writing the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// baseStatus is the part every status shares: the pod is on the site's node.
func baseStatus(pod *corev1.Pod) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	st.HostIP = siteIP
	st.HostIPs = []corev1.HostIP{{IP: siteIP}}
	now := metav1.Now()
	st.Conditions = setPodCondition(st.Conditions, corev1.PodScheduled, corev1.ConditionTrue, "", now)
	return st
}

func waitingStatus(pod *corev1.Pod, waiting string) corev1.PodStatus {
	st := baseStatus(pod)
	st.Phase = corev1.PodPending
	c := pod.Spec.Containers[0]
	st.ContainerStatuses = []corev1.ContainerStatus{{
		Name: c.Name, Image: c.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: waiting}},
	}}
	return st
}

func runningStatus(pod *corev1.Pod, c *container) corev1.PodStatus {
	st := baseStatus(pod)
	st.Phase = corev1.PodRunning
	st.StartTime = &c.started
	now := metav1.Now()
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = setPodCondition(st.Conditions, t, corev1.ConditionTrue, "", now)
	}
	spec := pod.Spec.Containers[0]
	st.ContainerStatuses = []corev1.ContainerStatus{{
		Name: spec.Name, Image: spec.Image, ImageID: spec.Image, ContainerID: containerID(pod),
		Ready: true, Started: ptr.To(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: c.started}},
	}}
	return st
}

func terminatedStatus(pod *corev1.Pod, c *container) corev1.PodStatus {
	return finishedStatus(pod, &c.started, corev1.ContainerStateTerminated{
		ExitCode: c.exit.code, Reason: c.exit.reason, Message: c.exit.message,
		StartedAt: c.started, FinishedAt: c.exit.finished, ContainerID: containerID(pod),
	})
}

// cannotRunStatus fails a pod the site cannot run, as a runtime fails a container that cannot
// be created.
func cannotRunStatus(pod *corev1.Pod, err error) corev1.PodStatus {
	now := metav1.Now()
	return finishedStatus(pod, &now, corev1.ContainerStateTerminated{
		ExitCode: 128, Reason: "ContainerCannotRun", Message: err.Error(), StartedAt: now, FinishedAt: now})
}

// lostStatus fails a pod that was running under a site that is gone: nothing runs it now.
func lostStatus(pod *corev1.Pod) corev1.PodStatus {
	now := metav1.Now()
	start := pod.Status.StartTime
	if start == nil {
		start = &now
	}
	return finishedStatus(pod, start, corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was terminated",
		StartedAt: *start, FinishedAt: now})
}

func finishedStatus(pod *corev1.Pod, start *metav1.Time, terminated corev1.ContainerStateTerminated) corev1.PodStatus {
	st := baseStatus(pod)
	st.Phase = corev1.PodFailed
	reason := "PodFailed"
	if terminated.ExitCode == 0 {
		st.Phase = corev1.PodSucceeded
		reason = "PodCompleted"
	}
	if st.StartTime == nil {
		st.StartTime = start
	}
	now := metav1.Now()
	st.Conditions = setPodCondition(st.Conditions, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", now)
	st.Conditions = setPodCondition(st.Conditions, corev1.PodInitialized, corev1.ConditionTrue, reason, now)
	st.Conditions = setPodCondition(st.Conditions, corev1.ContainersReady, corev1.ConditionFalse, reason, now)
	st.Conditions = setPodCondition(st.Conditions, corev1.PodReady, corev1.ConditionFalse, reason, now)
	spec := pod.Spec.Containers[0]
	st.ContainerStatuses = []corev1.ContainerStatus{{
		Name: spec.Name, Image: spec.Image, ImageID: spec.Image, ContainerID: terminated.ContainerID,
		Started: ptr.To(false), State: corev1.ContainerState{Terminated: &terminated},
	}}
	return st
}

func containerID(pod *corev1.Pod) string { return "site://" + string(pod.UID) }

// setPodCondition sets a condition, moving its transition time only when its status changes.
func setPodCondition(conds []corev1.PodCondition, t corev1.PodConditionType, status corev1.ConditionStatus, reason string, now metav1.Time) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(conds)+1)
	found := false
	for _, c := range conds {
		if c.Type == t {
			found = true
			if c.Status != status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason = status, reason
		}
		out = append(out, c)
	}
	if !found {
		out = append(out, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now})
	}
	return out
}
