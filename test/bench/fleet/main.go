// Command fleet measures the fleet hub at 3,500 members (issue 36; make bench):
// cmd/nodewright-fleet, built from the tree and run as its own process on a real
// kube-apiserver and etcd (the hub cluster), against members played by the member simulator
// (test/site/fleetsim: one process, here this one, serving each member on its own port with
// its own token, what a member's API server serves the hub; faithful to a real one as its
// test shows). Each member holds its NodewrightCluster, the checkpoint ConfigMap, the
// operator Deployment, BENCH_FLEET_WORKFLOWS workflows of each kind and BENCH_FLEET_NODES
// NodewrightAgentStatuses with a Kairos boot. It prints, each against its target:
//
//   - the hub at rest without members (the baseline, measured in this run) and with all:
//     RSS, Go heap, goroutines, sockets, CPU; what one member costs (the difference over the
//     number of members);
//   - the start-up: from the hub's start, with every member registered, until every summary
//     is written;
//   - where the time and the memory go at rest (pprof: CPU over 20 s, the heap in use);
//   - p99 from a member's change to its summary: at rest (BENCH_FLEET_CHANGES changes at
//     10 a second) and under a burst (BENCH_FLEET_BURST members changing within one second);
//   - the time to mark BENCH_FLEET_UNREACHABLE members unreachable at once (half stopped:
//     connections refused; half cut off: their links drop every packet), against the bound
//     docs/fleet.md states: threshold × (interval + timeout); and at the same time
//     BENCH_FLEET_FROZEN members whose API server hangs behind a working link, against
//     theirs: the ready interval more.
//
// BENCH_FLEET_MEMBERS (3500), BENCH_FLEET_WINDOW (3m: three periods of the reads), BENCH_FLEET_CHANGES (400),
// BENCH_FLEET_BURST (1000), BENCH_FLEET_UNREACHABLE (500), BENCH_FLEET_FROZEN (50), BENCH_FLEET_WORKFLOWS (2),
// BENCH_FLEET_NODES (3), BENCH_FLEET_HUB_GOMAXPROCS (1, the chart's goMaxProcs; 0: the Go runtime's default) change a run; BENCH_FLEET_KEEP=1 keeps its folder
// (profiles, logs).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/fleet"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
	"github.com/spectrocloud/nodewright/test/site/fleetsim"
)

// The targets (issue 36), and the hub's health options (its defaults, which docs/fleet.md
// states).
const (
	goroutinesPerMemberTarget = 10
	memoryPerMemberTarget     = 300 << 10
	rssTarget                 = 1 << 30
	cpuTarget                 = 5.0 // % of one core
	startupTarget             = 60 * time.Second
	restLatencyTarget         = time.Second
	burstLatencyTarget        = 5 * time.Second
)

var health = fleet.DefaultHealthOptions

func main() {
	code := 0
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-fleet: %v\n", err)
		code = 1
	} else if benchproc.Missed {
		code = 1
	}
	os.Exit(code)
}

type settings struct {
	members, changes, burst, unreachable, frozen, workflows, nodes int
	window                                                         time.Duration
}

func readSettings() (settings, error) {
	s := settings{members: 3500, changes: 400, burst: 1000, unreachable: 500, frozen: 50, workflows: 2, nodes: 3, window: 3 * time.Minute}
	for _, v := range []struct {
		env string
		n   *int
	}{{"BENCH_FLEET_MEMBERS", &s.members}, {"BENCH_FLEET_CHANGES", &s.changes}, {"BENCH_FLEET_BURST", &s.burst},
		{"BENCH_FLEET_UNREACHABLE", &s.unreachable}, {"BENCH_FLEET_FROZEN", &s.frozen}, {"BENCH_FLEET_WORKFLOWS", &s.workflows}, {"BENCH_FLEET_NODES", &s.nodes}} {
		if x := os.Getenv(v.env); x != "" {
			n, err := strconv.Atoi(x)
			if err != nil || n < 0 {
				return s, fmt.Errorf("%s: want a number, 0 or more, got %q", v.env, x)
			}
			*v.n = n
		}
	}
	if x := os.Getenv("BENCH_FLEET_WINDOW"); x != "" {
		d, err := time.ParseDuration(x)
		if err != nil {
			return s, fmt.Errorf("BENCH_FLEET_WINDOW: %w", err)
		}
		s.window = d
	}
	if s.members < 2 || s.burst > s.members || s.unreachable+s.frozen > s.members || s.unreachable < 2 {
		return s, fmt.Errorf("want at least 2 members, BENCH_FLEET_BURST and BENCH_FLEET_UNREACHABLE (at least 2) plus BENCH_FLEET_FROZEN no more than BENCH_FLEET_MEMBERS")
	}
	return s, nil
}

