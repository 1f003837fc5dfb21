package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmsnapshotpolicy"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site"
)

const (
	scheduleVMs   = 100
	scheduleLimit = 2 * time.Second
	// benchDriver and benchClass are the site's CSI driver and its classes.
	benchDriver = "bench.csi.example.com"
	benchClass  = "bench-snapshot"
)

// writes counts the requests that change something (every method but GET), by when they
// were sent.
type writes struct {
	mu    sync.Mutex
	times []time.Time
	what  []string
}

func (w *writes) RoundTrip(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet {
			w.mu.Lock()
			w.times = append(w.times, time.Now())
			w.what = append(w.what, r.Method+" "+r.URL.Path)
			w.mu.Unlock()
		}
		return next.RoundTrip(r)
	})
}

// between are the writes sent in [from, to).
func (w *writes) between(from, to time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for i, t := range w.times {
		if !t.Before(from) && t.Before(to) {
			out = append(out, w.what[i])
		}
	}
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// scheduleResult is what the schedule benchmark measured.
type scheduleResult struct {
	runs     []time.Duration // per run: the scheduled minute to the last of its snapshots seen
	baseline time.Duration   // a bare client creating as many snapshots, the same way seen
	quiet    []string        // the controller's writes between the runs
	window   time.Duration
}

// benchSchedule runs the VMSnapshotPolicy controller, in this process, against a local API
// server with 100 VMs on one every-minute schedule: for two runs, the time from the scheduled
// minute until a watch has seen every snapshot of the run, and the controller's API writes in
// the quiet part of the minute after the first run (its snapshots taken and ended good by the
// local site's KubeVirt, on real files). The baseline is a bare client creating 100 snapshots one after
// the other, seen by the same watch.
func benchSchedule(ctx context.Context) (scheduleResult, error) {
	var res scheduleResult
	ctrl.SetLogger(logr.Discard()) // a failed reconcile shows in the figures
	env := testenv.New()
	if err := env.Start(); err != nil {
		return res, err
	}
	defer func() { _ = env.Stop() }()
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-snapshot"}}
	if err := c.Create(ctx, ns); err != nil {
		return res, err
	}
	stopSite, err := startSite(ctx, env, ns.Name)
	if err != nil {
		return res, err
	}
	defer stopSite()
	for i := range scheduleVMs {
		if err := runningVM(ctx, c, ns.Name, fmt.Sprintf("vm-%03d", i)); err != nil {
			return res, err
		}
	}
	if err := waitAll(ctx, c, ns.Name, "VMs running", func(ctx context.Context) (int, error) {
		var vmis virtv1.VirtualMachineInstanceList
		err := c.List(ctx, &vmis, client.InNamespace(ns.Name))
		return countIf(vmis.Items, func(v virtv1.VirtualMachineInstance) bool { return v.Status.Phase == virtv1.Running }), err
	}); err != nil {
		return res, err
	}

	// The watch that sees the snapshots, for the controller's runs and the baseline alike.
	seen := make(chan string, 4*scheduleVMs)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		return res, err
	}
	w, err := wc.Watch(ctx, &snapv1.VirtualMachineSnapshotList{}, client.InNamespace(ns.Name))
	if err != nil {
		return res, err
	}
	defer w.Stop()
	go func() {
		for e := range w.ResultChan() {
			if s, ok := e.Object.(*snapv1.VirtualMachineSnapshot); ok && e.Type == watch.Added {
				seen <- s.Name
			}
		}
	}()
	waitSeen := func(n int, within time.Duration) (time.Time, error) {
		deadline := time.After(within)
		var last time.Time
		for range n {
			select {
			case <-seen:
				last = time.Now()
			case <-deadline:
				return last, fmt.Errorf("saw fewer than %d snapshots within %s", n, within)
			}
		}
		return last, nil
	}

	// The baseline: a bare client creating 100 snapshots, one after the other.
	began := time.Now()
	for i := range scheduleVMs {
		s := &snapv1.VirtualMachineSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("bare-%03d", i)},
			Spec:       snapv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: fmt.Sprintf("vm-%03d", i)}},
		}
		if err := c.Create(ctx, s); err != nil {
			return res, err
		}
	}
	last, err := waitSeen(scheduleVMs, time.Minute)
	if err != nil {
		return res, err
	}
	res.baseline = last.Sub(began)
	// The site takes the baseline's snapshots too: the runs start once it is done with them.
	if err := waitAll(ctx, c, ns.Name, "baseline snapshots good", func(ctx context.Context) (int, error) {
		var list snapv1.VirtualMachineSnapshotList
		err := c.List(ctx, &list, client.InNamespace(ns.Name))
		return countIf(list.Items, func(s snapv1.VirtualMachineSnapshot) bool {
			return s.Status != nil && s.Status.Phase == snapv1.Succeeded && ptr.Deref(s.Status.ReadyToUse, false)
		}), err
	}); err != nil {
		return res, err
	}

	// The controller, its writes counted.
	counted := &writes{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(counted.RoundTrip)
	apis, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		return res, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Cache: operator.CacheOptions(operator.Scope{}), NewCache: operator.NewCache,
		Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return res, err
	}
	if err := (&vmsnapshotpolicy.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("bench"), Discovery: apis}).SetupWithManager(mgr); err != nil {
		return res, err
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() { stop(); <-done }()

	// The policy, created early in a minute so that the watches are up by its end.
	for time.Now().Second() > 40 {
		time.Sleep(time.Second)
	}
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "minutely"},
		Spec: nwv1.VMSnapshotPolicySpec{
			VMSelector: nwv1.VMSelector{MatchLabels: map[string]string{"backup": "minutely"}},
			Schedule:   nwv1.SnapshotSchedule{Cron: "* * * * *"},
			Retention:  nwv1.SnapshotRetention{KeepLast: 2},
		},
	}
	if err := c.Create(ctx, p); err != nil {
		return res, err
	}
	minute := time.Now().Truncate(time.Minute)
	for run := range 2 {
		// The run of the next minute: counted from the minute, not from when this loop wakes
		// (late, on a loaded machine).
		minute = minute.Add(time.Minute)
		last, err := waitSeen(scheduleVMs, 90*time.Second)
		if err != nil {
			return res, fmt.Errorf("run %d: %w", run+1, err)
		}
		res.runs = append(res.runs, last.Sub(minute))
		if run == 1 {
			break
		}
		// The site's KubeVirt takes every snapshot of the run (freeze, a copy of the volume's
		// file, thaw) and ends it good.
		if err := waitAll(ctx, c, ns.Name, "snapshots of the run good", func(ctx context.Context) (int, error) {
			var list snapv1.VirtualMachineSnapshotList
			err := c.List(ctx, &list, client.InNamespace(ns.Name), client.HasLabels{nwv1.LabelSnapshotPolicy})
			return countIf(list.Items, func(s snapv1.VirtualMachineSnapshot) bool {
				return s.Annotations[nwv1.AnnotationSnapshotScheduled] == minute.UTC().Format(time.RFC3339) &&
					s.Status != nil && s.Status.Phase == snapv1.Succeeded && ptr.Deref(s.Status.ReadyToUse, false)
			}), err
		}); err != nil {
			return res, err
		}
		// The quiet part of the minute: from 10 s after the last snapshot ended (the
		// controller's writes about them done) until 1 s before the next run.
		from, to := time.Now().Add(10*time.Second), minute.Add(59*time.Second)
		if to.Sub(from) < 20*time.Second {
			return res, fmt.Errorf("playing the run's snapshots took until %s: no quiet part of the minute is left to count writes in", time.Now().Format(time.RFC3339))
		}
		time.Sleep(time.Until(to))
		res.quiet, res.window = counted.between(from, to), to.Sub(from)
	}
	return res, nil
}

