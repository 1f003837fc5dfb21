package site_test

import (
	"context"
	"fmt"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/test/site"
)

func (f *fix) update(obj client.Object) {
	f.t.Helper()
	if err := env.Client.Update(f.ctx, obj); err != nil {
		f.t.Fatalf("updating %T %s: %v", obj, obj.GetName(), err)
	}
}

func claimRef(name string, ns string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
}

func TestDeletingEverythingLeavesNothing(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("src", 20)
	f.snapshot("snap", "src")
	f.create(f.claim("restored", &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "snap"}))
	f.create(f.claim("clone", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}))
	f.bound("restored")
	f.bound("clone")
	f.create(f.copyJob("copy", "src", "restored", 0, "copy", "--src", "/dev/src", "--dst", "/dev/dst"))
	f.jobCondition("copy", batchv1.JobComplete)
	files, err := f.site.Files()
	if err != nil {
		t.Fatal(err)
	}
	// Three volumes, one snapshot, and the pod's log and termination log.
	if len(files) != 6 {
		t.Errorf("files %v", files)
	}

	// Background propagation: the Job goes at once and the site, as garbage collector, deletes
	// its pods. (Without a policy batch/v1 orphans them: see TestJobDeletedWithoutAPolicyOrphansItsPod.)
	f.delete(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: f.ns}}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	f.delete(&snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: f.ns}})
	for _, name := range []string{"src", "restored", "clone"} {
		f.delete(claimRef(name, f.ns))
	}
	f.nothingLeft()
}

// A pending claim restored from a snapshot keeps the snapshot (volumesnapshot-as-source-protection),
// and the external-provisioner does not start a restore from a snapshot being deleted: the claim
// waits until it is deleted too, as in a cluster.
func TestSnapshotIsKeptWhileAClaimWaitsToBeRestoredFromIt(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("src", 21)
	f.snapshot("snap", "src")
	f.createClasses(f.ns+"-wffc", storagev1.VolumeBindingWaitForFirstConsumer)
	restore := f.claim("restored", &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "snap"})
	restore.Spec.StorageClassName = ptr.To(f.ns + "-wffc")
	f.create(restore)
	f.delete(&snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: f.ns}})

	// A claim created after both and bound proves the site has seen them.
	f.create(f.claim("probe", nil))
	f.bound("probe")
	vs := &snapshotv1.VolumeSnapshot{}
	if err := f.get("snap", vs); err != nil || vs.DeletionTimestamp == nil {
		t.Fatalf("snapshot: %v, deletion %v", err, vs.DeletionTimestamp)
	}
	f.delete(claimRef("restored", f.ns))
	f.eventually(func() string {
		if err := f.get("snap", vs); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("snapshot snap is still there (%v)", err)
		}
		return ""
	})
	f.delete(claimRef("src", f.ns))
	f.delete(claimRef("probe", f.ns))
	f.nothingLeft()
}

func TestWaitForFirstConsumerClaimIsProvisionedForItsPod(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("src", 24)
	f.snapshot("snap", "src")
	f.createClasses(f.ns+"-wffc", storagev1.VolumeBindingWaitForFirstConsumer)
	restore := f.claim("restored", &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "snap"})
	restore.Spec.StorageClassName = ptr.To(f.ns + "-wffc")
	f.create(restore)
	f.create(f.claim("probe", nil))
	f.bound("probe")
	if err := f.get("restored", restore); err != nil || restore.Spec.VolumeName != "" {
		t.Fatalf("a WaitForFirstConsumer claim with no consumer was bound (%v): %+v", err, restore.Status)
	}

	// nodewright-copy verify proves the restored volume holds the snapshot's bytes.
	f.create(f.copyJob("verify", "src", "restored", 0, "verify", "--src", "/dev/src", "--dst", "/dev/dst"))
	f.jobCondition("verify", batchv1.JobComplete)
	if err := f.get("restored", restore); err != nil || restore.Annotations["volume.kubernetes.io/selected-node"] != f.site.NodeName() {
		t.Errorf("restored claim (%v): annotations %v", err, restore.Annotations)
	}
}

