package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site"
)

var env = testenv.New()

func TestMain(m *testing.M) {
	if dir := os.Getenv("KAIROS_NODE_HELPER"); dir != "" {
		os.Exit(kairosAgentHelper(dir))
	}
	os.Exit(env.Run(m))
}

const (
	driver     = "fill.csi.example.com"
	volumeSize = 4 << 20
)

// filled is a test's site, with claims of its class, and fill run as the command runs it.
type filled struct {
	t          *testing.T
	ns, dir    string
	kubeconfig string
	site       *site.Site
}

func newFilled(t *testing.T) *filled {
	t.Helper()
	f := &filled{t: t, ns: env.Namespace(t), dir: t.TempDir(), kubeconfig: env.Kubeconfig(t)}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: f.ns}, Provisioner: driver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	if err := env.Client.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), sc) })
	f.site = site.Start(t, env.Config, site.Options{Dir: f.dir, Drivers: []string{driver}, CopyBinary: "unused",
		NodeName: "site-" + f.ns, Namespaces: []string{f.ns}})
	return f
}

// claim creates a block claim of the test's class.
func (f *filled) claim(name string) {
	f.t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(f.ns),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(volumeSize, resource.BinarySI)}},
		},
	}
	if err := env.Client.Create(context.Background(), pvc); err != nil {
		f.t.Fatal(err)
	}
}

// fill runs nodewright-site fill on the claim with the extra flags, as a user would.
func (f *filled) fill(pvc string, flags ...string) {
	f.t.Helper()
	args := append([]string{"fill", "--kubeconfig", f.kubeconfig, "--dir", f.dir, "--drivers", driver, "--mib", "1"}, flags...)
	var stderr bytes.Buffer
	if err := run(context.Background(), append(args, f.ns, pvc), &stderr); err != nil {
		f.t.Fatalf("fill %s %v: %v\n%s", pvc, flags, err, stderr.String())
	}
}

// bytesOf reads the claim's backing file, found as a user finds it: the PV's volume handle
// under DIR/volumes.
func (f *filled) bytesOf(pvc string) []byte {
	f.t.Helper()
	claim := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: pvc}, claim); err != nil {
		f.t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: claim.Spec.VolumeName}, pv); err != nil {
		f.t.Fatal(err)
	}
	path := fmt.Sprintf("%s/volumes/%s.img", f.dir, pv.Spec.CSI.VolumeHandle)
	if found, err := f.site.BackingFile(context.Background(), f.ns, pvc); err != nil || found != path {
		f.t.Fatalf("claim %s: the site's file is %q (%v), the documented path %q", pvc, found, err, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(data) != volumeSize {
		f.t.Fatalf("claim %s: %d bytes, want %d", pvc, len(data), volumeSize)
	}
	return data
}

// TestFillGivesEachClaimItsOwnData: two claims filled with the defaults hold different bytes
// (with one seed for all, a copy that did nothing between two filled volumes would verify),
// and filling a claim again, or with the same --seed, writes the same bytes.
func TestFillGivesEachClaimItsOwnData(t *testing.T) {
	f := newFilled(t)
	for _, name := range []string{"one", "two", "three"} {
		f.claim(name)
	}
	f.fill("one")
	f.fill("two")
	one, two := f.bytesOf("one"), f.bytesOf("two")
	if bytes.Equal(one[:1<<20], two[:1<<20]) {
		t.Fatal("two claims filled with the defaults hold the same data")
	}
	if bytes.Count(one[1<<20:], []byte{0}) != volumeSize-1<<20 {
		t.Error("fill wrote past --mib 1")
	}
	f.fill("one")
	if again := f.bytesOf("one"); !bytes.Equal(again, one) {
		t.Error("filling a claim again with the defaults changed its data")
	}

	f.fill("two", "--seed", "7")
	f.fill("three", "--seed", "7")
	seven := f.bytesOf("two")
	if !bytes.Equal(seven, f.bytesOf("three")) {
		t.Error("two claims filled with --seed 7 hold different data")
	}
	if bytes.Equal(seven, two) {
		t.Error("--seed 7 wrote the claim's default data")
	}
}

func TestFillUsageNamesTheSeed(t *testing.T) {
	var stderr bytes.Buffer
	if err := run(context.Background(), nil, &stderr); err == nil {
		t.Fatal("no command was accepted")
	}
	for _, want := range []string{"--seed S", "DIR/volumes/<the PV's spec.csi.volumeHandle>.img", "two claims get different bytes"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("usage does not say %q:\n%s", want, stderr.String())
		}
	}
}
