package migration

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/blockcopy"
)

// CopyContainer is the name of the data Job's one container, which runs nodewright-copy.
const CopyContainer = "copy"

// Progress is done bytes of total as a migration's status.progress; nil without a total.
func Progress(done, total int64) *nwv1.MigrationProgress {
	if total <= 0 {
		return nil
	}
	done = min(max(done, 0), total)
	return &nwv1.MigrationProgress{BytesDone: done, BytesTotal: total, Percent: int32(done * 100 / total)}
}

// ReadCopyProgress reads the newest progress line of a data Job from its newest pod's log,
// through the API server, with cs's credentials: those of the person watching (kubectl
// nodewright, its web UI). The operator reads no pod's log: RBAC cannot narrow that grant to
// the copy Jobs' pods, and it would reach every pod's, a VM's console log included. It returns
// nil, and no error, while the Job has no pod with a log yet, or its log no progress line.
func ReadCopyProgress(ctx context.Context, cs kubernetes.Interface, namespace, job string) (*blockcopy.ProgressReport, error) {
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil {
		return nil, fmt.Errorf("listing Job %s/%s's pods: %w", namespace, job, err)
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp) {
			newest = p
		}
	}
	if newest == nil || newest.Spec.NodeName == "" || newest.Status.Phase == corev1.PodPending {
		return nil, nil
	}
	raw, err := cs.CoreV1().Pods(namespace).GetLogs(newest.Name, &corev1.PodLogOptions{
		Container: CopyContainer, TailLines: ptr.To[int64](4), LimitBytes: ptr.To[int64](4096),
	}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s's log: %w", namespace, newest.Name, err)
	}
	return blockcopy.LatestProgress(raw), nil
}
