// Command agent measures the node agent at rest (make bench): three agents, real processes of
// the built binary, one per node, against a local API server, each following its played DRBD's
// events stream (drbdsetup events2), beside one agent that does not follow it
// (--drbd-events=false) and a bare Lease renewer (the kubelet's lease controller alone, the
// least a heartbeat can cost), the baselines of the same run. It prints each agent's peak RSS
// and CPU, and the API writes per agent per minute: Lease renewals and status writes. Then it
// changes the played DRBD (a connection lost, then found) and prints how long the change took
// to reach the API server in the node's report, at the default report interval, with the
// stream and without.
//
// Each agent's drbdsetup is this program under the name drbdsetup (--drbdsetup), which plays
// a node's DRBD (test/site/drbdplay) in a process of its own, as drbd-utils' drbdsetup is one:
// `status --json` and `events2 --statistics`. The bench changes it through the played
// kernel's fault hook (a file listing the StandAlone peers), which the played stream looks at
// every drbdplay.StreamPoll.
package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
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
	// latencyLimit is the most a played DRBD change may take to be in the node's report.
	latencyLimit = 200 * time.Millisecond
	// changes is how many changes are timed with the stream, baseChanges without.
	changes, baseChanges = 20, 4
	// baseline is the agent that does not follow the events stream.
	baseline = "edge-0"
	// played is the resource each node's played DRBD holds, towards two peers.
	played = "pvc-bench"
)

// playDrbdsetup answers as drbdsetup for the node its folder names (the file "node"), from a
// played kernel whose fault hook is in that folder.
func playDrbdsetup(args []string) error {
	dir := filepath.Dir(os.Args[0])
	node, err := os.ReadFile(filepath.Join(dir, "node"))
	if err != nil {
		return err
	}
	k := &drbdplay.Kernel{Self: strings.TrimSpace(string(node)), FaultDir: dir}
	k.AddResource(played, "peer-1", "peer-2")
	argv := append([]string{"drbdsetup"}, args...)
	ctx := context.Background()
	if len(args) > 0 && args[0] == "events2" {
		s, err := k.Stream(ctx, argv)
		if err != nil {
			return err
		}
		// Until the agent stops it (or its standard output closes).
		_, err = io.Copy(os.Stdout, s)
		return err
	}
	res, err := k.Run(ctx, argv)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(res.Stdout)
	return err
}

func main() {
	if filepath.Base(os.Args[0]) == "drbdsetup" {
		if err := playDrbdsetup(os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "played drbdsetup: %v\n", err)
			os.Exit(20)
		}
		return
	}
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
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var agents []*benchproc.Process
	for _, node := range nodeNames() {
		if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		drbdDir := filepath.Join(dir, node, "drbd")
		if err := os.MkdirAll(drbdDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(drbdDir, "node"), []byte(node), 0o644); err != nil {
			return err
		}
		// /proc/drbd, as the loaded module shows it.
		if err := os.WriteFile(filepath.Join(drbdDir, "proc"), []byte("version: 9.2.12 (api:2/proto:86-122)\n"), 0o644); err != nil {
			return err
		}
		if err := os.Symlink(self, filepath.Join(drbdDir, "drbdsetup")); err != nil {
			return err
		}
		args := []string{"--kubeconfig", kubeconfig, "--node-name", node, "--namespace", ns, "--state-dir", filepath.Join(dir, node),
			"--drbdsetup", filepath.Join(drbdDir, "drbdsetup"), "--proc-drbd", filepath.Join(drbdDir, "proc")}
		if node == baseline {
			args = append(args, "--drbd-events=false")
		}
		p, err := benchproc.Start(exec.Command(binary, args...), filepath.Join(dir, node+".log"))
		if err != nil {
			return err
		}
		defer p.Stop()
		agents = append(agents, p)
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

	fmt.Printf("node agent at rest on a local API server (%s, %d agents following DRBD's events and %s not, window %s)\n", time.Now().UTC().Format(time.RFC3339), nodes, baseline, window)
	stopCounting, err := countWrites(ctx, env, ns)
	if err != nil {
		return err
	}
	cpuBefore := make([]time.Duration, len(agents))
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
		node := nodeNames()[i]
		what := "events followed"
		if node == baseline {
			what = "events not followed (the baseline)"
		}
		fmt.Printf("  agent %s, %s   peak RSS %.1f MiB (now %.1f anonymous, %.1f file-backed)   CPU %.3f %% of one core (%s)   per minute: %s Lease renewals, %s status writes\n",
			node, what, benchproc.MiB(rss), benchproc.MiB(anon), benchproc.MiB(file), pct, ratio(pct, barePct), perMinute(counted.leases[node], window), perMinute(counted.status[node], window))
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
	benchproc.Verdict("6 Lease renewals and 0 status writes per agent per minute, with the events stream as without it", ok)
	return measureLatency(ctx, env, dir)
}

