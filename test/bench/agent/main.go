// Command agent measures the node agent at rest (make bench): three agents, real processes of
// the built binary, one per node, against a local API server, beside a bare Lease renewer
// (the kubelet's lease controller alone, the least a heartbeat can cost) as the baseline of
// the same run. It prints each agent's peak RSS and CPU, and the API writes per agent per
// minute: Lease renewals and status writes.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

// bareRenewerEnv, set to "kubeconfig,node,namespace", makes this program the bare renewer.
const bareRenewerEnv = "BENCH_BARE_LEASE_RENEWER"

// The targets (docs: design §5).
const (
	rssLimit      = 24 << 20
	cpuLimit      = 0.5 // % of one core
	renewalsWant  = 6   // per minute
	nodes         = 3
	renewInterval = 10 * time.Second
)

func main() {
	if spec := os.Getenv(bareRenewerEnv); spec != "" {
		if err := runBareRenewer(spec); err != nil {
			fmt.Fprintf(os.Stderr, "bare renewer: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-agent: %v\n", err)
		os.Exit(1)
	}
	if benchproc.Missed {
		os.Exit(1)
	}
}

// runBareRenewer renews one Lease with the kubelet's lease controller until it is killed.
func runBareRenewer(spec string) error {
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		return fmt.Errorf("%s: want kubeconfig,node,namespace", bareRenewerEnv)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", parts[0])
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lease.NewController(clock.RealClock{}, cs, parts[1], 40, nil, renewInterval, parts[1], parts[2], nil).Run(context.Background())
	return nil
}

func run() error {
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	window := time.Minute
	if v := os.Getenv("BENCH_AGENT_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("BENCH_AGENT_WINDOW: %w", err)
		}
		window = d
	}
	env := testenv.New()
	if err := env.Start(); err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	dir, err := os.MkdirTemp("", "bench-agent-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	binary := filepath.Join(dir, "agent")
	if err := benchproc.Build(env.RepoRoot, "./cmd/agent", binary); err != nil {
		return err
	}
	ctx := context.Background()
	const ns = "nodewright-system"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var agents []*benchproc.Process
	for i := 1; i <= nodes; i++ {
		node := fmt.Sprintf("edge-%d", i)
		if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		p, err := benchproc.Start(exec.Command(binary, "--kubeconfig", kubeconfig, "--node-name", node, "--namespace", ns, "--state-dir", filepath.Join(dir, node)),
			filepath.Join(dir, node+".log"))
		if err != nil {
			return err
		}
		defer p.Stop()
		agents = append(agents, p)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bareCmd := exec.Command(self)
	bareCmd.Env = append(os.Environ(), bareRenewerEnv+"="+strings.Join([]string{kubeconfig, "bare", ns}, ","))
	bare, err := benchproc.Start(bareCmd, filepath.Join(dir, "bare.log"))
	if err != nil {
		return err
	}
	defer bare.Stop()

	// Settled: every Lease exists and has been renewed once, and every agent has reported its
	// node (its first report, written at start, is not one of the window's).
	if err := waitForLeases(ctx, env, ns, append(nodeNames(), "bare")); err != nil {
		return err
	}
	if err := waitForReports(ctx, env, nodeNames()); err != nil {
		return err
	}
	time.Sleep(renewInterval)

	fmt.Printf("node agent at rest on a local API server (%s, %d agents, window %s)\n", time.Now().UTC().Format(time.RFC3339), nodes, window)
	stopCounting, err := countWrites(ctx, env, ns)
	if err != nil {
		return err
	}
	cpuBefore := make([]time.Duration, nodes)
	for i, p := range agents {
		if cpuBefore[i], err = p.CPUTime(); err != nil {
			return err
		}
	}
	bareBefore, err := bare.CPUTime()
	if err != nil {
		return err
	}
	time.Sleep(window)
	bareAfter, err := bare.CPUTime()
	if err != nil {
		return err
	}
	counted := stopCounting()
	barePct := benchproc.Percent(bareAfter-bareBefore, window)
	fmt.Printf("  bare Lease renewer (the kubelet's lease controller alone)   CPU %.3f %% of one core\n", barePct)
	worstRSS, worstCPU := int64(0), 0.0
	for i, p := range agents {
		after, err := p.CPUTime()
		if err != nil {
			return err
		}
		rss, err := p.PeakRSS()
		if err != nil {
			return err
		}
		anon, file, err := p.RSSParts()
		if err != nil {
			return err
		}
		pct := benchproc.Percent(after-cpuBefore[i], window)
		node := fmt.Sprintf("edge-%d", i+1)
		fmt.Printf("  agent %s   peak RSS %.1f MiB (now %.1f anonymous, %.1f file-backed)   CPU %.3f %% of one core (%s)   per minute: %s Lease renewals, %s status writes\n",
			node, benchproc.MiB(rss), benchproc.MiB(anon), benchproc.MiB(file), pct, ratio(pct, barePct), perMinute(counted.leases[node], window), perMinute(counted.status[node], window))
		worstRSS, worstCPU = max(worstRSS, rss), max(worstCPU, pct)
	}
	benchproc.Verdict(fmt.Sprintf("RSS ≤ 24 MiB (worst %.1f MiB, %.2f× the limit)", benchproc.MiB(worstRSS), float64(worstRSS)/rssLimit), worstRSS <= rssLimit)
	benchproc.Verdict(fmt.Sprintf("CPU ≤ 0.5 %% of a core (worst %.3f %%, %.2f× the limit)", worstCPU, worstCPU/cpuLimit), worstCPU <= cpuLimit)
	ok := true
	for _, node := range nodeNames() {
		renewals := float64(counted.leases[node]) * float64(time.Minute) / float64(window)
		// A renewal falls on either side of the window's edges: ±1 in the window.
		slack := float64(time.Minute) / float64(window)
		ok = ok && renewals >= renewalsWant-slack && renewals <= renewalsWant+slack && counted.status[node] == 0
	}
	benchproc.Verdict("6 Lease renewals and 0 status writes per agent per minute", ok)
	return nil
}

func nodeNames() []string {
	out := make([]string, nodes)
	for i := range out {
		out[i] = fmt.Sprintf("edge-%d", i+1)
	}
	return out
}

func waitForLeases(ctx context.Context, env *testenv.Env, ns string, names []string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, name := range names {
		for {
			var l coordinationv1.Lease
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l)
			if err == nil && l.Spec.RenewTime != nil {
				break
			}
			if time.Now().After(deadline) {
				if err == nil {
					return fmt.Errorf("the Lease of %s was not renewed within 2m", name)
				}
				return fmt.Errorf("the Lease of %s was not there within 2m: %w", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// waitForReports waits until each node's agent has reported it in its NodewrightAgentStatus.
func waitForReports(ctx context.Context, env *testenv.Env, names []string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, name := range names {
		for {
			var as nwv1.NodewrightAgentStatus
			err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &as)
			if err == nil && as.Status.Reporter == nwv1.ReporterAgent {
				break
			}
			if time.Now().After(deadline) {
				if err != nil {
					return fmt.Errorf("the agent of %s had not reported its node within 2m: %w", name, err)
				}
				return fmt.Errorf("the agent of %s had not reported its node within 2m", name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// counts are the writes seen, per node: Lease renewals, and writes to the node's
// NodewrightAgentStatus and to its NodeOperations.
type counts struct {
	leases, status map[string]int
}

// countWrites watches the Leases, the agent statuses and the operations until stop is called.
func countWrites(ctx context.Context, env *testenv.Env, ns string) (func() counts, error) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	c := &counts{leases: map[string]int{}, status: map[string]int{}}
	var mu sync.Mutex
	leases, err := cs.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, err
	}
	statuses, err := wc.Watch(ctx, &nwv1.NodewrightAgentStatusList{})
	if err != nil {
		return nil, err
	}
	ops, err := wc.Watch(ctx, &nwv1.NodeOperationList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	drain := func(w watch.Interface, into map[string]int, key func(any) string) {
		wg.Go(func() {
			for e := range w.ResultChan() {
				if e.Type == watch.Modified || e.Type == watch.Added {
					mu.Lock()
					into[key(e.Object)]++
					mu.Unlock()
				}
			}
		})
	}
	drain(leases, c.leases, func(o any) string { return o.(*coordinationv1.Lease).Name })
	drain(statuses, c.status, func(o any) string { return o.(*nwv1.NodewrightAgentStatus).Name })
	drain(ops, c.status, func(o any) string { return o.(*nwv1.NodeOperation).Spec.NodeName })
	// A watch starts with the objects there as Added: those are not writes of the window, and
	// they arrive at once.
	started := map[string]int{}
	time.Sleep(time.Second)
	mu.Lock()
	for k, v := range c.leases {
		started["lease/"+k] = v
	}
	for k, v := range c.status {
		started["status/"+k] = v
	}
	mu.Unlock()
	stop := func() counts {
		leases.Stop()
		statuses.Stop()
		ops.Stop()
		wg.Wait()
		out := counts{leases: map[string]int{}, status: map[string]int{}}
		for k, v := range c.leases {
			out.leases[k] = v - started["lease/"+k]
		}
		for k, v := range c.status {
			out.status[k] = v - started["status/"+k]
		}
		return out
	}
	return stop, nil
}

func ratio(x, base float64) string {
	if base <= 0 {
		return "the bare renewer used no measurable CPU"
	}
	return strconv.FormatFloat(x/base, 'f', 2, 64) + "× the bare renewer"
}

func perMinute(n int, window time.Duration) string {
	return strconv.FormatFloat(float64(n)*float64(time.Minute)/float64(window), 'f', 1, 64)
}
