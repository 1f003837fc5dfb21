package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

const (
	legacyNamespace = "node-init"
	configMapName   = "node-init-state"
	baselineName    = "baseline-status"
)

type bench struct {
	env *testenv.Env
	ctx context.Context
	wc  client.WithWatch

	mu         sync.Mutex // serialises writes to the legacy ConfigMap
	generation int64
	state      legacy.State
}

type latencyStats struct{ p50, p99 time.Duration }

// setUp creates the legacy namespace and ConfigMap (three fresh nodes) and the cluster object.
func (b *bench) setUp() error {
	var err error
	// Without client-go's default limit of 5 requests a second, which 50 nodes heartbeating
	// every second would otherwise meet.
	cfg := rest.CopyConfig(b.env.Config)
	cfg.QPS = -1
	if b.wc, err = client.NewWithWatch(cfg, client.Options{Scheme: b.env.Scheme}); err != nil {
		return err
	}
	if err := b.wc.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: legacyNamespace}}); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNamespace, Name: configMapName}, Data: map[string]string{}}
	if err := b.wc.Create(b.ctx, cm); err != nil {
		return err
	}
	if err := b.setNodes(3); err != nil {
		return err
	}
	if err := b.transition(legacy.SingleNodeReady); err != nil {
		return err
	}
	ref := nwv1.NamespacedObjectReference{Namespace: legacyNamespace}
	nwc := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{ConfigMapRef: ref, DaemonSetRef: ref, EventComponent: "node-init"},
			HeartbeatStaleAfter: metav1.Duration{Duration: 30 * time.Second}}}
	nwc.Spec.Legacy.ConfigMapRef.Name, nwc.Spec.Legacy.DaemonSetRef.Name = configMapName, "node-init"
	return b.wc.Create(b.ctx, nwc)
}

// mutate applies change to the legacy ConfigMap's data, retrying on conflict.
func (b *bench) mutate(change func(map[string]string)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		if err := b.wc.Get(b.ctx, client.ObjectKey{Namespace: legacyNamespace, Name: configMapName}, cm); err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		change(cm.Data)
		return b.wc.Update(b.ctx, cm)
	})
}

func (b *bench) transition(to legacy.State) error {
	return b.mutate(func(d map[string]string) {
		b.generation++
		d[legacy.KeyPreviousState] = string(b.state)
		d[legacy.KeyState] = string(to)
		d[legacy.KeyStateSince] = time.Now().UTC().Format(time.RFC3339)
		d[legacy.KeyGeneration] = strconv.FormatInt(b.generation, 10)
		b.state = to
	})
}

func nodeName(i int) string { return fmt.Sprintf("edge-%02d", i) }

func (b *bench) setNodes(n int) error {
	return b.mutate(func(d map[string]string) {
		for k := range d {
			if strings.HasPrefix(k, "node.") {
				delete(d, k)
			}
		}
		names := make([]string, n)
		now := time.Now().UTC().Format(time.RFC3339)
		for i := range names {
			names[i] = nodeName(i + 1)
			d[legacy.NodeKey(names[i], legacy.FieldHeartbeat)] = now
			d[legacy.NodeKey(names[i], legacy.FieldRole)] = "secondary"
			d[legacy.NodeKey(names[i], legacy.FieldDRBD)] = `{"resources":4,"connected":4,"upToDate":4,"outOfSyncKiB":0}`
			d[legacy.NodeKey(names[i], legacy.FieldBondMode)] = "802.3ad"
		}
		d[legacy.KeyNodes] = strings.Join(names, ",")
	})
}

// heartbeat refreshes one node's heartbeat as its pod does: a merge patch of its one key.
func (b *bench) heartbeat(node string) error {
	return b.patchKey(legacy.NodeKey(node, legacy.FieldHeartbeat), time.Now().UTC().Format(time.RFC3339))
}

// patchKey sets one key of the legacy ConfigMap.
func (b *bench) patchKey(key, value string) error {
	patch, err := json.Marshal(map[string]any{"data": map[string]string{key: value}})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNamespace, Name: configMapName}}
	return b.wc.Patch(b.ctx, cm, client.RawPatch(types.MergePatchType, patch))
}

// heartbeats refreshes each node's heartbeat every interval, the nodes spread over the
// interval as independent pods would be, until ctx ends; it returns the number of writes.
func (b *bench) heartbeats(ctx context.Context, nodes []string, interval time.Duration) *int64Counter {
	count := &int64Counter{}
	for _, n := range nodes {
		go func() {
			timer := time.NewTimer(rand.N(interval))
			defer timer.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
					if b.heartbeat(n) == nil {
						count.add(1)
					}
					timer.Reset(interval)
				}
			}
		}()
	}
	return count
}