// measureLatency changes a node's played DRBD (its connection to peer-1 lost, then found) and
// times each change from the fault hook's write to the watch event of the report that shows it.
func measureLatency(ctx context.Context, env *testenv.Env, dir string) error {
	fmt.Printf("a played DRBD change (the connection to a peer lost, then found, %s apart) until the node's report in the API server shows it, report interval %s (the default)\n", changeSpacing, agentReportInterval)
	stream, err := timeChanges(ctx, env, dir, "edge-1", changes)
	if err != nil {
		return err
	}
	base, err := timeChanges(ctx, env, dir, baseline, baseChanges)
	if err != nil {
		return err
	}
	fmt.Printf("  without the events stream (%s, %d changes)   median %s   worst %s\n", baseline, len(base), quantile(base, 0.5), quantile(base, 1))
	fmt.Printf("  with the events stream (edge-1, %d changes)   median %s   90th percentile %s   worst %s   (%.0f× faster at the median; the played stream looks at the fault hook every %s)\n",
		len(stream), quantile(stream, 0.5), quantile(stream, 0.9), quantile(stream, 1), float64(quantile(base, 0.5))/float64(max(quantile(stream, 0.5), 1)), drbdplay.StreamPoll)
	worst := quantile(stream, 1)
	benchproc.Verdict(fmt.Sprintf("a change reported within 200 ms (worst %s, %.2f× the limit)", worst.Round(time.Millisecond), float64(worst)/float64(latencyLimit)), worst <= latencyLimit)
	return nil
}

// changeSpacing is the time between two changes timed.
const changeSpacing = 500 * time.Millisecond

// agentReportInterval is the agent's default --report-interval, which the agents run with.
const agentReportInterval = 10 * time.Second

// timeChanges makes n changes of node's played DRBD, alternately StandAlone and Connected
// towards peer-1, and times each until the report shows it.
func timeChanges(ctx context.Context, env *testenv.Env, dir, node string, n int) ([]time.Duration, error) {
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, err
	}
	fault := filepath.Join(dir, node, "drbd", "standalone")
	var out []time.Duration
	for i := range n {
		// Each change alone, as a flip's is: not within the agent's 100 ms between two reports
		// of the last one.
		time.Sleep(changeSpacing)
		want, content := "StandAlone", "peer-1\n"
		if i%2 == 1 {
			want, content = "Connected", ""
		}
		w, err := wc.Watch(ctx, &nwv1.NodewrightAgentStatusList{}, client.MatchingFields{"metadata.name": node})
		if err != nil {
			return nil, err
		}
		// The watch starts with the object as it is.
		first := <-w.ResultChan()
		if as, ok := first.Object.(*nwv1.NodewrightAgentStatus); !ok || peerState(as, "peer-1") == want {
			w.Stop()
			return nil, fmt.Errorf("%s: the report already says %s before the change, or the watch failed: %v", node, want, first.Object)
		}
		start := time.Now()
		if err := os.WriteFile(fault, []byte(content), 0o644); err != nil {
			w.Stop()
			return nil, err
		}
		deadline := time.After(2 * time.Minute)
		seen := false
		for !seen {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					return nil, fmt.Errorf("%s: the watch ended", node)
				}
				if as, isStatus := e.Object.(*nwv1.NodewrightAgentStatus); isStatus && peerState(as, "peer-1") == want {
					out = append(out, time.Since(start))
					seen = true
				}
			case <-deadline:
				w.Stop()
				return nil, fmt.Errorf("%s: the report did not say %s within 2m of the change", node, want)
			}
		}
		w.Stop()
	}
	return out, nil
}

func peerState(as *nwv1.NodewrightAgentStatus, peer string) string {
	if as.Status.Storage == nil {
		return ""
	}
	for _, r := range as.Status.Storage.ResourceStatuses {
		for _, p := range r.Peers {
			if r.Name == played && p.Name == peer {
				return p.ConnectionState
			}
		}
	}
	return ""
}

// quantile is the q-quantile of ds (the nearest rank), rounded to the tenth of a millisecond.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))].Round(100 * time.Microsecond)
}

func nodeNames() []string {
	out := []string{baseline}
	for i := 1; i <= nodes; i++ {
		out = append(out, fmt.Sprintf("edge-%d", i))
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
