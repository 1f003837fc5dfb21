package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

// cpuNodes heartbeat every second while the CPU per heartbeat is measured.
const cpuNodes = 50

// reportHeartbeatCPU measures and prints the CPU per heartbeat of the operator and of the
// bare observer, the operator's peak RSS, and then a CPU profile of the operator.
func (b *bench) reportHeartbeatCPU(op, bare *benchproc.Process, window time.Duration, pprofAddr string) error {
	cost, err := b.heartbeatCPU(cpuNodes, window, op, bare)
	if err != nil {
		return fmt.Errorf("CPU per heartbeat: %w", err)
	}
	opBeat, bareBeat := cost.perBeat(cost.operatorCPU), cost.perBeat(cost.bareCPU)
	ratio := float64(opBeat) / float64(max(bareBeat, 1))
	fmt.Printf("\n%d nodes heartbeating every second for %s: %d heartbeat patches, %d ConfigMap changes (%.0f a second)\n",
		cpuNodes, cost.window.Round(time.Second), cost.patches, cost.heartbeats, float64(cost.heartbeats)/cost.window.Seconds())
	if float64(cost.heartbeats) < 0.8*cpuNodes*cost.window.Seconds() {
		fmt.Printf("  (the API server took fewer heartbeats than %d a second: the machine is loaded; the figures are per heartbeat taken)\n", cpuNodes)
	}
	fmt.Printf("  CPU time from /proc/<pid>/stat, both in the same window:\n")
	fmt.Printf("  bare client-go observer   %5.2f %% of one core   %6.1f µs per heartbeat\n",
		benchproc.Percent(cost.bareCPU, cost.window), us(bareBeat))
	fmt.Printf("  nodewright operator       %5.2f %% of one core   %6.1f µs per heartbeat   (%.2f× the bare observer)\n",
		benchproc.Percent(cost.operatorCPU, cost.window), us(opBeat), ratio)
	benchproc.Verdict("CPU per heartbeat ≤ 3× the bare observer", ratio <= 3)
	// Not a verdict: heartbeats that a loaded API server delays past the threshold are
	// stale, and showing it is right; but the operator then had more to do than observe.
	fmt.Printf("  Nodewright API writes in the window: %d", cost.writes)
	if cost.writes > 0 {
		fmt.Print(" (heartbeats reached the API server too late and nodes went stale: the window was not steady)")
	}
	fmt.Println()
	const rssLimit = 64 << 20
	fmt.Printf("  operator peak RSS %.1f MiB (%.1f MiB below the limit); at the end %.1f MiB anonymous (heap, stacks), %.1f MiB file-backed (the binary)\n",
		benchproc.MiB(cost.peakRSS), benchproc.MiB(rssLimit-cost.peakRSS), benchproc.MiB(cost.anonRSS), benchproc.MiB(cost.fileRSS))
	benchproc.Verdict("RSS ≤ 64 MiB", cost.peakRSS <= rssLimit)

	profile := filepath.Join(b.env.RepoRoot, ".bench", "bridge-operator.cpu.pprof")
	if err := os.MkdirAll(filepath.Dir(profile), 0o755); err != nil {
		return err
	}
	profileFor := min(window, 30*time.Second)
	top, err := b.profileOperator(cpuNodes, pprofAddr, profileFor, profile)
	if err != nil {
		return err
	}
	fmt.Printf("\noperator CPU profile of %s more of the same heartbeats (after the window: profiling costs CPU), %s:\n",
		profileFor, profile)
	fmt.Println(indent(top))
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// indent shifts pprof's report under the heading.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// heartbeatCost is the CPU the operator and the bare observer spent on the same heartbeats.
type heartbeatCost struct {
	heartbeats           int64 // changes of the legacy ConfigMap in the window
	patches              int64 // heartbeat patches sent in the window (some land in the same second)
	writes               int64 // the operator's writes of Nodewright objects in the window
	window               time.Duration
	operatorCPU, bareCPU time.Duration
	peakRSS              int64
	anonRSS, fileRSS     int64 // at the end of the window
}

func (h heartbeatCost) perBeat(cpu time.Duration) time.Duration {
	return cpu / time.Duration(max(h.heartbeats, 1))
}

// heartbeatCPU lets n nodes heartbeat every second and measures, in one window, the CPU time
// the operator and the bare observer each spend. Both watch the same ConfigMap changes, so
// the machine's other load weighs on both alike, and CPU time, unlike wall time, is not
// stretched by waiting for a core.
func (b *bench) heartbeatCPU(n int, window time.Duration, op, bare *benchproc.Process) (heartbeatCost, error) {
	if err := b.setNodes(n); err != nil {
		return heartbeatCost{}, err
	}
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = nodeName(i + 1)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	beats := b.heartbeats(ctx, nodes, time.Second)
	// Settle: the new nodes' status objects are created and both observers are warm.
	time.Sleep(15 * time.Second)

	w, err := b.wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(legacyNamespace),
		client.MatchingFields{"metadata.name": configMapName})
	if err != nil {
		return heartbeatCost{}, err
	}
	changes := &int64Counter{}
	go countWrites(ctx, w, changes)
	writes := &int64Counter{}
	for _, list := range []client.ObjectList{&nwv1.NodewrightClusterList{}, &nwv1.NodewrightAgentStatusList{}} {
		w, err := b.wc.Watch(ctx, list)
		if err != nil {
			return heartbeatCost{}, err
		}
		go countWrites(ctx, w, writes)
	}
	opBefore, err := op.CPUTime()
	if err != nil {
		return heartbeatCost{}, err
	}
	bareBefore, err := bare.CPUTime()
	if err != nil {
		return heartbeatCost{}, err
	}
	beatsBefore := beats.get()
	start := time.Now()
	time.Sleep(window)
	opAfter, err := op.CPUTime()
	if err != nil {
		return heartbeatCost{}, err
	}
	bareAfter, err := bare.CPUTime()
	if err != nil {
		return heartbeatCost{}, err
	}
	rss, err := op.PeakRSS()
	if err != nil {
		return heartbeatCost{}, err
	}
	anon, file, err := op.RSSParts()
	if err != nil {
		return heartbeatCost{}, err
	}
	cost := heartbeatCost{heartbeats: changes.get(), patches: beats.get() - beatsBefore, writes: writes.get(), window: time.Since(start),
		operatorCPU: opAfter - opBefore, bareCPU: bareAfter - bareBefore, peakRSS: rss, anonRSS: anon, fileRSS: file}
	if err := b.bothObserve(nodes[0]); err != nil {
		return heartbeatCost{}, err
	}
	return cost, nil
}