// lab is what runs: etcd, the hub's API server, the simulated members and the hub.
type lab struct {
	dir, bin, root string
	etcd           string
	etcdProc       *benchproc.Process
	pki            *pki
	ps             *procs
	hubServer      *apiServer
	hubClient      client.WithWatch
	sim            *fleetsim.Sim
	hubBinary      string
}

func run() error {
	// The readiness polls of starting API servers fail by design; errors are returned.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	ctrllog.SetLogger(klog.NewKlogr().V(10))
	cfg, err := readSettings()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	version, err := testenv.PinnedVersion(root, "KUBE_VERSION")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-fleet-")
	if err != nil {
		return err
	}
	// BENCH_FLEET_KEEP=1 keeps the folder: the profiles, the hub's binary and the logs.
	if os.Getenv("BENCH_FLEET_KEEP") == "" {
		defer func() { _ = os.RemoveAll(dir) }()
	} else {
		defer fmt.Printf("kept %s (BENCH_FLEET_KEEP)\n", dir)
	}
	l := &lab{dir: dir, bin: filepath.Join(root, "bin", "k8s", version), root: root, ps: &procs{}, hubBinary: filepath.Join(dir, "nodewright-fleet")}
	// Every process ends on every way out; the temporary folder goes after them.
	defer l.ps.killAll()
	began := time.Now()
	// This machine's speed, idle: before anything of the benchmark runs.
	idle := benchproc.Speed()

	built := make(chan error, 1)
	go func() { built <- benchproc.Build(root, "./cmd/nodewright-fleet", l.hubBinary) }()
	if l.pki, err = newPKI(dir); err != nil {
		return err
	}
	if l.etcd, l.etcdProc, err = startEtcd(l.ps, filepath.Join(l.bin, "etcd"), dir); err != nil {
		return err
	}
	if err := l.startHubServer(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	// Bookmarks every minute, as a kube-apiserver's watch cache sends them.
	if l.sim, err = fleetsim.Start(ctx, fleetsim.Options{Members: cfg.members, Workflows: cfg.workflows, AgentStatuses: cfg.nodes,
		BookmarkInterval: time.Minute}); err != nil {
		return err
	}
	defer l.sim.Close()
	members := l.sim.Members()
	fmt.Printf("fleet hub on one machine (%s): %d members played by test/site/fleetsim in the benchmark's process (started in %s),\n",
		time.Now().UTC().Format(time.RFC3339), cfg.members, time.Since(t0).Round(10*time.Millisecond))
	fmt.Printf("  each with its NodewrightCluster (its operator's version in its status), checkpoint, operator Deployment, %d workflows of each kind and %d Kairos nodes;\n", cfg.workflows, cfg.nodes)
	fmt.Printf("  health checks every %s (TCP keepalives: a connection closed once its member sent nothing for an interval; /readyz every %s), timeout %s, threshold %d; the nodes read every %s (the Deployment not: the version is in the NodewrightCluster); bookmarks every minute; the hub's GOMAXPROCS %s (0: the default, %d here); CPU %% of one core and RSS the mean over a %s window at rest\n",
		health.Interval, health.ReadyInterval, health.Timeout, health.FailureThreshold, health.PollInterval, hubProcs(), runtime.NumCPU(), cfg.window)
	if err := <-built; err != nil {
		return err
	}
	benchproc.PrintSpeed("on this machine idle, before the benchmark started anything", idle)

	// The baseline: the hub without members.
	hub, err := l.startHub("hub-0")
	if err != nil {
		return err
	}
	if err := sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	zero, err := atRest(ctx, hub.proc, hub.metrics, 0, l.sim.Requests, min(cfg.window, time.Minute)) // a hub idle: a minute tells
	if err != nil {
		return err
	}
	printPoint(zero)
	hub.proc.Stop()

	// Start-up: every member registered, then the hub started.
	t0 = time.Now()
	if err := register(ctx, l.hubClient, members); err != nil {
		return err
	}
	fmt.Printf("  %d kubeconfig Secrets written on the hub cluster in %s\n", len(members), time.Since(t0).Round(100*time.Millisecond))
	sums := watchSummaries(ctx, l.hubClient)
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name()
	}
	startRequests, err := l.hubServer.summaryRequests(ctx)
	if err != nil {
		return err
	}
	if hub, err = l.startHub("hub"); err != nil {
		return err
	}
	// The start-up's progress, every 10 s: the summaries settled and the hub's CPU; and a CPU
	// profile of its first 20 s.
	progress, stopProgress := context.WithCancel(ctx)
	go sums.progress(progress, names, func() (cpuShares, error) { return l.cpuNow(hub.proc) }, 10*time.Second)
	startProfile := make(chan error, 1)
	go func() {
		if err := waitServing(ctx, hub.pprof); err != nil {
			startProfile <- err
			return
		}
		startProfile <- download(ctx, hub.pprof+"profile?seconds=20", filepath.Join(l.dir, "startup.pprof"))
	}()
	err = sums.waitUntil(ctx, names, 15*time.Minute, settled)
	stopProgress()
	if err != nil {
		return fmt.Errorf("the summaries of %d members: %w", len(members), err)
	}
	startup := time.Since(hub.started)
	if err := <-startProfile; err != nil {
		return fmt.Errorf("the hub's CPU profile at start-up: %w", err)
	}
	peakAtStart, err := hub.proc.PeakRSS()
	if err != nil {
		return err
	}
	fmt.Printf("  start-up: the hub started to every one of the %d summaries written (Reachable, phase, versions, checkpoint): %s, peak RSS %.0f MiB\n",
		len(members), startup.Round(100*time.Millisecond), benchproc.MiB(peakAtStart))
	startedRequests, err := l.hubServer.summaryRequests(ctx)
	if err != nil {
		return err
	}
	printRequests("during the start-up", startRequests, startedRequests, len(members))
	benchproc.Verdict(fmt.Sprintf("start-up ≤ %s (%s, %.2f× the target)", startupTarget, startup.Round(100*time.Millisecond), ratio(startup, startupTarget)), startup <= startupTarget)
	if err := l.top(ctx, l.hubBinary, filepath.Join(l.dir, "startup.pprof"), "the hub's cpu in its first 20 s", "-cum", "-nodecount=30"); err != nil {
		return err
	}

	// At rest with every member.
	if err := sleep(ctx, 2*health.Interval); err != nil {
		return err
	}
	all, err := atRest(ctx, hub.proc, hub.metrics, len(members), l.sim.Requests, cfg.window)
	if err != nil {
		return err
	}
	printPoint(all)
	benchproc.PrintSpeed("beside the hub at rest and the members (what is left of a core)", benchproc.Speed())
	perMember(zero, all)
	if err := l.profiles(ctx, hub); err != nil {
		return err
	}
	// One changer for both: each change of a member writes a marker it never wrote before.
	c := &changer{sums: sums}
	if err := latency(ctx, c, members, cfg.changes); err != nil {
		return err
	}
	if err := l.burst(ctx, c, hub, members, cfg.burst); err != nil {
		return err
	}
	cut := members[len(members)-cfg.unreachable:]
	frozen := members[len(members)-cfg.unreachable-cfg.frozen : len(members)-cfg.unreachable]
	if err := markUnreachable(ctx, sums, cut, frozen); err != nil {
		return err
	}
	fmt.Printf("  (run took %s)\n", time.Since(began).Round(time.Second))
	return nil
}

