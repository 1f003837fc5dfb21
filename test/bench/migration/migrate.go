package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/blockcopy"
)

const (
	migrationName    = "bench"
	migrationTimeout = 10 * time.Minute
)

// observation is what a watch saw of the migration, in wall-clock times of this process.
type observation struct {
	created, succeeded time.Time
	order              []string // the steps, as status.steps lists them
	steps              map[string]*stepTimes
	// snapshots are when each VolumeSnapshot was seen created and seen ready to use: the
	// site's work (and a CSI driver's), as opposed to the operator's.
	snapshots map[string]*snapshotTimes
	// copyResult is nodewright-copy's result in the Copy Job's pod, nil if never seen.
	copyResult *blockcopy.Result
	final      *nwv1.VMVolumeMigration
}

type snapshotTimes struct{ created, ready time.Time }

// seeSnapshot records a VolumeSnapshot's creation and readiness, seen at at.
func (o *observation) seeSnapshot(vs *snapshotv1.VolumeSnapshot, at time.Time) {
	t := o.snapshots[vs.Name]
	if t == nil {
		t = &snapshotTimes{created: at}
		o.snapshots[vs.Name] = t
	}
	if t.ready.IsZero() && vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false) {
		t.ready = at
	}
}

// snapshotTook is how long the site took to make the named snapshot ready; zero if unseen.
func (o *observation) snapshotTook(name string) time.Duration {
	if t := o.snapshots[name]; t != nil && !t.ready.IsZero() {
		return t.ready.Sub(t.created)
	}
	return 0
}

// stepTimes are when a step was first seen Running and first seen finished.
type stepTimes struct {
	running, done time.Time
	state         nwv1.StepState
}

// see records the steps' states in m, seen at at.
func (o *observation) see(m *nwv1.VMVolumeMigration, at time.Time) {
	o.order = o.order[:0]
	for _, s := range m.Status.Steps {
		o.order = append(o.order, s.Name)
		t := o.steps[s.Name]
		if t == nil {
			t = &stepTimes{}
			o.steps[s.Name] = t
		}
		t.state = s.State
		switch s.State {
		case nwv1.StepRunning:
			if t.running.IsZero() {
				t.running = at
			}
		case nwv1.StepSucceeded, nwv1.StepSkipped, nwv1.StepFailed, nwv1.StepCancelled:
			if t.done.IsZero() {
				t.done = at
			}
		}
	}
}

// migrate creates a Cold migration of the VM's volume to a new volume of the same class and
// watches it until it succeeds. Before the create it calls dropCaches.
func (l *lab) migrate(ctx context.Context, dropCaches func()) (*observation, error) {
	ctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	migrations, err := l.wc.Watch(ctx, &nwv1.VMVolumeMigrationList{}, client.InNamespace(namespace))
	if err != nil {
		return nil, err
	}
	defer migrations.Stop()
	pods, err := l.wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(namespace))
	if err != nil {
		return nil, err
	}
	defer pods.Stop()
	snapshots, err := l.wc.Watch(ctx, &snapshotv1.VolumeSnapshotList{}, client.InNamespace(namespace))
	if err != nil {
		return nil, err
	}
	defer snapshots.Stop()

	m := &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Name: migrationName, Namespace: namespace},
		Spec: nwv1.VMVolumeMigrationSpec{
			VMName: vmName, VolumeName: volume, Mode: nwv1.MigrationCold,
			Target: nwv1.MigrationTarget{StorageClassName: class},
		},
	}
	dropCaches()
	o := &observation{steps: map[string]*stepTimes{}, snapshots: map[string]*snapshotTimes{}, created: time.Now()}
	if err := l.wc.Create(ctx, m); err != nil {
		return nil, fmt.Errorf("creating the migration: %w", err)
	}
	last := m
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the migration did not succeed within %s: %w; it is %s, steps %s",
				migrationTimeout, ctx.Err(), last.Status.Phase, describeSteps(last))
		case ev, ok := <-migrations.ResultChan():
			if !ok {
				return nil, errors.New("the watch of the migration closed")
			}
			at := time.Now()
			seen, ok := ev.Object.(*nwv1.VMVolumeMigration)
			if !ok {
				return nil, fmt.Errorf("the watch of the migration failed: %w", apierrors.FromObject(ev.Object))
			}
			if ev.Type == watch.Deleted || seen.Name != migrationName {
				continue
			}
			last = seen
			o.see(seen, at)
			switch seen.Status.Phase {
			case nwv1.WorkflowSucceeded:
				o.succeeded, o.final = at, seen
				return o, o.awaitSnapshots(ctx, snapshots, seen.Status.Snapshots.Before, seen.Status.Snapshots.After)
			case nwv1.WorkflowFailed, nwv1.WorkflowRollingBack, nwv1.WorkflowRolledBack:
				return nil, fmt.Errorf("the migration went %s: steps %s", seen.Status.Phase, describeSteps(seen))
			}
		case ev, ok := <-pods.ResultChan():
			if !ok {
				return nil, errors.New("the watch of the pods closed")
			}
			if pod, isPod := ev.Object.(*corev1.Pod); isPod {
				if r := copyResult(pod); r != nil {
					o.copyResult = r
				}
			}
		case ev, ok := <-snapshots.ResultChan():
			if !ok {
				return nil, errors.New("the watch of the snapshots closed")
			}
			if vs, isSnapshot := ev.Object.(*snapshotv1.VolumeSnapshot); isSnapshot && ev.Type != watch.Deleted {
				o.seeSnapshot(vs, time.Now())
			}
		}
	}
}

