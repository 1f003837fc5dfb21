package site_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	driver = "csi.example.com"
	// otherDriver is a CSI driver no site serves.
	otherDriver = "other.csi.example.com"
	volumeSize  = 4 << 20
	// wait bounds every wait on observed state: long enough for a busy CI machine, and no
	// cost to a passing test, which goes on as soon as the state holds.
	wait = 2 * time.Minute
)

// fix is one test's namespace with a site serving it, a StorageClass and a default
// VolumeSnapshotClass of the site's driver, both named after the namespace.
type fix struct {
	t    *testing.T
	ctx  context.Context
	ns   string
	site *site.Site
}

func newFixture(t *testing.T, opts site.Options) *fix {
	t.Helper()
	f := bareFixture(t)
	f.site = site.Start(t, env.Config, f.options(opts))
	return f
}

// newNodesFixture is newFixture with a site of n nodes, named after the namespace and
// numbered from 1; the first is the kubelet's.
func newNodesFixture(t *testing.T, n int, opts site.Options) *fix {
	t.Helper()
	f := bareFixture(t)
	for i := 1; i <= n; i++ {
		opts.Nodes = append(opts.Nodes, fmt.Sprintf("%s-%d", f.ns, i))
	}
	f.site = site.Start(t, env.Config, f.options(opts))
	return f
}

// node is the name of the site's i-th node, from 1.
func (f *fix) node(i int) string { return f.site.Nodes()[i-1] }

// bareFixture is a fixture whose site the test starts itself.
func bareFixture(t *testing.T) *fix {
	t.Helper()
	f := &fix{t: t, ctx: context.Background(), ns: env.Namespace(t)}
	f.createClasses(f.ns, storagev1.VolumeBindingImmediate)
	return f
}

// options completes a test's options: the site serves the fixture's namespace and driver.
func (f *fix) options(opts site.Options) site.Options {
	opts.Drivers = []string{driver}
	opts.CopyBinary = site.BuildCopy(f.t)
	if len(opts.Nodes) == 0 {
		opts.NodeName = "site-" + f.ns
	}
	opts.Namespaces = []string{f.ns}
	if os.Getenv("SITE_DEBUG") != "" { // the controllers' logs, to see why a test waits
		opts.Logger = testr.NewWithOptions(f.t, testr.Options{Verbosity: 5})
	}
	return opts
}

// createClasses makes a StorageClass and a default VolumeSnapshotClass of the site's driver.
func (f *fix) createClasses(name string, binding storagev1.VolumeBindingMode) {
	f.t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(binding)}
	vsc := &snapshotv1.VolumeSnapshotClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
		Driver:     driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
	}
	f.create(sc)
	f.create(vsc)
	f.t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), sc)
		_ = env.Client.Delete(context.Background(), vsc)
	})
}

func (f *fix) create(obj client.Object) {
	f.t.Helper()
	if err := env.Client.Create(f.ctx, obj); err != nil {
		f.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (f *fix) get(name string, obj client.Object) error {
	return env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, obj)
}

func (f *fix) delete(obj client.Object, opts ...client.DeleteOption) {
	f.t.Helper()
	if err := env.Client.Delete(f.ctx, obj, opts...); err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatalf("deleting %T %s: %v", obj, obj.GetName(), err)
	}
}

// eventually polls check until it returns "", failing with its last answer after wait.
func (f *fix) eventually(check func() string) {
	f.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		last := check()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("after %s: %s", wait, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// claim is a block claim of volumeSize in the fixture's class, with an optional data source.
func (f *fix) claim(name string, source *corev1.TypedLocalObjectReference) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(f.ns),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(volumeSize, resource.BinarySI)}},
			DataSource:       source,
		},
	}
}

// bound waits until the claim is bound and returns it.
func (f *fix) bound(name string) *corev1.PersistentVolumeClaim {
	f.t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	f.eventually(func() string {
		if err := f.get(name, pvc); err != nil {
			return err.Error()
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return fmt.Sprintf("claim %s is %q", name, pvc.Status.Phase)
		}
		return ""
	})
	return pvc
}

// volume makes a bound claim and fills it with data seeded by seed; it returns the bytes.
func (f *fix) volume(name string, seed uint64) []byte {
	f.t.Helper()
	f.create(f.claim(name, nil))
	f.bound(name)
	return f.fill(name, seed)
}

// fill writes 1 MiB of random data, then a hole, then 512 KiB more, and returns the volume's
// expected bytes.
func (f *fix) fill(name string, seed uint64) []byte {
	f.t.Helper()
	data := make([]byte, volumeSize)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range data[:1<<20] {
		data[i] = byte(rng.Uint32())
	}
	copy(data[3<<20:], data[:512<<10])
	if err := f.site.Fill(f.ctx, f.ns, name, bytes.NewReader(data)); err != nil {
		f.t.Fatal(err)
	}
	return data
}

