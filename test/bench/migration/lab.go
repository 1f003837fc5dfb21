package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"lukechampine.com/blake3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site"
)

const (
	namespace = "bench-migration"
	driver    = "linstor.csi.linbit.com"
	class     = "bench-linstor"
	vmName    = "bench"
	volume    = "root"
	sourcePVC = "bench-root"

	// chunk is how much the fill writes, and the check reads, at a time.
	chunk = 4 << 20
)

// lab is the API server with the site and the operator running against it.
type lab struct {
	env  *testenv.Env
	wc   client.WithWatch
	site *site.Site
	// stops, run in reverse order by stop.
	stops []func()
}

// sourceVolume is the migrated volume: its backing file and what was written into it.
type sourceVolume struct {
	path   string
	seed   [32]byte
	digest string // blake3, as nodewright-copy writes it
}

// startLab starts the site in dir and the operator's controllers, and returns once both run.
func startLab(ctx context.Context, env *testenv.Env, dir, copyBinary string) (*lab, error) {
	l := &lab{env: env}
	var err error
	if l.wc, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
		return nil, err
	}
	if err := l.wc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return nil, err
	}
	l.site, err = site.New(env.Config, site.Options{
		Dir: dir, Drivers: []string{driver}, CopyBinary: copyBinary, Namespaces: []string{namespace},
	})
	if err != nil {
		return nil, err
	}
	l.run(ctx, "the site", l.site.Start)
	select {
	case <-l.site.Started():
	case <-time.After(time.Minute):
		l.stop()
		return nil, errors.New("the site did not start within a minute")
	}
	if err := l.site.Err(); err != nil {
		l.stop()
		return nil, err
	}

	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		l.stop()
		return nil, fmt.Errorf("creating the operator's manager: %w", err)
	}
	if err := operator.SetupControllers(ctx, mgr); err != nil {
		l.stop()
		return nil, fmt.Errorf("setting up the operator's controllers: %w", err)
	}
	l.run(ctx, "the operator", mgr.Start)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		l.stop()
		return nil, errors.New("the operator's caches did not sync within a minute")
	}
	return l, nil
}

// run starts a component in the background; stop cancels it and waits for it.
func (l *lab) run(ctx context.Context, what string, start func(context.Context) error) {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- start(runCtx) }()
	l.stops = append(l.stops, func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "bench-migration: %s stopped with an error: %v\n", what, err)
		}
	})
}

// stop stops the operator, then the site (which stops its processes).
func (l *lab) stop() {
	for i := len(l.stops) - 1; i >= 0; i-- {
		l.stops[i]()
	}
	l.stops = nil
}

// prepare creates the storage class, a Block PVC of size bytes full of random data and a VM
// running on it.
func (l *lab) prepare(ctx context.Context, size int64) (*sourceVolume, error) {
	objects := []client.Object{
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: driver,
			ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)},
		&snapshotv1.VolumeSnapshotClass{
			ObjectMeta: metav1.ObjectMeta{Name: class + "-snap", Annotations: map[string]string{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
			Driver:     driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
		},
		&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: sourcePVC, Namespace: namespace},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(class),
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI)}},
			},
		},
	}
	for _, o := range objects {
		if err := l.wc.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	var path string
	if err := poll(ctx, 30*time.Second, func() (bool, string) {
		p, err := l.site.BackingFile(ctx, namespace, sourcePVC)
		path = p
		return err == nil, fmt.Sprintf("PVC %s has no backing file: %v", sourcePVC, err)
	}); err != nil {
		return nil, err
	}
	src := &sourceVolume{path: path}
	if _, err := crand.Read(src.seed[:]); err != nil {
		return nil, err
	}
	var err error
	if src.digest, err = fill(path, size, src.seed); err != nil {
		return nil, err
	}

	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: vmName, Namespace: namespace},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: volume}}}},
				Volumes: []virtv1.Volume{{Name: volume, VolumeSource: virtv1.VolumeSource{
					PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: sourcePVC},
					},
				}}},
			}},
		},
	}
	if err := l.wc.Create(ctx, vm); err != nil {
		return nil, fmt.Errorf("creating VM %s: %w", vmName, err)
	}
	return src, poll(ctx, time.Minute, func() (bool, string) {
		vmi := &virtv1.VirtualMachineInstance{}
		if err := l.wc.Get(ctx, client.ObjectKey{Namespace: namespace, Name: vmName}, vmi); err != nil {
			return false, fmt.Sprintf("VMI %s: %v", vmName, err)
		}
		return vmi.Status.Phase == virtv1.Running, fmt.Sprintf("VMI %s is %q, want Running", vmName, vmi.Status.Phase)
	})
}

// fill writes size bytes of the ChaCha8 stream of seed over the file, in chunks, syncs it and
// returns the stream's blake3 digest.
func fill(path string, size int64, seed [32]byte) (string, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	info, err := f.Stat()
	if err != nil {
		return "", errors.Join(err, f.Close())
	}
	if info.Size() != size {
		return "", errors.Join(fmt.Errorf("%s is %d bytes, want %d", path, info.Size(), size), f.Close())
	}
	stream := rand.NewChaCha8(seed)
	hash := blake3.New(32, nil)
	buf := make([]byte, chunk)
	for off := int64(0); off < size && err == nil; off += chunk {
		b := buf[:min(chunk, size-off)]
		_, _ = stream.Read(b) // never fails
		_, _ = hash.Write(b)  // never fails
		_, err = f.WriteAt(b, off)
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return "", fmt.Errorf("filling %s: %w", path, err)
	}
	return "blake3:" + hex.EncodeToString(hash.Sum(nil)), nil
}

// poll checks cond every 20 ms until it holds, and fails with its last message after timeout.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", timeout, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