// startSite runs the local site for the namespace: its CSI driver, its KubeVirt with a guest
// agent in every VM, and its snapshot controllers, on files in a folder of its own. The
// returned function stops it and removes the folder.
func startSite(ctx context.Context, env *testenv.Env, ns string) (func(), error) {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: benchClass}, Provisioner: benchDriver,
		ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	vsc := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: benchClass}, Driver: benchDriver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
	for _, o := range []client.Object{sc, vsc} {
		if err := env.Client.Create(ctx, o); err != nil {
			return nil, err
		}
	}
	copyBinary, err := site.CopyBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nodewright-bench-snapshot-")
	if err != nil {
		return nil, err
	}
	s, err := site.New(env.Config, site.Options{Dir: dir, Drivers: []string{benchDriver}, CopyBinary: copyBinary, Namespaces: []string{ns},
		GuestAgent: func(*virtv1.VirtualMachineInstance) bool { return true }})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Start(sctx) }()
	stop := func() { cancel(); <-done; _ = os.RemoveAll(dir) }
	select {
	case <-s.Started():
	case <-time.After(time.Minute):
		stop()
		return nil, errors.New("the site did not start within a minute")
	}
	if err := s.Err(); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// runningVM creates a VM whose volume "root" is a 1 MiB block claim of the site's.
func runningVM(ctx context.Context, c client.Client, ns, name string) error {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-root"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(benchClass),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}
	if err := c.Create(ctx, pvc); err != nil {
		return err
	}
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"backup": "minutely"}},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
				Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
					PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
					},
				}}},
			}},
		},
	}
	return c.Create(ctx, vm)
}

// waitAll waits, for up to three minutes, until count says all scheduleVMs are there.
func waitAll(ctx context.Context, c client.Client, ns, what string, count func(context.Context) (int, error)) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, err := count(ctx)
		if err == nil && n >= scheduleVMs {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%d of %d %s after 3 minutes: %w", n, scheduleVMs, what, err)
			}
			return fmt.Errorf("%d of %d %s after 3 minutes", n, scheduleVMs, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func countIf[T any](items []T, ok func(T) bool) int {
	n := 0
	for _, i := range items {
		if ok(i) {
			n++
		}
	}
	return n
}

// printSchedule prints the schedule's figures and says whether they pass.
func printSchedule(r scheduleResult) bool {
	ok := true
	fmt.Printf("\n%d VMs on one schedule (* * * * *): the scheduled minute to every snapshot of the run seen by a watch\n", scheduleVMs)
	for i, d := range r.runs {
		fmt.Printf("  run %d: %8.0f ms   (%.3f× the target; %.2f× the baseline)\n", i+1, ms(d), float64(d)/float64(scheduleLimit), float64(d)/float64(r.baseline))
		ok = ok && d <= scheduleLimit
	}
	fmt.Printf("  baseline: a bare client creating %d snapshots one after the other, %.0f ms\n", scheduleVMs, ms(r.baseline))
	word := "PASS"
	if !ok {
		word = "FAIL"
	}
	fmt.Printf("  %s  ≤ %s\n", word, scheduleLimit)
	slices.Sort(r.quiet)
	fmt.Printf("\nthe controller's API writes between runs (the last %.0f s before the second run, 10 s after the first run's snapshots ended good)\n", r.window.Seconds())
	fmt.Printf("  %d writes", len(r.quiet))
	if len(r.quiet) > 0 {
		fmt.Printf(": %v", r.quiet)
	}
	fmt.Println()
	word = "PASS"
	if len(r.quiet) > 0 {
		word, ok = "FAIL", false
	}
	fmt.Printf("  %s  0 writes\n", word)
	return ok
}