func ratio[T ~int64 | ~float64](x, target T) float64 { return float64(x) / float64(target) }

func printPoint(p point) {
	fmt.Printf("  hub with %4d members   CPU %6.3f %%   RSS %7.1f MiB (peak %.1f)   Go heap in use %7.1f MiB   %6d goroutines   %5d sockets   members answered %.0f requests/s\n",
		p.members, p.cpu, benchproc.MiB(p.rss), benchproc.MiB(p.peak), benchproc.MiB(p.heap), p.goroutines, p.sockets, p.requests)
	if len(p.slices) > 1 {
		fmt.Printf("    CPU over each %s of the window:", sliceLength)
		for _, c := range p.slices {
			fmt.Printf(" %.2f", c)
		}
		fmt.Printf(" %%; %.0f garbage collections in the window, %.1f MiB allocated a second\n", p.gcs, p.allocated/(1<<20))
	}
}

// perMember prints what one member costs, from the baseline without members to all, and
// each figure against its target.
func perMember(zero, all point) {
	n := float64(all.members)
	rss := float64(all.rss-zero.rss) / n
	heap := float64(all.heap-zero.heap) / n
	gor := float64(all.goroutines-zero.goroutines) / n
	socks := float64(all.sockets-zero.sockets) / n
	fmt.Printf("  one member costs the hub (from 0 to %d members): RSS %.0f KiB, Go heap %.0f KiB, %.2f goroutines, %.2f sockets, CPU %.5f %% of a core\n",
		all.members, rss/1024, heap/1024, gor, socks, (all.cpu-zero.cpu)/n)
	benchproc.Verdict(fmt.Sprintf("≤ %d goroutines a member (%.2f, %.2f× the target)", goroutinesPerMemberTarget, gor, gor/goroutinesPerMemberTarget), gor <= goroutinesPerMemberTarget)
	benchproc.Verdict(fmt.Sprintf("≤ %d KiB a member (%.0f KiB of RSS, %.2f× the target)", memoryPerMemberTarget>>10, rss/1024, rss/memoryPerMemberTarget), rss <= memoryPerMemberTarget)
	benchproc.Verdict(fmt.Sprintf("RSS ≤ 1 GiB with %d members (%.0f MiB, %.2f× the target)", all.members, benchproc.MiB(all.rss), ratio(all.rss, rssTarget)), all.rss <= rssTarget)
	benchproc.Verdict(fmt.Sprintf("CPU ≤ %.0f %% of a core at rest with %d members (%.2f %%, %.2f× the target; %.2f %% without members)", cpuTarget, all.members, all.cpu, all.cpu/cpuTarget, zero.cpu), all.cpu <= cpuTarget)
}