// awaitSnapshots reads the snapshots' watch until it has seen the named ones ready: their
// events may still be queued behind the migration's last one.
func (o *observation) awaitSnapshots(ctx context.Context, w watch.Interface, names ...string) error {
	timeout := time.After(10 * time.Second)
	for _, name := range names {
		for o.snapshotTook(name) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timeout:
				return fmt.Errorf("the watch never saw VolumeSnapshot %s ready, though the migration succeeded", name)
			case ev, ok := <-w.ResultChan():
				if !ok {
					return errors.New("the watch of the snapshots closed")
				}
				if vs, isSnapshot := ev.Object.(*snapshotv1.VolumeSnapshot); isSnapshot && ev.Type != watch.Deleted {
					o.seeSnapshot(vs, time.Now())
				}
			}
		}
	}
	return nil
}

// copyResult is the result of nodewright-copy copy in the pod's termination message, or nil.
func copyResult(pod *corev1.Pod) *blockcopy.Result {
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Terminated == nil {
			continue
		}
		var r blockcopy.Result
		if json.Unmarshal([]byte(strings.TrimSpace(s.State.Terminated.Message)), &r) == nil && r.Command == "copy" {
			return &r
		}
	}
	return nil
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

// verify checks the migration's proof and the bytes: both checksums are the digest of what
// was written, and the source and the target both read back as the written stream.
func (l *lab) verify(ctx context.Context, m *nwv1.VMVolumeMigration, src *sourceVolume) error {
	c := m.Status.Checksum
	if c == nil || c.Source != src.digest || c.Target != src.digest {
		return fmt.Errorf("the migration's checksum is %+v, want source and target %s", c, src.digest)
	}
	if m.Status.TargetPVCName == "" || m.Status.TargetPVCName == sourcePVC {
		return fmt.Errorf("the migration names target PVC %q", m.Status.TargetPVCName)
	}
	target, err := l.site.BackingFile(ctx, namespace, m.Status.TargetPVCName)
	if err != nil {
		return err
	}
	return sameAsStream(src.seed, src.path, target)
}

// sameAsStream reads the files in chunks and checks that each holds exactly the ChaCha8
// stream of seed, as fill wrote it.
func sameAsStream(seed [32]byte, paths ...string) error {
	files := make([]*os.File, len(paths))
	var size int64
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		if i > 0 && info.Size() != size {
			return fmt.Errorf("%s is %d bytes, %s %d", p, info.Size(), paths[0], size)
		}
		files[i], size = f, info.Size()
	}
	stream := rand.NewChaCha8(seed)
	want, got := make([]byte, chunk), make([]byte, chunk)
	for off := int64(0); off < size; off += chunk {
		n := min(chunk, size-off)
		_, _ = stream.Read(want[:n]) // never fails
		for _, f := range files {
			if _, err := f.ReadAt(got[:n], off); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if !bytes.Equal(got[:n], want[:n]) {
				return fmt.Errorf("%s differs from the data written into the source in the %d bytes from byte %d", f.Name(), n, off)
			}
		}
	}
	return nil
}