// bothObserve is the control of the CPU figures: a DRBD change of one node must show in the
// operator's NodewrightAgentStatus and in the bare observer's summary, or one of them was not
// observing and its CPU time says nothing.
func (b *bench) bothObserve(node string) error {
	// A patch of the one key: a read and an update would keep conflicting with 50 heartbeats
	// a second.
	if err := b.patchKey(legacy.NodeKey(node, legacy.FieldDRBD), `{"resources":4,"connected":3,"upToDate":3,"outOfSyncKiB":2048}`); err != nil {
		return err
	}
	// A loaded API server can delay the change's events by tens of seconds.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		as := &nwv1.NodewrightAgentStatus{}
		summary := &corev1.ConfigMap{}
		errOp := b.wc.Get(b.ctx, client.ObjectKey{Name: node}, as)
		errBare := b.wc.Get(b.ctx, client.ObjectKey{Namespace: legacyNamespace, Name: bareSummaryName}, summary)
		opSaw := errOp == nil && as.Status.Storage != nil && as.Status.Storage.OutOfSyncKiB == 2048
		bareSaw := errBare == nil && strings.Contains(summary.Data["node."+node], `"outOfSyncKiB":2048`)
		if opSaw && bareSaw {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a DRBD change of %s was not observed within 2 minutes (operator %v, bare observer %v): the CPU figures measured nothing",
				node, opSaw, bareSaw)
		}
	}
}

// createBareSummary creates the ConfigMap the bare observer patches.
func (b *bench) createBareSummary() error {
	return b.wc.Create(b.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNamespace, Name: bareSummaryName}})
}

// profileOperator takes a CPU profile of the operator for d, while n nodes heartbeat every
// second as in heartbeatCPU, writes it to path and returns pprof's top functions.
func (b *bench) profileOperator(n int, pprofAddr string, d time.Duration, path string) (string, error) {
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = nodeName(i + 1)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	b.heartbeats(ctx, nodes, time.Second)
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, int(d.Seconds()))
	resp, err := http.Get(url)
	if err != nil {
		return "", fmt.Errorf("fetching the operator's CPU profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("fetching the operator's CPU profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	var report strings.Builder
	for _, args := range [][]string{{"-top", "-nodecount=20"}, {"-top", "-cum", "-nodecount=40"}} {
		out, err := exec.Command("go", append(append([]string{"tool", "pprof"}, args...), path)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go tool pprof: %w\n%s", err, out)
		}
		report.Write(out)
	}
	return report.String(), nil
}
