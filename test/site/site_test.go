package site_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/test/site"
)

func TestClaimIsProvisionedAndBound(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.create(f.claim("data", nil))
	pvc := f.bound("data")

	pv := &corev1.PersistentVolume{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driver || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Status.Phase != corev1.VolumeBound {
		t.Errorf("PV %s: %+v, status %+v", pv.Name, pv.Spec, pv.Status)
	}
	if got := pvc.Status.Capacity.Storage().Value(); got != volumeSize {
		t.Errorf("claim capacity %d, want %d", got, volumeSize)
	}
	path, err := f.site.BackingFile(f.ctx, f.ns, "data")
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() != volumeSize {
		t.Errorf("backing file is %d bytes, want %d", info.Size(), volumeSize)
	}
	if blocks := info.Sys().(*syscall.Stat_t).Blocks; blocks != 0 {
		t.Errorf("a new volume should be all hole, %d blocks are allocated", blocks)
	}
}

func TestClaimOfAnotherDriverIsLeftAlone(t *testing.T) {
	f := newFixture(t, site.Options{})
	other := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-other"}, Provisioner: otherDriver}
	f.create(other)
	t.Cleanup(func() { _ = env.Client.Delete(f.ctx, other) })
	pvc := f.claim("foreign", nil)
	pvc.Spec.StorageClassName = ptr.To(other.Name)
	f.create(pvc)
	// A claim created after it and bound proves the site has seen the first one.
	f.create(f.claim("ours", nil))
	f.bound("ours")
	if err := f.get("foreign", pvc); err != nil {
		t.Fatal(err)
	}
	if pvc.Spec.VolumeName != "" || pvc.Status.Phase == corev1.ClaimBound {
		t.Errorf("a claim of %s was bound: %+v", otherDriver, pvc.Status)
	}
}

func TestSnapshotKeepsTheBytesOfItsMoment(t *testing.T) {
	f := newFixture(t, site.Options{})
	first := f.volume("data", 1)
	vs := f.snapshot("snap", "data")
	second := f.fill("data", 2)
	if bytes.Equal(first, second) {
		t.Fatal("the two fills are the same")
	}

	if vs.Status.BoundVolumeSnapshotContentName == nil || vs.Status.RestoreSize == nil || vs.Status.RestoreSize.Value() != volumeSize ||
		vs.Status.CreationTime == nil || vs.Status.Error != nil || ptr.Deref(vs.Spec.VolumeSnapshotClassName, "") != f.ns {
		t.Errorf("snapshot: spec %+v status %+v", vs.Spec, vs.Status)
	}
	content := &snapshotv1.VolumeSnapshotContent{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Name: *vs.Status.BoundVolumeSnapshotContentName}, content); err != nil {
		t.Fatal(err)
	}
	if content.Spec.VolumeSnapshotRef.UID != vs.UID || content.Spec.Driver != driver || content.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentDelete ||
		content.Spec.Source.VolumeHandle == nil || content.Status == nil || !ptr.Deref(content.Status.ReadyToUse, false) ||
		ptr.Deref(content.Status.RestoreSize, 0) != volumeSize {
		t.Errorf("content: spec %+v status %+v", content.Spec, content.Status)
	}

	f.create(f.claim("restored", &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "snap"}))
	f.bound("restored")
	if !bytes.Equal(f.read("restored"), first) {
		t.Error("the restored volume does not hold the bytes of the snapshot's moment")
	}
	if !bytes.Equal(f.read("data"), second) {
		t.Error("the source volume changed")
	}
}

func TestCloneEqualsItsSource(t *testing.T) {
	f := newFixture(t, site.Options{})
	data := f.volume("data", 3)
	f.create(f.claim("clone", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data"}))
	f.bound("clone")
	if !bytes.Equal(f.read("clone"), data) {
		t.Error("the clone differs from its source")
	}
}

func TestSnapshotWithoutAClassSaysSoUntilOneExists(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("data", 4)
	f.create(&snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: f.ns},
		Spec: snapshotv1.VolumeSnapshotSpec{
			Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("data")},
			VolumeSnapshotClassName: ptr.To(f.ns + "-later"),
		},
	})
	vs := &snapshotv1.VolumeSnapshot{}
	f.eventually(func() string {
		if err := f.get("snap", vs); err != nil {
			return err.Error()
		}
		if vs.Status == nil || vs.Status.Error == nil || ptr.Deref(vs.Status.ReadyToUse, true) {
			return fmt.Sprintf("no error in the status: %+v", vs.Status)
		}
		return ""
	})
	if msg := ptr.Deref(vs.Status.Error.Message, ""); !strings.Contains(msg, f.ns+"-later") || vs.Status.Error.Time == nil {
		t.Errorf("error %q at %v", msg, vs.Status.Error.Time)
	}
	later := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-later"}, Driver: driver,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	f.create(later)
	t.Cleanup(func() { _ = env.Client.Delete(f.ctx, later) })
	if vs = f.snapshotReady("snap"); vs.Status.Error != nil {
		t.Errorf("a ready snapshot keeps its error: %+v", vs.Status.Error)
	}
}

