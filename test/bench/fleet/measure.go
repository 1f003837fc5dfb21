package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

// point is the hub at rest with some members over one window.
type point struct {
	members int
	// cpu is the hub's CPU, % of one core; rss its mean resident set over the window.
	cpu       float64
	rss, peak int64
	// From the hub's metrics endpoint at the window's end: Go heap in use, goroutines;
	// from /proc: open sockets.
	heap       int64
	goroutines int64
	sockets    int
	// requests is how many requests a second the members answered (the simulator's count).
	requests float64
	// slices is the hub's CPU over each sliceLength of the window (the last one may be
	// shorter), % of one core: what the mean hides (a garbage collection, a stretch of the
	// machine busy elsewhere).
	slices []float64
	// gcs is how many garbage collections the hub ran in the window; allocated, how many
	// bytes a second it allocated (its metrics).
	gcs       float64
	allocated float64
}

// sliceLength is how long each slice of the window at rest is.
const sliceLength = 30 * time.Second

// gcMetrics are the hub's metrics (Go's collector) read at each end of the window.
var gcMetrics = []string{"go_gc_duration_seconds_count", "go_memstats_alloc_bytes_total"}

// atRest measures the hub over window, sampling its resident set each second; requests
// counts the members' answers.
func atRest(ctx context.Context, hub *benchproc.Process, metrics string, members int, requests func() int64, window time.Duration) (point, error) {
	p := point{members: members}
	cpu0, err := hub.CPUTime()
	if err != nil {
		return p, err
	}
	requests0 := requests()
	gc0, err := scrape(ctx, metrics, gcMetrics...)
	if err != nil {
		return p, err
	}
	start := time.Now()
	var sum int64
	n := int64(0)
	sliceCPU, sliceStart := cpu0, start
	for time.Since(start) < window {
		// One reading of the clock ends a slice and begins the next, so that no time falls
		// between them.
		if now := time.Now(); now.Sub(sliceStart) >= sliceLength {
			cpu, err := hub.CPUTime()
			if err != nil {
				return p, err
			}
			p.slices = append(p.slices, benchproc.Percent(cpu-sliceCPU, now.Sub(sliceStart)))
			sliceCPU, sliceStart = cpu, now
		}
		anon, file, err := hub.RSSParts()
		if err != nil {
			return p, err
		}
		sum += anon + file
		n++
		if err := sleep(ctx, time.Second); err != nil {
			return p, err
		}
	}
	wall := time.Since(start)
	cpu1, err := hub.CPUTime()
	if err != nil {
		return p, err
	}
	if took := time.Since(sliceStart); took >= sliceLength/2 {
		p.slices = append(p.slices, benchproc.Percent(cpu1-sliceCPU, took))
	}
	p.requests = float64(requests()-requests0) / wall.Seconds()
	p.cpu = benchproc.Percent(cpu1-cpu0, wall)
	p.rss = sum / n
	if p.peak, err = hub.PeakRSS(); err != nil {
		return p, err
	}
	m, err := scrape(ctx, metrics, append([]string{"go_memstats_heap_inuse_bytes", "go_goroutines"}, gcMetrics...)...)
	if err != nil {
		return p, err
	}
	p.gcs = m["go_gc_duration_seconds_count"] - gc0["go_gc_duration_seconds_count"]
	p.allocated = (m["go_memstats_alloc_bytes_total"] - gc0["go_memstats_alloc_bytes_total"]) / wall.Seconds()
	p.heap, p.goroutines = int64(m["go_memstats_heap_inuse_bytes"]), int64(m["go_goroutines"])
	p.sockets, err = sockets(hub.Cmd.Process.Pid)
	return p, err
}

// scrape reads unlabelled gauges and counters from a Prometheus text endpoint.
func scrape(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// sockets counts the process's open sockets.
func sockets(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n, nil
}

// cpuShares is the CPU time of each process the benchmark runs, and of the machine, at one
// moment; shares prints how it was spent from then on.
type cpuShares struct {
	at                                time.Time
	hub, server, etcd, bench, machine time.Duration
}

// cpuNow reads the CPU time of the hub, its API server, etcd, the benchmark's own process
// (the simulated members, the changes, the watch of the summaries) and the machine.
func (l *lab) cpuNow(hub *benchproc.Process) (cpuShares, error) {
	s := cpuShares{at: time.Now()}
	var errs [5]error
	s.hub, errs[0] = hub.CPUTime()
	s.server, errs[1] = l.hubServer.proc.CPUTime()
	s.etcd, errs[2] = l.etcdProc.CPUTime()
	s.bench, errs[3] = benchproc.SelfCPUTime()
	s.machine, errs[4] = benchproc.MachineCPUTime()
	for _, err := range errs {
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// shares says what each used of a core from s to now, and the machine's cores together.
func (s cpuShares) shares(now cpuShares) string {
	wall := now.at.Sub(s.at)
	return fmt.Sprintf("the hub used %.0f %% of a core, its API server %.0f %%, etcd %.0f %%, the benchmark's process (the members, the changes, the watch of the summaries) %.0f %%; the machine %.0f %% of its %d cores",
		benchproc.Percent(now.hub-s.hub, wall), benchproc.Percent(now.server-s.server, wall), benchproc.Percent(now.etcd-s.etcd, wall),
		benchproc.Percent(now.bench-s.bench, wall), benchproc.Percent(now.machine-s.machine, wall), runtime.NumCPU())
}
