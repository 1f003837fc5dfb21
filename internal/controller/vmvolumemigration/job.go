package vmvolumemigration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/blockcopy"
	"github.com/spectrocloud/nodewright/internal/migration"
)

// The paths the data Job's volumes appear at.
const (
	sourceDevice = "/dev/nodewright/source"
	targetDevice = "/dev/nodewright/target"
)

// copierResources bound a data Job's container: nodewright-copy streams through a fixed pool
// of buffers (7 × 4 MiB with its defaults, plus at most 8 MiB of BLAKE3's zero subtrees:
// docs/nodewright-copy.md), so its memory is flat whatever the volume, and it writes nothing
// but its target device and a few log lines. Its CPU is not limited: a limit would only
// slow the hashing. The chart's policy for the operator's Jobs requires these limits and caps
// them.
func copierResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceEphemeralStorage: resource.MustParse("64Mi")},
	}
}

// DataJob is the Job that runs nodewright-copy (command "copy" or "verify") from the
// source PVC to the target PVC, both attached as raw block devices. It never retries: a
// failed copy is reported, and a mismatch is never retried into success. It is the only
// workload the operator creates; the chart's admission policy for the operator's Jobs
// (templates/operator-limits.yaml) admits this and nothing wider, which
// test/operatorrestriction checks with this function.
func DataJob(m *nwv1.VMVolumeMigration, name, image, command, source, target string) *batchv1.Job {
	hash := "blake3"
	if m.Spec.ChecksumAlgorithm == nwv1.ChecksumSHA256 {
		hash = "sha256"
	}
	labels := migration.Owner(m).Labels()
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: labels, OwnerReferences: owner(m)},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext:              &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name:    migration.CopyContainer,
						Image:   image,
						Command: []string{migration.CopierPath},
						Args: []string{command, "--src", sourceDevice, "--dst", targetDevice,
							"--hash", hash, "--json", "--progress", "--progress-interval", "2s"},
						VolumeDevices: []corev1.VolumeDevice{
							{Name: "source", DevicePath: sourceDevice},
							{Name: "target", DevicePath: targetDevice},
						},
						// Opening the block devices needs root; nothing else is granted.
						SecurityContext: &corev1.SecurityContext{
							RunAsUser:                ptr.To[int64](0),
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						Resources:                copierResources(),
					}},
					Volumes: []corev1.Volume{
						{Name: "source", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: source, ReadOnly: true}}},
						{Name: "target", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: target, ReadOnly: command == "verify"}}},
					},
				},
			},
		},
	}
}

// jobFinished reports whether the Job completed or failed.
func jobFinished(job *batchv1.Job) (done, failed bool) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, false
		case batchv1.JobFailed:
			return true, true
		}
	}
	return false, false
}

// jobPod is the Job's newest pod, or nil.
func jobPod(ctx context.Context, c client.Reader, job *batchv1.Job) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, err
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp) {
			newest = p
		}
	}
	return newest, nil
}

// jobResult is nodewright-copy's JSON result from the pod's termination message.
func jobResult(pod *corev1.Pod) (*blockcopy.Result, error) {
	if pod == nil {
		return nil, fmt.Errorf("the Job has no pod")
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name != migration.CopyContainer || s.State.Terminated == nil {
			continue
		}
		t := s.State.Terminated
		var r blockcopy.Result
		if err := json.Unmarshal([]byte(strings.TrimSpace(t.Message)), &r); err != nil {
			return nil, fmt.Errorf("pod %s exited with code %d (%s) without a result: %q", pod.Name, t.ExitCode, t.Reason, audit.Shorten(t.Message, 200))
		}
		return &r, nil
	}
	return nil, fmt.Errorf("pod %s has not terminated", pod.Name)
}

// describeFailure says why nodewright-copy failed, in a line.
func describeFailure(r *blockcopy.Result) string {
	switch {
	case r.Status == "mismatch" && r.MismatchByteOffset != nil && r.TargetDigest != "":
		return fmt.Sprintf("checksum mismatch: %s differs from %s, first at byte %d", r.TargetDigest, r.SourceDigest, *r.MismatchByteOffset)
	case r.Status == "mismatch" && r.MismatchByteOffset != nil:
		return fmt.Sprintf("checksum mismatch: the volumes differ, first at byte %d", *r.MismatchByteOffset)
	case r.Status == "mismatch":
		return fmt.Sprintf("checksum mismatch: target %s, source %s", r.TargetDigest, r.SourceDigest)
	case r.Error != "":
		return fmt.Sprintf("nodewright-copy %s: %s (exit %d): %s", r.Command, r.Status, r.ExitCode, r.Error)
	}
	return fmt.Sprintf("nodewright-copy %s: %s (exit %d)", r.Command, r.Status, r.ExitCode)
}

// setProgress records bytes done of total, reporting whether it changed.
func setProgress(m *nwv1.VMVolumeMigration, done, total int64) bool {
	p := migration.Progress(done, total)
	if p == nil || m.Status.Progress != nil && *m.Status.Progress == *p {
		return false
	}
	m.Status.Progress = p
	return true
}