// hubProcess is one run of the hub.
type hubProcess struct {
	proc           *benchproc.Process
	metrics, pprof string
	started        time.Time
}

// hubProcs is the hub's GOMAXPROCS: 1, as the chart's goMaxProcs sets it, or
// BENCH_FLEET_HUB_GOMAXPROCS; "0" leaves the Go runtime's default (the machine's cores).
func hubProcs() string {
	if n := os.Getenv("BENCH_FLEET_HUB_GOMAXPROCS"); n != "" {
		return n
	}
	return "1"
}

// startHub runs the hub as deployed, but for leader election; its metrics and its Go
// profiles on local ports.
func (l *lab) startHub(name string) (*hubProcess, error) {
	kc, err := l.hubServer.kubeconfig(l.pki, l.pki.adminCert, l.pki.adminKey)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(l.dir, "hub.kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return nil, err
	}
	ports, err := benchproc.FreePorts(2)
	if err != nil {
		return nil, err
	}
	metricsPort, pprofPort := ports[0], ports[1]
	cmd := exec.Command(l.hubBinary, "--kubeconfig", path, "--namespace", hubNamespace, "--clusterprofile-namespace", hubNamespace, "--leader-elect=false",
		"--metrics-bind-address", "127.0.0.1:"+metricsPort, "--pprof-bind-address", "127.0.0.1:"+pprofPort, "--health-probe-bind-address", "0")
	// The chart sets the hub's GOMAXPROCS (goMaxProcs, 1); so does the benchmark.
	// BENCH_FLEET_HUB_GOMAXPROCS sets another, 0 none.
	if procs := hubProcs(); procs != "0" {
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+procs)
	}
	h := &hubProcess{metrics: "http://127.0.0.1:" + metricsPort + "/metrics", pprof: "http://127.0.0.1:" + pprofPort + "/debug/pprof/", started: time.Now()}
	logPath := filepath.Join(l.dir, "fleet-"+name+".log") // hub.log is the hub cluster API server's
	if h.proc, err = benchproc.Start(cmd, logPath); err != nil {
		return nil, err
	}
	l.ps.add(h.proc)
	// Serving its metrics: it started. A hub that stopped instead says why in its log.
	serving, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := waitServing(serving, h.metrics); err != nil {
		log, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(log)), "\n")
		return nil, fmt.Errorf("the hub %s did not serve its metrics: %w; the end of its log:\n%s", name, err, strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	return h, nil
}

