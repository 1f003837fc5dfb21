// Command fleet measures the fleet hub (issue 20; make bench): cmd/nodewright-fleet, built
// from the tree and run as its own process, against member clusters that are each a real
// kube-apiserver with the Nodewright CRDs, all on one etcd under their own --etcd-prefix,
// registered through kubeconfig Secrets. It prints
//
//   - the hub's CPU and memory at rest with 0, 10 and 50 members, what one member costs, and
//     both projected to 3,500 members, with where that projection is weakest;
//   - the p99 latency from a status write on a member's NodewrightCluster to the hub's
//     summary showing it (target 1s), over a few hundred changes across the members;
//   - how long the hub takes to mark a member unreachable, for a killed member API server
//     (connections refused) and a frozen one (SIGSTOP: connections hang), against the bound
//     docs/fleet.md states: threshold × (interval + timeout).
//
// Each member API server is kept small so that fifty fit two cores: no watch cache (the hub
// is a member's only client and watches a handful of objects; the cache would hold a copy of
// every resource type per server), no priority and fairness and no endpoint reconciler (both
// run loops of their own against etcd), no profiling. Fifty of them, about 270 MiB each, fit
// in this machine's memory; what the members use is printed too, for scale.
//
// BENCH_FLEET_MEMBERS (50), BENCH_FLEET_FIRST (10), BENCH_FLEET_WINDOW (45s) and
// BENCH_FLEET_CHANGES (400) shorten a run.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/fleet"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

// The target, and the hub's health options (its defaults, which docs/fleet.md states).
const (
	latencyTarget = time.Second
	projectTo     = 3500
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
	members, first, changes int
	window                  time.Duration
}

