package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/testenv/operatortest"
)

// The plugin against the operator as it runs in a cluster: its admission webhooks reached
// through the API server, so that the refusals, defaults and warnings are the real ones.
var env = testenv.New().WithWebhooks()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const linstorClass = "kn-linstor"

var (
	startOnce sync.Once
	startErr  error
)

// startOperator runs the operator once for the package (operatortest.Start): it keeps its own
// webhook certificate and writes its CA into the configurations.
func startOperator(t *testing.T) {
	t.Helper()
	startOnce.Do(func() {
		_, startErr = operatortest.Start(env, operatortest.Options{TempPrefix: "kubectl-nodewright-test-"})
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
}

// storage creates a LINSTOR StorageClass (RWX block, snapshots, clones) with a default
// VolumeSnapshotClass.
func storage(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: linstorClass}, Provisioner: "linstor.csi.linbit.com"}
	if err := env.Client.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	vsc := &snapshotv1.VolumeSnapshotClass{
		ObjectMeta: metav1.ObjectMeta{Name: linstorClass + "-snap", Annotations: map[string]string{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
		Driver:     "linstor.csi.linbit.com", DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
	}
	if err := env.Client.Create(ctx, vsc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// vmWithVolume creates VM name, stopped, whose volume "root" is a bound 1 GiB block PVC.
func vmWithVolume(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	claim := name + "-root"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: ptr.To(linstorClass), VolumeName: "pv-" + ns + "-" + claim,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := env.Client.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	if err := env.Client.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyHalted),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
				Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
					PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
					},
				}}},
			}},
		},
	}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
}

// plugin runs the program in-process, as main does, with a kubeconfig file.
func plugin(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"--kubeconfig", kubeconfig}, args...),
		genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	return out.String(), errOut.String(), code
}

// The webhook's refusal is printed as the webhook wrote it, after the object's kind/name.
func TestMigrateRefusedByTheWebhook(t *testing.T) {
	startOperator(t)
	storage(t)
	ns := env.Namespace(t)
	kubeconfig := env.Kubeconfig(t)

	stdout, stderr, code := plugin(t, kubeconfig, "migrate", "x", "root", "--to", linstorClass, "-n", ns, "--name", "move-x")
	want := `Error: vmvolumemigration/move-x: spec.vmName: VirtualMachine "x" not found in namespace ` + ns + "\n"
	if code != 1 || stderr != want || stdout != "" {
		t.Errorf("exit code %d (want 1)\nstdout %q\nstderr %q\nwant   %q", code, stdout, stderr, want)
	}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "move-x"}, &nwv1.VMVolumeMigration{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the refused migration exists: %v", err)
	}

	// And with a generated name, the name it would have had.
	_, stderr, code = plugin(t, kubeconfig, "migrate", "x", "root", "--to", linstorClass, "-n", ns)
	if code != 1 || !strings.HasPrefix(stderr, "Error: vmvolumemigration/x-root-") || !strings.HasSuffix(stderr, `: spec.vmName: VirtualMachine "x" not found in namespace `+ns+"\n") {
		t.Errorf("exit code %d, stderr %q", code, stderr)
	}
}

// The webhook fills in the mode and size, and its warning is printed as kubectl prints it.
func TestMigrateDefaultsAndWarnings(t *testing.T) {
	startOperator(t)
	storage(t)
	ns := env.Namespace(t)
	vmWithVolume(t, ns, "db")
	kubeconfig := env.Kubeconfig(t)

	stdout, stderr, code := plugin(t, kubeconfig, "migrate", "db", "root", "--to", linstorClass, "-n", ns, "--name", "move-db")
	if code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	if want := "vmvolumemigration/move-db created: VM db volume root to class " + linstorClass + ", Cold, 1Gi, ReadWriteMany\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if want := "Warning: spec.mode Cold: the VM is stopped for the copy; LINSTOR can clone, so spec.mode Hot would keep it running, at the cost of the guest's writes after the snapshot\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}

	// A second migration of the VM is refused while the first has not finished.
	_, stderr, code = plugin(t, kubeconfig, "migrate", "db", "root", "--to", linstorClass, "-n", ns, "--name", "again")
	if code != 1 || !strings.HasPrefix(stderr, "Error: vmvolumemigration/again: spec.vmName: VirtualMachine db already has migration move-db (") {
		t.Errorf("exit code %d, stderr %q", code, stderr)
	}

	// The operator acts on it, and says so in Events that the plugin finds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		stdout, _, code = plugin(t, kubeconfig, "events", "-n", ns)
		if code == 0 && strings.Contains(stdout, "nodewright-operator") && strings.Contains(stdout, "vmvolumemigration/move-db") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Nodewright Event about move-db (exit code %d):\n%s", code, stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The binary itself: the exit code reaches the shell.
func TestTheBinary(t *testing.T) {
	startOperator(t)
	bin := filepath.Join(t.TempDir(), "kubectl-nodewright")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ns := env.Namespace(t)
	kubeconfig := env.Kubeconfig(t)
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"migrate", "list", "-n", ns}, 0, "No VMVolumeMigrations found in namespace " + ns + ".\n"},
		{[]string{"migrate", "nope", "root", "--to", linstorClass, "-n", ns, "--name", "m"}, 1,
			`Error: vmvolumemigration/m: spec.vmName: VirtualMachine "nope" not found in namespace ` + ns + "\n"},
		{[]string{"migrate", "nope"}, 2, "Error: kubectl nodewright migrate wants VM VOLUME (or --vm VM VOLUME), got 1 arguments\nRun 'kubectl nodewright migrate --help' for usage.\n"},
	} {
		cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, c.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || stderr.String() != c.stderr {
			t.Errorf("%v: exit code %d, stderr %q; want %d, %q", c.args, code, stderr.String(), c.code, c.stderr)
		}
	}
}