// startHubServer runs the hub cluster's API server with the summary and ClusterProfile CRDs.
func (l *lab) startHubServer(ctx context.Context) error {
	s, err := startAPIServer(ctx, l.ps, filepath.Join(l.bin, "kube-apiserver"), l.dir, "hub", l.etcd, l.pki)
	if err != nil {
		return err
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-inventory-api").Output()
	if err != nil {
		return fmt.Errorf("finding sigs.k8s.io/cluster-inventory-api: %w", err)
	}
	profiles := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml")
	if _, err := envtest.InstallCRDs(s.admin, envtest.CRDInstallOptions{ErrorIfPathMissing: true,
		Paths: []string{filepath.Join(l.root, "config", "crd", "fleet"), profiles}}); err != nil {
		return fmt.Errorf("installing the hub's CRDs: %w", err)
	}
	scheme, err := fleet.Scheme()
	if err != nil {
		return err
	}
	if l.hubClient, err = client.NewWithWatch(s.admin, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	l.hubServer = s
	return l.hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hubNamespace}})
}

// profiles prints where the hub's time and memory go at rest: the top of a 20-second CPU
// profile, of the heap in use and of the goroutines, read with go tool pprof.
func (l *lab) profiles(ctx context.Context, hub *hubProcess) error {
	for _, p := range []struct {
		name, url string
		args      []string
	}{
		// Cumulative: which of the hub's parts (the health checks, the watches, the reads,
		// the summaries, the garbage collector) the time goes to.
		{"cpu", hub.pprof + "profile?seconds=20", []string{"-cum", "-nodecount=30"}},
		{"heap", hub.pprof + "heap", []string{"-sample_index=inuse_space", "-nodecount=15"}},
		{"goroutines", hub.pprof + "goroutine", []string{"-cum", "-nodecount=15"}},
	} {
		path := filepath.Join(l.dir, p.name+".pprof")
		if err := download(ctx, p.url, path); err != nil {
			return fmt.Errorf("the hub's %s profile: %w", p.name, err)
		}
		if err := l.top(ctx, l.hubBinary, path, "the hub's "+p.name+" at rest", p.args...); err != nil {
			return err
		}
	}
	return nil
}

// top prints the top of a profile, read with go tool pprof.
func (l *lab) top(ctx context.Context, binary, path, what string, args ...string) error {
	out, err := exec.CommandContext(ctx, "go", append(append([]string{"tool", "pprof", "-top"}, args...), binary, path)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof: %w: %s", err, out)
	}
	fmt.Printf("  where %s goes (go tool pprof -top %s):\n", what, strings.Join(args, " "))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Type:") || strings.HasPrefix(line, "Time:") {
			continue
		}
		fmt.Println("    " + line)
	}
	return nil
}