func readSettings() (settings, error) {
	s := settings{members: 50, first: 10, changes: 400, window: 45 * time.Second}
	for _, v := range []struct {
		env string
		n   *int
	}{{"BENCH_FLEET_MEMBERS", &s.members}, {"BENCH_FLEET_FIRST", &s.first}, {"BENCH_FLEET_CHANGES", &s.changes}} {
		if x := os.Getenv(v.env); x != "" {
			n, err := strconv.Atoi(x)
			if err != nil || n < 1 {
				return s, fmt.Errorf("%s: want a positive number, got %q", v.env, x)
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
	if s.first >= s.members || s.members < 7 {
		return s, fmt.Errorf("want BENCH_FLEET_FIRST below BENCH_FLEET_MEMBERS, and at least 7 members")
	}
	return s, nil
}

// lab is what runs: etcd, the hub's API server, the members and the hub.
type lab struct {
	dir, bin, root string
	etcd           string
	pki            *pki
	ps             *procs
	hubServer      *apiServer
	hubClient      client.WithWatch
	members        []*member
	checkpoint     string
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
	defer func() { _ = os.RemoveAll(dir) }()
	l := &lab{dir: dir, bin: filepath.Join(root, "bin", "k8s", version), root: root, ps: &procs{}}
	// Every process ends on every way out; the temporary folder goes after them.
	defer l.ps.killAll()
	began := time.Now()

	hubBinary := filepath.Join(dir, "nodewright-fleet")
	built := make(chan error, 1)
	go func() { built <- benchproc.Build(root, "./cmd/nodewright-fleet", hubBinary) }()
	if l.pki, err = newPKI(dir); err != nil {
		return err
	}
	if l.checkpoint, err = checkpointLine(ctx); err != nil {
		return err
	}
	if l.etcd, err = startEtcd(l.ps, filepath.Join(l.bin, "etcd"), dir); err != nil {
		return err
	}
	if err := l.startHubServer(ctx); err != nil {
		return err
	}
	if err := <-built; err != nil {
		return err
	}
	hub, metrics, err := l.startHub(hubBinary)
	if err != nil {
		return err
	}
	sums := watchSummaries(ctx, l.hubClient)

	fmt.Printf("fleet hub on one machine (%s): members are kube-apiservers on one etcd, %s each\n",
		time.Now().UTC().Format(time.RFC3339), strings.Join(memberFlags, " "))
	fmt.Printf("  health checks every %s, timeout %s, threshold %d; CPU %% of one core, RSS the mean over a %s window at rest\n",
		health.Interval, health.Timeout, health.FailureThreshold, cfg.window)
	var points []point
	for _, n := range []int{0, cfg.first, cfg.members} {
		if n > 0 {
			t0 := time.Now()
			if err := l.addMembers(ctx, n); err != nil {
				return err
			}
			if err := sums.waitUntil(ctx, l.names(), 3*time.Minute, settled); err != nil {
				return fmt.Errorf("summaries of %d members: %w", n, err)
			}
			fmt.Printf("  %d members up, set up, registered and summarised in %s\n", n, time.Since(t0).Round(time.Second))
		}
		// Settled: the engagements' first lists and writes are over.
		if err := sleep(ctx, 2*health.Interval); err != nil {
			return err
		}
		p, err := atRest(ctx, hub, metrics, l.members, cfg.window)
		if err != nil {
			return err
		}
		points = append(points, p)
		fmt.Printf("  hub with %2d members   CPU %6.3f %%   RSS %6.1f MiB (peak %.1f)   Go heap in use %6.1f MiB   %4d goroutines   %3d sockets",
			p.members, p.cpu, benchproc.MiB(p.rss), benchproc.MiB(p.peak), benchproc.MiB(p.heap), p.goroutines, p.sockets)
		if p.members > 0 {
			fmt.Printf("   | members: CPU %.1f %% together, RSS %.0f MiB each", p.memberCPU, benchproc.MiB(p.memberRSS))
		}
		fmt.Println()
	}
	project(points[0], points[1], points[2])
	if err := l.latency(ctx, sums, cfg.changes, metrics); err != nil {
		return err
	}
	if err := l.unreachable(ctx, sums); err != nil {
		return err
	}
	fmt.Printf("  (run took %s)\n", time.Since(began).Round(time.Second))
	return nil
}

func (l *lab) names() []string {
	out := make([]string, len(l.members))
	for i, m := range l.members {
		out[i] = m.name
	}
	return out
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

// startHub runs the hub as deployed, but for leader election; it returns the process and
// its metrics endpoint.
func (l *lab) startHub(binary string) (*benchproc.Process, string, error) {
	kc, err := l.hubServer.kubeconfig(l.pki, l.pki.adminCert, l.pki.adminKey)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(l.dir, "hub.kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return nil, "", err
	}
	port, err := benchproc.FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + port
	cmd := exec.Command(binary, "--kubeconfig", path, "--namespace", hubNamespace, "--clusterprofile-namespace", hubNamespace, "--leader-elect=false",
		"--metrics-bind-address", addr, "--health-probe-bind-address", "0")
	p, err := benchproc.Start(cmd, filepath.Join(l.dir, "nodewright-fleet.log"))
	if err != nil {
		return nil, "", err
	}
	l.ps.add(p)
	return p, "http://" + addr + "/metrics", nil
}

// addMembers starts members until there are n, four at a time, sets each up and registers it.
func (l *lab) addMembers(ctx context.Context, n int) error {
	scheme, err := fleet.Scheme()
	if err != nil {
		return err
	}
	crds := filepath.Join(l.root, "config", "crd", "bases")
	from := len(l.members)
	added := make([]*member, n-from)
	errs := make([]error, n-from)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := from; i < n; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("member-%02d", i+1)
			s, err := startAPIServer(ctx, l.ps, filepath.Join(l.bin, "kube-apiserver"), l.dir, name, l.etcd, l.pki, memberFlags...)
			if err != nil {
				errs[i-from] = err
				return
			}
			m, err := setUpMember(ctx, s, scheme, crds, l.checkpoint)
			if err == nil {
				err = register(ctx, l.hubClient, m, l.pki)
			}
			added[i-from], errs[i-from] = m, err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	l.members = append(l.members, added...)
	return nil
}

// project derives one member's cost from the two points with members and projects it; the
// point without members checks that the cost is a straight line.
func project(zero, a, b point) {
	cpu := fit(a.members, b.members, a.cpu, b.cpu)
	rss := fit(a.members, b.members, float64(a.rss), float64(b.rss))
	heap := fit(a.members, b.members, float64(a.heap), float64(b.heap))
	gor := fit(a.members, b.members, float64(a.goroutines), float64(b.goroutines))
	socks := fit(a.members, b.members, float64(a.sockets), float64(b.sockets))
	fmt.Printf("  one member costs the hub (from %d to %d members): CPU %.4f %% of a core, RSS %.2f MiB, Go heap %.2f MiB, %.1f goroutines, %.1f sockets\n",
		a.members, b.members, cpu.perMember, rss.perMember/(1<<20), heap.perMember/(1<<20), gor.perMember, socks.perMember)
	check := fit(zero.members, a.members, zero.cpu, a.cpu)
	checkRSS := fit(zero.members, a.members, float64(zero.rss), float64(a.rss))
	fmt.Printf("    (from 0 to %d members, as a check of the line: CPU %.4f %%, RSS %.2f MiB)\n", a.members, check.perMember, checkRSS.perMember/(1<<20))
	fmt.Printf("  projected to %d members: CPU %.1f %% of a core, RSS %.2f GiB (Go heap %.2f GiB), %.0f goroutines, %.0f sockets\n",
		projectTo, cpu.at(projectTo), rss.at(projectTo)/(1<<30), heap.at(projectTo)/(1<<30), gor.at(projectTo), socks.at(projectTo))
	fmt.Println("  where the projection is weakest:")
	fmt.Println("    - memory: each member here has one NodewrightCluster, one ConfigMap, one Deployment in the hub's caches")
	fmt.Println("      and no workflows (the hub caches none: it reads them 25 at a time, so they add a page while read and")
	fmt.Println("      32 summarised ones), and the Go heap's headroom (GOGC) scales the whole; a straight line from 50 to")
	fmt.Println("      3,500 members (70×) assumes no shared structure grows faster")
	fmt.Println("    - CPU: at rest a member costs its health checks (at 3,500 members, 700 GETs of /readyz a second, each")
	fmt.Println("      on its member's own TLS connection) and its watches' upkeep; it says nothing of changes arriving from")
	fmt.Println("      3,500 members at once, which the summary workers (8) take in turn (see the reconcile rate below), nor of")
	fmt.Println("      the hub starting (every member's three lists and its workflows' reads at once), which was not measured")
	fmt.Println("    - connections and goroutines: one HTTP/2 connection and a few informers per member, linear here; at")
	fmt.Println("      3,500 the hub needs that many file descriptors and the hub's API server that many summaries' writes")
}

// latency writes changes across the members, a few per second, and reads from the hub's
// summaries when each showed.
func (l *lab) latency(ctx context.Context, sums *summaries, changes int, metrics string) error {
	const perSecond = 10
	reconciles := `controller_runtime_reconcile_time_seconds_count{controller="nodewrightclustersummary"}`
	reconcileTime := `controller_runtime_reconcile_time_seconds_sum{controller="nodewrightclustersummary"}`
	before, err := scrape(ctx, metrics, reconciles, reconcileTime)
	if err != nil {
		return err
	}
	seq := map[string]int32{}
	tick := time.NewTicker(time.Second / perSecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var writeErr error
	for i := range changes {
		m := l.members[i%len(l.members)]
		seq[m.name]++
		k := marker{m.name, seq[m.name]}
		phase := nwv1.ClusterDegraded
		if k.ready%2 == 0 {
			phase = nwv1.ClusterMultiNode
		}
		wg.Go(func() {
			sums.expect(k)
			patch := fmt.Sprintf(`{"status":{"phase":%q,"nodes":{"ready":%d}}}`, phase, k.ready)
			nwc := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: "nodewright"}}
			if err := m.client.Status().Patch(ctx, nwc, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				mu.Lock()
				writeErr = fmt.Errorf("writing the status of %s: %w", m.name, err)
				mu.Unlock()
			}
		})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	wg.Wait()
	if writeErr != nil {
		return writeErr
	}
	deadline := time.Now().Add(30 * time.Second)
	for sums.outstanding() > 0 && time.Now().Before(deadline) {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	after, err := scrape(ctx, metrics, reconciles, reconcileTime)
	if err != nil {
		return err
	}
	seen, missing := sums.results()
	slices.Sort(seen)
	// A change that never showed counts as slower than any that did.
	at := func(q float64) string {
		i := int(q*float64(len(seen)+missing)+0.999999) - 1
		if i >= len(seen) {
			return "never"
		}
		return seen[max(i, 0)].Round(time.Millisecond).String()
	}
	p99 := time.Duration(1 << 62)
	if i := int(0.99*float64(len(seen)+missing)+0.999999) - 1; i < len(seen) {
		p99 = seen[max(i, 0)]
	}
	fmt.Printf("  a member's status write to its summary on the hub, %d changes across %d members at %d/s (from the write's start):\n",
		changes, len(l.members), perSecond)
	fmt.Printf("    p50 %s   p90 %s   p99 %s   max %s   never shown %d\n", at(0.5), at(0.9), at(0.99), at(1), missing)
	if n := after[reconciles] - before[reconciles]; n > 0 {
		mean := time.Duration((after[reconcileTime] - before[reconcileTime]) / n * float64(time.Second))
		fmt.Printf("    the summary controller reconciled %.0f times meanwhile, %s each on average: one worker of the 8 takes at most %.0f changes/s\n",
			n, mean.Round(10*time.Microsecond), float64(time.Second)/float64(mean))
	}
	benchproc.Verdict(fmt.Sprintf("p99 ≤ 1s (%s, %.2f× the target)", at(0.99), float64(p99)/float64(latencyTarget)), p99 <= latencyTarget)
	return nil
}

// unreachable kills three member API servers and freezes three others, and times each until
// its summary says Reachable False.
func (l *lab) unreachable(ctx context.Context, sums *summaries) error {
	bound := time.Duration(health.FailureThreshold) * (health.Interval + health.Timeout)
	n := len(l.members)
	killed, frozen := l.members[n-3:], l.members[n-6:n-3]
	var wg sync.WaitGroup
	took := make([]time.Duration, 6)
	errs := make([]error, 6)
	for i, m := range append(slices.Clone(killed), frozen...) {
		wg.Go(func() {
			began := time.Now()
			if i < 3 {
				m.kill()
			} else if err := m.freeze(); err != nil {
				errs[i] = err
				return
			}
			errs[i] = sums.waitUntil(ctx, []string{m.name}, 2*bound+time.Minute, unreachable)
			took[i] = time.Since(began)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("marking a member unreachable: %w", err)
		}
	}
	show := func(ds []time.Duration) string {
		var s []string
		for _, d := range ds {
			s = append(s, d.Round(100*time.Millisecond).String())
		}
		return strings.Join(s, ", ")
	}
	fmt.Printf("  member API server stopped to its summary's Reachable False (stated bound: %d × (%s + %s) = %s):\n",
		health.FailureThreshold, health.Interval, health.Timeout, bound)
	fmt.Printf("    killed (connections refused): %s\n", show(took[:3]))
	fmt.Printf("    frozen (SIGSTOP: connections hang until the check's timeout): %s\n", show(took[3:]))
	worst := slices.Max(took)
	benchproc.Verdict(fmt.Sprintf("every member marked unreachable within the stated bound %s (worst %s, %.2f× the bound)",
		bound, worst.Round(100*time.Millisecond), float64(worst)/float64(bound)), worst <= bound)
	return nil
}