type int64Counter struct {
	mu sync.Mutex
	n  int64
}

func (c *int64Counter) add(d int64) { c.mu.Lock(); c.n += d; c.mu.Unlock() }
func (c *int64Counter) get() int64  { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// phaseWatch streams the phase a watched object reports.
type phaseWatch struct {
	list  client.ObjectList
	opts  []client.ListOption
	phase func(runtime.Object) string
}

func (b *bench) clusterPhase() phaseWatch {
	return phaseWatch{list: &nwv1.NodewrightClusterList{}, phase: func(o runtime.Object) string {
		if c, ok := o.(*nwv1.NodewrightCluster); ok {
			return string(c.Status.Phase)
		}
		return ""
	}}
}

func (b *bench) baselinePhase() phaseWatch {
	return phaseWatch{list: &corev1.ConfigMapList{},
		opts: []client.ListOption{client.InNamespace(legacyNamespace), client.MatchingFields{"metadata.name": baselineName}},
		phase: func(o runtime.Object) string {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				return cm.Data["phase"]
			}
			return ""
		}}
}

func (b *bench) watchPhases(ctx context.Context, pw phaseWatch) (<-chan string, error) {
	w, err := b.wc.Watch(ctx, pw.list, pw.opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan string, 1024)
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					out <- pw.phase(ev.Object)
				}
			}
		}
	}()
	return out, nil
}

func waitFor(seen <-chan string, want string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case got := <-seen:
			if got == want {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("phase %s not seen within %s", want, timeout)
		}
	}
}

// latency flips the legacy state n times between SINGLE_NODE_READY and PEER_DETECTED (an
// allowed pair) and measures the time until the watched object reports the new phase.
func (b *bench) latency(n int, target func() phaseWatch, loop func(context.Context) error) (latencyStats, error) {
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	if loop != nil {
		errc := make(chan error, 1)
		go func() { errc <- loop(ctx) }()
		defer func() { cancel(); <-errc }()
	}
	seen, err := b.watchPhases(ctx, target())
	if err != nil {
		return latencyStats{}, err
	}
	next := map[legacy.State]legacy.State{legacy.SingleNodeReady: legacy.PeerDetected, legacy.PeerDetected: legacy.SingleNodeReady}
	// Settle: one change, unmeasured, so the watcher and the observer are warm.
	if err := b.transition(next[b.state]); err != nil {
		return latencyStats{}, err
	}
	if err := waitFor(seen, string(legacy.PhaseOf(b.state)), 30*time.Second); err != nil {
		return latencyStats{}, err
	}
	durations := make([]time.Duration, 0, n)
	for range n {
		to := next[b.state]
		start := time.Now()
		if err := b.transition(to); err != nil {
			return latencyStats{}, err
		}
		if err := waitFor(seen, string(legacy.PhaseOf(to)), 10*time.Second); err != nil {
			return latencyStats{}, err
		}
		durations = append(durations, time.Since(start))
	}
	slices.Sort(durations)
	return latencyStats{p50: durations[len(durations)/2], p99: durations[(len(durations)*99)/100]}, nil
}

// runBaseline is the bare client-go loop the bridge is compared with: watch the ConfigMap,
// map its state to a phase, write the phase to another object.
func (b *bench) runBaseline(ctx context.Context) error {
	w, err := b.wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(legacyNamespace),
		client.MatchingFields{"metadata.name": configMapName})
	if err != nil {
		return err
	}
	defer w.Stop()
	out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNamespace, Name: baselineName}, Data: map[string]string{}}
	if err := b.wc.Create(ctx, out); err != nil {
		return err
	}
	defer func() { _ = b.wc.Delete(context.Background(), out) }()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			phase := string(legacy.PhaseOf(legacy.State(cm.Data[legacy.KeyState])))
			if phase == last {
				continue
			}
			patch := client.RawPatch("application/merge-patch+json", []byte(`{"data":{"phase":"`+phase+`"}}`))
			if err := b.wc.Patch(ctx, out, patch); err != nil {
				return err
			}
			last = phase
		}
	}
}