func TestCorruptCloneFlipsOneByte(t *testing.T) {
	f := newFixture(t, site.Options{CorruptClone: func(pvc *corev1.PersistentVolumeClaim) bool { return pvc.Name == "bad" }})
	data := f.volume("data", 5)
	f.create(f.claim("bad", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data"}))
	f.bound("bad")
	got := f.read("bad")
	var diffs []int
	for i := range got {
		if got[i] != data[i] {
			diffs = append(diffs, i)
		}
	}
	if len(diffs) != 1 || diffs[0] != volumeSize/2 {
		t.Errorf("differences at %v, want one at %d", diffs, volumeSize/2)
	}
}

// copyResult is the part of nodewright-copy's JSON result the tests look at.
type copyResult struct {
	Command    string `json:"command"`
	Status     string `json:"status"`
	ExitCode   int    `json:"exitCode"`
	Source     string `json:"source"`
	Target     string `json:"target"`
	BytesTotal int64  `json:"bytesTotal"`
	Error      string `json:"error"`
}

func TestCopyJobMovesTheBytes(t *testing.T) {
	f := newFixture(t, site.Options{})
	data := f.volume("src", 6)
	f.create(f.claim("dst", nil))
	f.bound("dst")
	f.create(f.copyJob("copy", "src", "dst", 0, "copy", "--src", "/dev/src", "--dst=/dev/dst", "--progress", "--progress-interval=50ms"))

	job := f.jobCondition("copy", batchv1.JobComplete)
	if job.Status.Succeeded != 1 || job.Status.Active != 0 || job.Status.CompletionTime == nil || job.Status.StartTime == nil {
		t.Errorf("Job status %+v", job.Status)
	}
	pod := f.onlyPod("copy", func(p *corev1.Pod) string {
		if p.Status.Phase != corev1.PodSucceeded || terminated(p) == nil {
			return fmt.Sprintf("pod %s is %s", p.Name, p.Status.Phase)
		}
		return ""
	})
	term := terminated(pod)
	var result copyResult
	if err := json.Unmarshal([]byte(term.Message), &result); err != nil {
		t.Fatalf("termination message %q: %v", term.Message, err)
	}
	// The kubelet hands nodewright-copy the backing files in place of the device paths.
	srcFile, _ := f.site.BackingFile(f.ctx, f.ns, "src")
	dstFile, _ := f.site.BackingFile(f.ctx, f.ns, "dst")
	if term.ExitCode != 0 || term.Reason != "Completed" || result.Status != "ok" || result.Source != srcFile ||
		result.Target != dstFile || result.BytesTotal != volumeSize {
		t.Errorf("terminated %+v, result %+v", term, result)
	}
	if !bytes.Equal(f.read("dst"), data) {
		t.Error("the target's bytes differ from the source's")
	}

	logs := f.logs(pod.Name, nil)
	if !strings.Contains(logs, `"phase":"verify"`) {
		t.Errorf("the logs have no verify progress line:\n%s", logs)
	}
	if tail := f.logs(pod.Name, ptr.To[int64](1)); strings.Count(tail, "\n") != 1 {
		t.Errorf("tailLines=1 gave:\n%s", tail)
	}
}

func (f *fix) clientset() *kubernetes.Clientset {
	f.t.Helper()
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		f.t.Fatal(err)
	}
	return clientset
}

// logs reads a pod's logs through the API server, which asks the site's kubelet for them.
func (f *fix) logs(pod string, tailLines *int64) string {
	f.t.Helper()
	data, err := f.clientset().CoreV1().Pods(f.ns).GetLogs(pod, &corev1.PodLogOptions{Container: "copy", TailLines: tailLines}).DoRaw(f.ctx)
	if err != nil {
		f.t.Fatalf("reading the logs of %s: %v: %s", pod, err, data)
	}
	return string(data)
}

func TestFailCopyFailsTheJobForReal(t *testing.T) {
	f := newFixture(t, site.Options{FailCopy: func(job *batchv1.Job) bool { return job.Name == "copy" }})
	f.volume("src", 7)
	f.create(f.claim("dst", nil))
	f.bound("dst")
	f.create(f.copyJob("copy", "src", "dst", 1, "copy", "--src", "/dev/src", "--dst", "/dev/dst"))

	job := f.jobCondition("copy", batchv1.JobFailed)
	if job.Status.Failed != 2 || job.Status.Succeeded != 0 || job.Status.CompletionTime != nil {
		t.Errorf("Job status %+v", job.Status)
	}
	var reasons []string
	for _, c := range job.Status.Conditions {
		reasons = append(reasons, string(c.Type)+"="+c.Reason)
	}
	if got := strings.Join(reasons, " "); got != "FailureTarget=BackoffLimitExceeded Failed=BackoffLimitExceeded" {
		t.Errorf("conditions %s", got)
	}
	pods := f.jobPods("copy")
	if len(pods) != 2 {
		t.Fatalf("%d pods, want one per attempt (backoffLimit 1)", len(pods))
	}
	for _, pod := range pods {
		term := terminated(&pod)
		if pod.Status.Phase != corev1.PodFailed || term == nil {
			t.Fatalf("pod %s: %+v", pod.Name, pod.Status)
		}
		var result copyResult
		if err := json.Unmarshal([]byte(term.Message), &result); err != nil {
			t.Fatalf("termination message %q: %v", term.Message, err)
		}
		if term.ExitCode != 2 || term.Reason != "Error" || result.Status != "bad-input" || !strings.Contains(result.Error, "smaller than the source") {
			t.Errorf("pod %s: terminated %+v", pod.Name, term)
		}
	}
	if !bytes.Equal(f.read("dst"), make([]byte, volumeSize)) {
		t.Error("a failed copy wrote to the target volume")
	}
}

func TestVerifyFindsACorruptClone(t *testing.T) {
	f := newFixture(t, site.Options{CorruptClone: func(pvc *corev1.PersistentVolumeClaim) bool { return pvc.Name == "bad" }})
	f.volume("data", 8)
	f.create(f.claim("bad", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data"}))
	f.bound("bad")
	f.create(f.copyJob("verify", "data", "bad", 0, "verify", "--src=/dev/src", "--dst=/dev/dst"))
	f.jobCondition("verify", batchv1.JobFailed)
	pod := f.jobPods("verify")[0]
	var result copyResult
	if term := terminated(&pod); term == nil || term.ExitCode != 1 || json.Unmarshal([]byte(term.Message), &result) != nil || result.Status != "mismatch" {
		t.Errorf("pod %s: %+v", pod.Name, pod.Status.ContainerStatuses)
	}
}

func TestHeldJobRunsAndShowsLogsWhenReleased(t *testing.T) {
	hold := make(chan struct{})
	f := newFixture(t, site.Options{HoldCopy: func(*batchv1.Job) <-chan struct{} { return hold }})
	f.volume("src", 9)
	f.create(f.claim("dst", nil))
	f.bound("dst")
	f.create(f.copyJob("copy", "src", "dst", 0, "copy", "--src", "/dev/src", "--dst", "/dev/dst", "--progress"))

	pod := f.onlyPod("copy", func(p *corev1.Pod) string {
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			return fmt.Sprintf("pod %s is %s", p.Name, p.Status.Phase)
		}
		return ""
	})
	job := &batchv1.Job{}
	f.eventually(func() string {
		if err := f.get("copy", job); err != nil {
			return err.Error()
		}
		if job.Status.Active != 1 || ptr.Deref(job.Status.Ready, 0) != 1 {
			return fmt.Sprintf("held Job status %+v", job.Status)
		}
		return ""
	})
	if logs := f.logs(pod.Name, nil); logs != "" {
		t.Errorf("a held copy has logs already: %q", logs)
	}
	// The claims are in use: deleting the target waits for the pod.
	f.delete(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "dst", Namespace: f.ns}})
	pvc := &corev1.PersistentVolumeClaim{}
	if err := f.get("dst", pvc); err != nil || pvc.DeletionTimestamp == nil {
		t.Fatalf("claim dst: %v, deletion %v", err, pvc.DeletionTimestamp)
	}

	// A follower sees the lines as they come and its stream ends with the container.
	stream, err := f.clientset().CoreV1().Pods(f.ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "copy", Follow: true}).Stream(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stream.Close() }()
	close(hold)
	followed, err := io.ReadAll(stream)
	if err != nil || !strings.Contains(string(followed), `"phase":"copy"`) {
		t.Errorf("followed logs (%v):\n%s", err, followed)
	}
	f.jobCondition("copy", batchv1.JobComplete)
	if logs := f.logs(pod.Name, nil); logs != string(followed) {
		t.Errorf("the logs after the end differ from the followed ones:\n%s\n---\n%s", logs, followed)
	}
	// With the pod finished, nothing uses the target: it goes, with its volume.
	f.eventually(func() string {
		if err := f.get("dst", pvc); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("claim dst is still there (%v): finalizers %v", err, pvc.Finalizers)
		}
		return ""
	})
}