func TestForegroundDeletionOfARunningJobStopsItsPod(t *testing.T) {
	hold := make(chan struct{}) // never closed: the copy is held until its pod goes
	f := newFixture(t, site.Options{HoldCopy: func(*batchv1.Job) <-chan struct{} { return hold }})
	f.volume("src", 22)
	f.create(f.claim("dst", nil))
	f.bound("dst")
	f.create(f.copyJob("copy", "src", "dst", 0, "copy", "--src", "/dev/src", "--dst", "/dev/dst"))
	f.onlyPod("copy", func(p *corev1.Pod) string {
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Sprintf("pod %s is %s", p.Name, p.Status.Phase)
		}
		return ""
	})
	f.delete(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: f.ns}}, client.PropagationPolicy(metav1.DeletePropagationForeground))
	f.eventually(func() string {
		if err := f.get("copy", &batchv1.Job{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("Job copy is still there (%v)", err)
		}
		if pods := f.jobPods("copy"); len(pods) > 0 {
			return fmt.Sprintf("%d pods left", len(pods))
		}
		return ""
	})
	f.delete(claimRef("src", f.ns))
	f.delete(claimRef("dst", f.ns))
	f.nothingLeft()
}

func TestJobDeletedWithoutAPolicyOrphansItsPod(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.volume("src", 23)
	f.create(f.claim("dst", nil))
	f.bound("dst")
	f.create(f.copyJob("copy", "src", "dst", 0, "copy", "--src", "/dev/src", "--dst", "/dev/dst"))
	f.jobCondition("copy", batchv1.JobComplete)
	// batch/v1 defaults to orphaning a Job's pods, for compatibility.
	f.delete(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: f.ns}})
	f.eventually(func() string {
		if err := f.get("copy", &batchv1.Job{}); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("Job copy is still there (%v)", err)
		}
		return ""
	})
	pods := f.jobPods("copy")
	if len(pods) != 1 || len(pods[0].OwnerReferences) != 0 {
		t.Fatalf("pods %v", pods)
	}
	f.delete(&pods[0])
	f.delete(claimRef("src", f.ns))
	f.delete(claimRef("dst", f.ns))
	f.nothingLeft()
}

// TestANewSiteFailsThePodTheOldOneWasRunning stops a site under a running pod, as a node
// restart would, and starts another: the pod fails as a lost container, and so does its Job.
func TestANewSiteFailsThePodTheOldOneWasRunning(t *testing.T) {
	f := bareFixture(t)
	dir := t.TempDir() // the node's disk, which outlives its kubelet
	first, err := site.New(env.Config, f.options(site.Options{Dir: dir, HoldCopy: func(*batchv1.Job) <-chan struct{} { return make(chan struct{}) }}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- first.Start(ctx) }()
	t.Cleanup(stop)
	if err := first.Err(); err != nil {
		t.Fatal(err)
	}
	f.site = first
	f.volume("src", 25)
	f.create(f.claim("dst", nil))
	f.bound("dst")
	f.create(f.copyJob("copy", "src", "dst", 0, "copy", "--src", "/dev/src", "--dst", "/dev/dst"))
	f.onlyPod("copy", func(p *corev1.Pod) string {
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Sprintf("pod %s is %s", p.Name, p.Status.Phase)
		}
		return ""
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("the first site stopped with an error: %v", err)
	}
	node := &corev1.Node{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Name: first.NodeName()}, node); !apierrors.IsNotFound(err) {
		t.Errorf("the stopped site's Node is still there (%v)", err)
	}

	f.site = site.Start(t, env.Config, f.options(site.Options{Dir: dir}))
	pod := f.onlyPod("copy", func(p *corev1.Pod) string {
		if term := terminated(p); p.Status.Phase != corev1.PodFailed || term == nil || term.Reason != "ContainerStatusUnknown" {
			return fmt.Sprintf("pod %s is %s: %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		return ""
	})
	if term := terminated(pod); term.ExitCode != 137 {
		t.Errorf("terminated %+v", term)
	}
	f.jobCondition("copy", batchv1.JobFailed)
	// The new site removes the folder the old one made for the pod, with the pod.
	f.delete(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: f.ns}}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	f.delete(claimRef("src", f.ns))
	f.delete(claimRef("dst", f.ns))
	f.nothingLeft()
}
