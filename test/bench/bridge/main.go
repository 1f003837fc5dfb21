// Command bridge benchmarks the observation bridge on a local API server and prints each
// figure against its baseline or target from design §5:
//
//   - latency from a ConfigMap state change to NodewrightCluster.status.phase (p50, p99),
//     against a bare client-go loop doing the same job, measured in the same run;
//   - API writes per minute at steady state with 3 and with 50 nodes heartbeating;
//   - how long after the threshold a stale heartbeat shows;
//   - the operator's peak RSS and CPU while 50 nodes heartbeat every 10 s;
//   - the operator's CPU per heartbeat while 50 nodes heartbeat every second, against a bare
//     client-go observer of the same ConfigMap measured in the same window, then a CPU
//     profile of the operator on the same scenario (.bench/bridge-operator.cpu.pprof).
//
// The operator and the bare observer run as their own processes (the operator built here,
// the observer this program run again), so their RSS and CPU are their own. BENCH_WINDOW
// (default 60s) sets the steady-state and CPU windows; BENCH_SAMPLES (default 200) the
// latency samples; BENCH_OPERATOR, a path, measures that operator binary instead of
// building one as the image does (to compare builds).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

func main() {
	if kubeconfig := os.Getenv(bareObserverEnv); kubeconfig != "" {
		if err := runBareObserver(kubeconfig); err != nil {
			fmt.Fprintf(os.Stderr, "bare observer: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-bridge: %v\n", err)
		os.Exit(1)
	}
	if benchproc.Missed {
		os.Exit(1)
	}
}

func run() error {
	// client-go logs a cancelled watch of the baseline loop as an error; it is expected here.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	window := envDuration("BENCH_WINDOW", time.Minute)
	samples := envInt("BENCH_SAMPLES", 200)
	env := testenv.New()
	if err := env.Start(); err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()

	dir, err := os.MkdirTemp("", "bench-bridge-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	binary := os.Getenv("BENCH_OPERATOR")
	if binary == "" {
		binary = filepath.Join(dir, "operator")
		if err := benchproc.Build(env.RepoRoot, "./cmd/operator", binary); err != nil {
			return err
		}
	}

	ctx := context.Background()
	b := &bench{env: env, ctx: ctx}
	if err := b.setUp(); err != nil {
		return err
	}
	// The operator runs as deployed, its admission webhook server included: it keeps its
	// webhook certificate in a Secret of its namespace.
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nodewright-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	pprofPort, err := benchproc.FreePort()
	if err != nil {
		return err
	}
	pprofAddr := "127.0.0.1:" + pprofPort
	op, err := startOperator(binary, kubeconfig, filepath.Join(dir, "operator.log"), pprofAddr)
	if err != nil {
		return err
	}
	defer op.Stop()
	if err := b.createBareSummary(); err != nil {
		return err
	}
	bare, err := startBareObserver(kubeconfig, filepath.Join(dir, "bare-observer.log"))
	if err != nil {
		return err
	}
	defer bare.Stop()

	fmt.Printf("observation bridge on a local API server (%s)\n\n", time.Now().UTC().Format(time.RFC3339))
	baseline, err := b.latency(samples, b.baselinePhase, b.runBaseline)
	if err != nil {
		return fmt.Errorf("baseline latency: %w", err)
	}
	bridge, err := b.latency(samples, b.clusterPhase, nil)
	if err != nil {
		return fmt.Errorf("bridge latency: %w", err)
	}
	fmt.Printf("state change → status.phase (%d changes)\n", samples)
	fmt.Printf("  bare client-go loop   p50 %7.2f ms   p99 %7.2f ms\n", ms(baseline.p50), ms(baseline.p99))
	fmt.Printf("  nodewright operator   p50 %7.2f ms   p99 %7.2f ms   (p99 %.2f× the bare loop)\n",
		ms(bridge.p50), ms(bridge.p99), float64(bridge.p99)/float64(baseline.p99))
	benchproc.Verdict("p99 ≤ 50 ms", bridge.p99 <= 50*time.Millisecond)

	stale, err := b.staleDetection(5)
	if err != nil {
		return fmt.Errorf("stale detection: %w", err)
	}
	fmt.Printf("\nstale heartbeat detected after threshold + %.0f ms (worst of 5; threshold 3s, 1.0× = threshold)\n", ms(stale))
	benchproc.Verdict("within threshold + 250 ms", stale <= 250*time.Millisecond)

	for _, nodes := range []int{3, 50} {
		s, err := b.steadyState(nodes, window, op)
		if err != nil {
			return fmt.Errorf("steady state with %d nodes: %w", nodes, err)
		}
		fmt.Printf("\nsteady state, %d nodes heartbeating every 10s for %s (%d heartbeat writes to the ConfigMap)\n",
			nodes, window, s.heartbeats)
		fmt.Printf("  Nodewright API writes: %d (%.1f per minute; a DRBD change made afterwards was counted, as a control)\n",
			s.writes, float64(s.writes)/window.Minutes())
		benchproc.Verdict("0 writes per minute", s.writes == 0)
		if nodes == 50 {
			fmt.Printf("  operator peak RSS %.1f MiB, CPU %.2f %% of one core\n", benchproc.MiB(s.peakRSS), s.cpuPercent)
			benchproc.Verdict("RSS ≤ 64 MiB", s.peakRSS <= 64<<20)
			benchproc.Verdict("CPU ≤ 2 % of one core", s.cpuPercent <= 2)
		}
	}

	return b.reportHeartbeatCPU(op, bare, window, pprofAddr)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