// waitServing waits until url answers.
func waitServing(ctx context.Context, url string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func download(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// changer writes each member's next marker (its NodewrightCluster's ready nodes) and records
// when the write began.
type changer struct {
	sums *summaries
	mu   sync.Mutex
	seq  map[string]int32
	errs []error
}

// reset forgets the changes expected and seen so far, not the markers written.
func (c *changer) reset() {
	c.sums.reset()
	c.mu.Lock()
	c.errs = nil
	c.mu.Unlock()
}

func (c *changer) change(m *fleetsim.Member) {
	c.mu.Lock()
	if c.seq == nil {
		c.seq = map[string]int32{}
	}
	c.seq[m.Name()]++
	k := marker{m.Name(), 100 + c.seq[m.Name()]}
	c.mu.Unlock()
	c.sums.expect(k)
	if err := m.UpdateCluster(func(nwc *nwv1.NodewrightCluster) { nwc.Status.Nodes.Ready = k.ready }); err != nil {
		c.mu.Lock()
		c.errs = append(c.errs, fmt.Errorf("changing %s: %w", m.Name(), err))
		c.mu.Unlock()
	}
}

// latency writes changes across the members, 10 a second, and prints how long each took to
// show in its summary.
func latency(ctx context.Context, c *changer, members []*fleetsim.Member, changes int) error {
	const perSecond = 10
	c.reset()
	tick := time.NewTicker(time.Second / perSecond)
	defer tick.Stop()
	for i := range changes {
		c.change(members[(i*7919)%len(members)])
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	p99, err := report(ctx, c, fmt.Sprintf("at rest: %d changes across the members at %d/s", changes, perSecond))
	if err != nil {
		return err
	}
	benchproc.Verdict(fmt.Sprintf("p99 at rest ≤ %s (%s, %.2f× the target)", restLatencyTarget, show(p99), ratio(p99, restLatencyTarget)), p99 <= restLatencyTarget)
	return nil
}

// burst has n members change within one second, and prints how long each took to show,
// what the hub's API server answered on the summaries meanwhile, and where its CPU and the
// hub's went in the burst's first 10 s.
func (l *lab) burst(ctx context.Context, c *changer, hubProc *hubProcess, members []*fleetsim.Member, n int) error {
	hub := hubProc.proc
	c.reset()
	requests0, err := l.hubServer.summaryRequests(ctx)
	if err != nil {
		return err
	}
	profilePath := filepath.Join(l.dir, "hub-apiserver.pprof")
	profiled := make(chan error, 1)
	go func() { profiled <- l.hubServerProfile(ctx, 10, profilePath) }()
	hubProfilePath := filepath.Join(l.dir, "burst.pprof")
	hubProfiled := make(chan error, 1)
	go func() { hubProfiled <- download(ctx, hubProc.pprof+"profile?seconds=10", hubProfilePath) }()
	cpu0, err := l.cpuNow(hub)
	if err != nil {
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		at := start.Add(time.Duration(i) * time.Second / time.Duration(n))
		if err := sleep(ctx, time.Until(at)); err != nil {
			return err
		}
		m := members[(i*7919)%len(members)]
		wg.Go(func() { c.change(m) })
	}
	wg.Wait()
	spread := time.Since(start)
	p99, err := report(ctx, c, fmt.Sprintf("a burst: %d members changing within %s", n, spread.Round(10*time.Millisecond)))
	if err != nil {
		return err
	}
	cpu1, err := l.cpuNow(hub)
	if err != nil {
		return err
	}
	fmt.Printf("    from the burst's start until every change showed (%s): %s\n", cpu1.at.Sub(start).Round(100*time.Millisecond), cpu0.shares(cpu1))
	requests1, err := l.hubServer.summaryRequests(ctx)
	if err != nil {
		return err
	}
	printRequests("from the burst's start", requests0, requests1, n)
	if err := <-profiled; err != nil {
		return err
	}
	if err := l.top(ctx, filepath.Join(l.bin, "kube-apiserver"), profilePath, "the hub's API server's cpu in the burst's first 10 s", "-cum", "-nodecount=30"); err != nil {
		return err
	}
	if err := <-hubProfiled; err != nil {
		return fmt.Errorf("the hub's CPU profile in the burst: %w", err)
	}
	if err := l.top(ctx, l.hubBinary, hubProfilePath, "the hub's cpu in the burst's first 10 s", "-cum", "-nodecount=30"); err != nil {
		return err
	}
	benchproc.Verdict(fmt.Sprintf("burst p99 ≤ %s (%s, %.2f× the target)", burstLatencyTarget, show(p99), ratio(p99, burstLatencyTarget)), p99 <= burstLatencyTarget)
	return nil
}

// report waits up to a minute for the changes to show and prints their latencies; it
// returns the p99, a change that never showed counting as slower than any that did.
func report(ctx context.Context, c *changer, what string) (time.Duration, error) {
	if len(c.errs) > 0 {
		return 0, c.errs[0]
	}
	sums := c.sums
	deadline := time.Now().Add(time.Minute)
	for sums.outstanding() > 0 && time.Now().Before(deadline) {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return 0, err
		}
	}
	seen, missing := sums.results()
	slices.Sort(seen)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(seen)+missing)+0.999999) - 1
		if i >= len(seen) {
			return never
		}
		return seen[max(i, 0)]
	}
	fmt.Printf("  a member's change to its summary on the hub, %s (from the change's write):\n", what)
	fmt.Printf("    p50 %s   p90 %s   p99 %s   max %s   never shown %d\n", show(at(0.5)), show(at(0.9)), show(at(0.99)), show(at(1)), missing)
	return at(0.99), nil
}

