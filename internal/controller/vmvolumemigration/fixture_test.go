package vmvolumemigration_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"lukechampine.com/blake3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/testenv/operatortest"
	"github.com/spectrocloud/nodewright/test/site"
)

var (
	env = testenv.New()
	// copyBinary is nodewright-copy, built once for the package's sites.
	copyBinary string
)

func TestMain(m *testing.M) {
	var err error
	if copyBinary, err = site.CopyBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(env.Run(m))
}

// The storage the site serves: a LINSTOR class (snapshots, clones, ReadWriteMany block), a
// TopoLVM class (none of those) and a CSI driver Nodewright does not know.
const (
	linstorDriver = "linstor.csi.linbit.com"
	topolvmDriver = "topolvm.io"
	genericDriver = "csi.example.com"

	linstorClass = "test-linstor"
	topolvmClass = "test-topolvm"
	genericClass = "test-generic"

	volumeSize = 8 << 20
)

// fix is one test's site: a namespace, the site playing kubelet, KubeVirt and CSI in it, a
// VM "web" running with volume "root" on PVC "web-root", full of data.
type fix struct {
	t      *testing.T
	ns     string
	site   *site.Site
	source []byte
}

func newFixture(t *testing.T, opts site.Options) *fix {
	t.Helper()
	ctx := context.Background()
	f := &fix{t: t, ns: env.Namespace(t)}
	f.storageClasses()

	opts.Dir = t.TempDir()
	opts.Drivers = []string{linstorDriver, topolvmDriver, genericDriver}
	opts.CopyBinary = copyBinary
	opts.NodeName = "site-" + f.ns
	opts.Namespaces = []string{f.ns}
	s, err := site.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Start(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the site stopped with an error: %v", err)
		}
	})
	select {
	case <-s.Started():
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		t.Fatal("the site did not start")
	}
	f.site = s

	f.source = f.createVolume("web-root", linstorClass)
	f.create(&virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
				Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
					PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-root"},
					},
				}}},
			}},
		},
	})
	f.waitVMRunsOn("web-root")
	return f
}

// storageClasses creates the cluster's classes once; later tests reuse them.
func (f *fix) storageClasses() {
	operatortest.StorageClasses(f.t, env.Client, operatortest.Class{Name: linstorClass, Driver: linstorDriver},
		operatortest.Class{Name: topolvmClass, Driver: topolvmDriver}, operatortest.Class{Name: genericClass, Driver: genericDriver})
}

func (f *fix) create(obj client.Object) {
	f.t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		f.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// createVolume makes a bound block PVC and fills it with data and holes; it returns the
// bytes written.
func (f *fix) createVolume(name, class string) []byte {
	f.t.Helper()
	f.create(&corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(volumeSize, resource.BinarySI)}},
		},
	})
	data := make([]byte, volumeSize)
	rng := rand.New(rand.NewPCG(uint64(len(f.ns)), 7))
	for i := range data[:3<<20] {
		data[i] = byte(rng.Uint32())
	}
	copy(data[6<<20:], data[:1<<20]) // a hole of zeros between two runs of data
	path := f.waitBackingFile(name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		f.t.Fatal(err)
	}
	return data
}

// waitBackingFile waits for the PVC to be bound and returns its file.
func (f *fix) waitBackingFile(pvc string) string {
	f.t.Helper()
	var path string
	f.eventually(func() (bool, string) {
		p, err := f.site.BackingFile(context.Background(), f.ns, pvc)
		path = p
		return err == nil, fmt.Sprintf("PVC %s has no backing file: %v", pvc, err)
	})
	return path
}