func (f *fix) read(name string) []byte {
	f.t.Helper()
	data, err := f.site.ReadVolume(f.ctx, f.ns, name)
	if err != nil {
		f.t.Fatal(err)
	}
	return data
}

// snapshot takes a snapshot of a claim with the default class and waits until it is ready.
func (f *fix) snapshot(name, claim string) *snapshotv1.VolumeSnapshot {
	f.t.Helper()
	f.create(&snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(claim)}},
	})
	return f.snapshotReady(name)
}

func (f *fix) snapshotReady(name string) *snapshotv1.VolumeSnapshot {
	f.t.Helper()
	vs := &snapshotv1.VolumeSnapshot{}
	f.eventually(func() string {
		if err := f.get(name, vs); err != nil {
			return err.Error()
		}
		if vs.Status == nil || !ptr.Deref(vs.Status.ReadyToUse, false) {
			return fmt.Sprintf("snapshot %s is not ready: %+v", name, vs.Status)
		}
		return ""
	})
	return vs
}

// copyJob is a Job that runs nodewright-copy with args between the claims src and dst, seen
// in the container as /dev/src and /dev/dst.
func (f *fix) copyJob(name, src, dst string, backoffLimit int32, args ...string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(backoffLimit),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "copy", Image: "nodewright-copy:test",
					Command: []string{"nodewright-copy"},
					Args:    args,
					VolumeDevices: []corev1.VolumeDevice{
						{Name: "src", DevicePath: "/dev/src"}, {Name: "dst", DevicePath: "/dev/dst"},
					},
				}},
				Volumes: []corev1.Volume{
					{Name: "src", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: src}}},
					{Name: "dst", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: dst}}},
				},
			}},
		},
	}
}

// jobCondition waits until the Job has the condition True and returns the Job.
func (f *fix) jobCondition(name string, t batchv1.JobConditionType) *batchv1.Job {
	f.t.Helper()
	job := &batchv1.Job{}
	f.eventually(func() string {
		if err := f.get(name, job); err != nil {
			return err.Error()
		}
		for _, c := range job.Status.Conditions {
			if c.Type == t && c.Status == corev1.ConditionTrue {
				return ""
			}
		}
		return fmt.Sprintf("Job %s has no %s condition: %+v", name, t, job.Status)
	})
	return job
}

// jobPods lists the pods of a Job.
func (f *fix) jobPods(job string) []corev1.Pod {
	f.t.Helper()
	pods := &corev1.PodList{}
	if err := env.Client.List(f.ctx, pods, client.InNamespace(f.ns), client.MatchingLabels{"batch.kubernetes.io/job-name": job}); err != nil {
		f.t.Fatal(err)
	}
	return pods.Items
}

// onlyPod waits for the Job's single pod to satisfy check and returns it.
func (f *fix) onlyPod(job string, check func(*corev1.Pod) string) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	f.eventually(func() string {
		pods := f.jobPods(job)
		if len(pods) != 1 {
			return fmt.Sprintf("Job %s has %d pods", job, len(pods))
		}
		pod = &pods[0]
		return check(pod)
	})
	return pod
}

func terminated(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	if len(pod.Status.ContainerStatuses) != 1 {
		return nil
	}
	return pod.Status.ContainerStatuses[0].State.Terminated
}

// nothingLeft waits until the namespace holds no claim, snapshot, Job or pod, no PV or content
// is bound to it, and the site holds no file.
func (f *fix) nothingLeft() {
	f.t.Helper()
	f.eventually(func() string {
		var pvcs corev1.PersistentVolumeClaimList
		var snaps snapshotv1.VolumeSnapshotList
		var jobs batchv1.JobList
		var pods corev1.PodList
		for _, l := range []client.ObjectList{&pvcs, &snaps, &jobs, &pods} {
			if err := env.Client.List(f.ctx, l, client.InNamespace(f.ns)); err != nil {
				return err.Error()
			}
		}
		var pvs corev1.PersistentVolumeList
		var contents snapshotv1.VolumeSnapshotContentList
		for _, l := range []client.ObjectList{&pvs, &contents} {
			if err := env.Client.List(f.ctx, l); err != nil {
				return err.Error()
			}
		}
		var ours []string
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == f.ns {
				ours = append(ours, "pv/"+pv.Name)
			}
		}
		for _, c := range contents.Items {
			if c.Spec.VolumeSnapshotRef.Namespace == f.ns {
				ours = append(ours, "content/"+c.Name)
			}
		}
		files, err := f.site.Files()
		if err != nil {
			return err.Error()
		}
		if n := len(pvcs.Items) + len(snaps.Items) + len(jobs.Items) + len(pods.Items) + len(ours) + len(files); n > 0 {
			return fmt.Sprintf("left: %d claims, %d snapshots, %d Jobs, %d pods, %v, files %v",
				len(pvcs.Items), len(snaps.Items), len(jobs.Items), len(pods.Items), ours, files)
		}
		return ""
	})
}