// never is a latency that was not seen.
const never = time.Duration(1 << 62)

func show(d time.Duration) string {
	if d == never {
		return "never"
	}
	return d.Round(time.Millisecond).String()
}

// markUnreachable cuts off members all at once: half stopped (connections refused), half
// cut off (their links drop every packet, so connections hang), and a few frozen (their API
// server hangs behind a link that works, so that only /readyz tells), and prints how long
// until each summary said Reachable False.
func markUnreachable(ctx context.Context, sums *summaries, members, frozen []*fleetsim.Member) error {
	bound := time.Duration(health.FailureThreshold) * (health.Interval + health.Timeout)
	frozenBound := health.ReadyInterval + bound
	half := len(members) / 2
	start := time.Now()
	for i, m := range members {
		if i < half {
			m.Stop()
		} else {
			m.Cut()
		}
	}
	for _, m := range frozen {
		m.Freeze()
	}
	all := append(slices.Clone(members), frozen...)
	took := make([]time.Duration, len(all))
	left := len(all)
	deadline := start.Add(2*frozenBound + time.Minute)
	for left > 0 && time.Now().Before(deadline) {
		now := time.Now()
		sums.mu.Lock()
		for i, m := range all {
			if took[i] == 0 {
				if s, ok := sums.latest[m.Name()]; ok && unreachable(s) == "" {
					took[i] = now.Sub(start)
					left--
				}
			}
		}
		sums.mu.Unlock()
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	for i := range took {
		if took[i] == 0 {
			took[i] = never
		}
	}
	stats := func(ds []time.Duration) string {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return fmt.Sprintf("first %s   p50 %s   p99 %s   last %s", show(ds[0]), show(ds[len(ds)/2]), show(ds[(len(ds)*99+99)/100-1]), show(ds[len(ds)-1]))
	}
	fmt.Printf("  %d members unreachable at once, to their summaries' Reachable False (stated bound: %d × (%s + %s) = %s):\n",
		len(members), health.FailureThreshold, health.Interval, health.Timeout, bound)
	fmt.Printf("    %d stopped (connections refused): %s\n", half, stats(took[:half]))
	fmt.Printf("    %d cut off (links drop every packet: keepalives unanswered): %s\n", len(members)-half, stats(took[half:len(members)]))
	worst := slices.Max(took[:len(members)])
	benchproc.Verdict(fmt.Sprintf("%d members marked unreachable within the stated bound %s (the last at %s, %.2f× the bound)",
		len(members), bound, show(worst), ratio(worst, bound)), worst <= bound)
	if len(frozen) > 0 {
		fmt.Printf("    at the same time %d frozen (API server hangs, link up: keepalives and PINGs answered): %s\n", len(frozen), stats(took[len(members):]))
		worst := slices.Max(took[len(members):])
		benchproc.Verdict(fmt.Sprintf("%d frozen members marked unreachable within the stated bound %s + %s = %s (the last at %s, %.2f× the bound)",
			len(frozen), health.ReadyInterval, bound, frozenBound, show(worst), ratio(worst, frozenBound)), worst <= frozenBound)
	}
	return nil
}