// volumeBytes reads a PVC's bytes from its backing file.
func (f *fix) volumeBytes(pvc string) []byte {
	f.t.Helper()
	path, err := f.site.BackingFile(context.Background(), f.ns, pvc)
	if err != nil {
		f.t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	return data
}

// patience bounds every wait on observed state: long enough for a migration on a busy CI
// machine, and no cost to a passing test, which goes on as soon as the state holds.
const patience = 3 * time.Minute

// eventually polls cond until it holds, failing with its last message after patience.
func (f *fix) eventually(cond func() (bool, string)) {
	f.t.Helper()
	timeout := patience
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("after %s: %s", timeout, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitVMRunsOn waits until the VM "web" runs with volume "root" on claim.
func (f *fix) waitVMRunsOn(claim string) {
	f.t.Helper()
	site.WaitVMRunsOn(f.t, env.Client, f.ns, "web", claim)
}

// migration is a VMVolumeMigration of the fixture's VM volume.
func (f *fix) migration(name string, mode nwv1.MigrationMode, class string) *nwv1.VMVolumeMigration {
	return &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: nwv1.VMVolumeMigrationSpec{
			VMName: "web", VolumeName: "root", Mode: mode,
			Target: nwv1.MigrationTarget{StorageClassName: class},
		},
	}
}

// waitPhase waits for the migration to reach phase and returns it.
func (f *fix) waitPhase(name string, phase nwv1.WorkflowPhase) *nwv1.VMVolumeMigration {
	f.t.Helper()
	m := &nwv1.VMVolumeMigration{}
	f.eventually(func() (bool, string) {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, m); err != nil {
			return false, err.Error()
		}
		return m.Status.Phase == phase, fmt.Sprintf("migration %s is %s, want %s; steps %s", name, m.Status.Phase, phase, describeSteps(m))
	})
	return m
}

func describeSteps(m *nwv1.VMVolumeMigration) string {
	var parts []string
	for _, s := range m.Status.Steps {
		part := s.Name + "=" + string(s.State)
		if s.Message != "" {
			part += " (" + s.Message + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// stepStates is "Name=State ..." of the migration's steps.
func stepStates(m *nwv1.VMVolumeMigration) string {
	var parts []string
	for _, s := range m.Status.Steps {
		parts = append(parts, s.Name+"="+string(s.State))
	}
	return strings.Join(parts, " ")
}

// blake3Digest is the digest nodewright-copy reports for data.
func blake3Digest(data []byte) string {
	sum := blake3.Sum256(data)
	return "blake3:" + hex.EncodeToString(sum[:])
}

// assertLeftBehind checks that exactly these PVCs and snapshots remain in the namespace, no
// Job and no pod, and that the site holds a file for each and nothing more.
func (f *fix) assertLeftBehind(pvcs, snapshots []string) {
	f.t.Helper()
	ctx := context.Background()
	f.eventually(func() (bool, string) {
		var pl corev1.PersistentVolumeClaimList
		var sl snapshotv1.VolumeSnapshotList
		var jl batchv1.JobList
		var pods corev1.PodList
		for _, l := range []client.ObjectList{&pl, &sl, &jl, &pods} {
			if err := env.Client.List(ctx, l, client.InNamespace(f.ns)); err != nil {
				return false, err.Error()
			}
		}
		var gotPVCs, gotSnaps []string
		for _, p := range pl.Items {
			gotPVCs = append(gotPVCs, p.Name)
		}
		for _, s := range sl.Items {
			gotSnaps = append(gotSnaps, s.Name)
		}
		slices.Sort(gotPVCs)
		slices.Sort(gotSnaps)
		wantPVCs, wantSnaps := slices.Sorted(slices.Values(pvcs)), slices.Sorted(slices.Values(snapshots))
		files, err := f.site.Files()
		if err != nil {
			return false, err.Error()
		}
		ok := slices.Equal(gotPVCs, wantPVCs) && slices.Equal(gotSnaps, wantSnaps) && len(jl.Items) == 0 && len(pods.Items) == 0 &&
			len(files) == len(pvcs)+len(snapshots)
		return ok, fmt.Sprintf("left behind: PVCs %v (want %v), snapshots %v (want %v), %d Jobs, %d pods, site files %v",
			gotPVCs, wantPVCs, gotSnaps, wantSnaps, len(jl.Items), len(pods.Items), files)
	})
}

// vm reads the VM "web".
func (f *fix) vm() *virtv1.VirtualMachine {
	f.t.Helper()
	vm := &virtv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web"}, vm); err != nil {
		f.t.Fatal(err)
	}
	return vm
}

// startOperator runs the operator's controllers as the operator does, its filtered cache
// included, under the chart's admission policies for the operator, until the test ends.
func startOperator(t *testing.T) (stop func()) {
	t.Helper()
	return env.StartManagerAsWithCache(t, asOperator(t), operator.CacheOptions(operator.Scope{}), operator.SetupControllers)
}

// asOperator is the operator's identity under the chart's admission policies for it
// (templates/operator-*limits.yaml, with the copy image the controller runs by default): every
// VM patch, Job and claim of a migration in these tests passes them.
func asOperator(t *testing.T) *rest.Config {
	t.Helper()
	repository, tag, _ := strings.Cut(vmvolumemigration.DefaultCopyImage, ":")
	return env.AsOperatorUnderPolicies(t, operatortest.Namespace,
		"--set", "copyImage.repository="+repository, "--set", "copyImage.tag="+tag)
}
