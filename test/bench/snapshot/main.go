// Command snapshot benchmarks a VMSnapshotPolicy against its targets from issue 34 and prints
// each figure with PASS or FAIL, its ratio to the target, and its ratio to a baseline measured
// in the same run:
//
//   - a retention pass (vmsnapshot.Retention.Plan) over 10,000 kept snapshots of a VM, every
//     rule set (keepLast, keepHourly, keepDaily, keepWeekly, maxAge, minGood), in a time zone
//     with daylight saving, one in seventeen failed (target ≤ 100 ms);
//   - the baseline: sorting the same 10,000 snapshots newest first, which any retention pass
//     does, and nothing else.
//
// Each retention figure is the median of BENCH_SNAPSHOT_ROUNDS (default 21) passes.
//
// Then the schedule (schedule.go), on a local API server with the controller in this process:
//
//   - 100 VMs on one every-minute schedule: the time from the scheduled minute until a watch
//     has seen every snapshot of the run, for two runs (target ≤ 2 s), against a bare client
//     creating 100 snapshots one after the other, seen by the same watch;
//   - the controller's API writes (every request but a GET) in the quiet part of the minute
//     after the first run, once its snapshots are good (target 0).
//
// The snapshots are created at the minute, before KubeVirt does anything with them: the played
// snapshot time is not part of the figure.
package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
)

const (
	snapshots      = 10_000
	retentionLimit = 100 * time.Millisecond
)

func main() {
	rounds := 21
	if v := os.Getenv("BENCH_SNAPSHOT_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench-snapshot: BENCH_SNAPSHOT_ROUNDS=%q: want a whole number ≥ 1\n", v)
			os.Exit(2)
		}
		rounds = n
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-snapshot: %v\n", err)
		os.Exit(1)
	}
	// Hourly snapshots over 14 months, shuffled as a List returns them (by name, not time).
	start := time.Date(2025, 10, 1, 0, 30, 0, 0, berlin)
	snaps := make([]vmsnapshot.Snapshot, snapshots)
	for i := range snaps {
		state := vmsnapshot.Good
		if i%17 == 0 {
			state = vmsnapshot.Failed
		}
		snaps[i] = vmsnapshot.Snapshot{Name: fmt.Sprintf("vm-%08x", uint32(i)*2654435761), Created: start.Add(time.Duration(i) * time.Hour), State: state}
	}
	slices.SortFunc(snaps, func(a, b vmsnapshot.Snapshot) int { return cmp.Compare(a.Name, b.Name) })
	now := start.Add(snapshots * time.Hour)
	r := vmsnapshot.Retention{KeepLast: 24, KeepHourly: 48, KeepDaily: 30, KeepWeekly: 52, MaxAge: 400 * 24 * time.Hour, MinGood: 3}

	kept := 0
	pass := median(rounds, func() {
		kept = 0
		for _, v := range r.Plan(snaps, now, berlin) {
			if v.Keep {
				kept++
			}
		}
	})
	baseline := median(rounds, func() {
		sorted := slices.Clone(snaps)
		slices.SortFunc(sorted, func(a, b vmsnapshot.Snapshot) int {
			if c := b.Created.Compare(a.Created); c != 0 {
				return c
			}
			return cmp.Compare(a.Name, b.Name)
		})
	})

	fmt.Printf("VMSnapshotPolicy retention (%s, %d CPUs, median of %d)\n\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), rounds)
	fmt.Printf("retention pass over %d snapshots of a VM (Europe/Berlin, every rule, 1 in 17 failed; %d kept)\n", snapshots, kept)
	fmt.Printf("  %8.2f ms   (%.3f× the target; %.2f× the baseline)\n", ms(pass), float64(pass)/float64(retentionLimit), float64(pass)/float64(baseline))
	fmt.Printf("  baseline: sorting them newest first, %.2f ms\n", ms(baseline))
	word := "PASS"
	if pass > retentionLimit {
		word = "FAIL"
	}
	fmt.Printf("  %s  ≤ %s\n", word, retentionLimit)

	sched, err := benchSchedule(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-snapshot: the schedule: %v\n", err)
		os.Exit(1)
	}
	if !printSchedule(sched) || word == "FAIL" {
		os.Exit(1)
	}
}

func median(rounds int, f func()) time.Duration {
	took := make([]time.Duration, rounds)
	for i := range took {
		began := time.Now()
		f()
		took[i] = time.Since(began)
	}
	slices.Sort(took)
	return took[rounds/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