// staleDetection measures, rounds times, how long after (last heartbeat + threshold) the
// cluster reports Degraded, with the other nodes heartbeating every second.
func (b *bench) staleDetection(rounds int) (time.Duration, error) {
	const threshold = 3 * time.Second
	if err := b.setThreshold(threshold); err != nil {
		return 0, err
	}
	defer func() { _ = b.setThreshold(30 * time.Second) }()
	if err := b.transition(legacy.PeerDetected); err != nil {
		return 0, err
	}
	for _, s := range []legacy.State{legacy.PeerNetworkConfiguring, legacy.PeerStorageJoining, legacy.ReplicaPlacement,
		legacy.DRBDConnecting, legacy.DRBDSyncing, legacy.DRBDVerifying, legacy.QuorumConfiguring, legacy.TaintsReleasing, legacy.MultiNodeReady} {
		if err := b.transition(s); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	b.heartbeats(ctx, []string{nodeName(1), nodeName(2)}, time.Second)
	seen, err := b.watchPhases(ctx, b.clusterPhase())
	if err != nil {
		return 0, err
	}
	var worst time.Duration
	for range rounds {
		if err := b.heartbeat(nodeName(3)); err != nil {
			return 0, err
		}
		if err := waitFor(seen, string(nwv1.ClusterMultiNode), 30*time.Second); err != nil {
			return 0, err
		}
		last, err := b.lastHeartbeat(nodeName(3))
		if err != nil {
			return 0, err
		}
		if err := waitFor(seen, string(nwv1.ClusterDegraded), 30*time.Second); err != nil {
			return 0, err
		}
		worst = max(worst, time.Since(last.Add(threshold)))
	}
	return worst, nil
}

func (b *bench) lastHeartbeat(node string) (time.Time, error) {
	cm := &corev1.ConfigMap{}
	if err := b.wc.Get(b.ctx, client.ObjectKey{Namespace: legacyNamespace, Name: configMapName}, cm); err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339, cm.Data[legacy.NodeKey(node, legacy.FieldHeartbeat)])
}

func (b *bench) setThreshold(d time.Duration) error {
	nwc := &nwv1.NodewrightCluster{}
	if err := b.wc.Get(b.ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
		return err
	}
	nwc.Spec.HeartbeatStaleAfter = metav1.Duration{Duration: d}
	return b.wc.Update(b.ctx, nwc)
}

type steady struct {
	heartbeats, writes int64
	peakRSS            int64
	cpuPercent         float64
}

// steadyState lets n nodes heartbeat every 10 s and counts every write to a Nodewright
// object during the window, after a settling period.
func (b *bench) steadyState(n int, window time.Duration, op *benchproc.Process) (steady, error) {
	if err := b.setNodes(n); err != nil {
		return steady{}, err
	}
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = nodeName(i + 1)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	beats := b.heartbeats(ctx, nodes, 10*time.Second)
	// Settle: the new nodes' status objects are created and filled.
	time.Sleep(15 * time.Second)

	writes := &int64Counter{}
	for _, list := range []client.ObjectList{&nwv1.NodewrightClusterList{}, &nwv1.NodewrightAgentStatusList{}} {
		w, err := b.wc.Watch(ctx, list)
		if err != nil {
			return steady{}, err
		}
		go countWrites(ctx, w, writes)
	}
	cpuBefore, err := op.CPUTime()
	if err != nil {
		return steady{}, err
	}
	beatsBefore := beats.get()
	start := time.Now()
	time.Sleep(window)
	cpuAfter, err := op.CPUTime()
	if err != nil {
		return steady{}, err
	}
	rss, err := op.PeakRSS()
	if err != nil {
		return steady{}, err
	}
	result := steady{heartbeats: beats.get() - beatsBefore, writes: writes.get(), peakRSS: rss,
		cpuPercent: 100 * float64(cpuAfter-cpuBefore) / float64(time.Since(start))}

	// Control: a real change must be counted, or the zero above proves nothing.
	if err := b.mutate(func(d map[string]string) {
		d[legacy.NodeKey(nodes[0], legacy.FieldDRBD)] = `{"resources":4,"connected":3,"upToDate":3,"outOfSyncKiB":1024}`
	}); err != nil {
		return steady{}, err
	}
	for deadline := time.Now().Add(10 * time.Second); writes.get() == result.writes; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return steady{}, fmt.Errorf("a DRBD change after the window was not counted as a write: the counter is broken")
		}
	}
	return result, b.setNodes(n)
}

// countWrites counts modifications, skipping the initial ADDED events a watch replays.
func countWrites(ctx context.Context, w watch.Interface, writes *int64Counter) {
	defer w.Stop()
	replaying := time.Now().Add(2 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			if ev.Type == watch.Modified || ev.Type == watch.Deleted || (ev.Type == watch.Added && time.Now().After(replaying)) {
				writes.add(1)
			}
		}
	}
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
