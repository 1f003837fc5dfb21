package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// The defaults of DRBDEvents: a change is reported within about DefaultEventsMaxDelay plus
// one report (a read of the object, `drbdsetup status`, and a write when what it says
// changed), and at most once per DefaultEventsMinGap, so at most ten reports a second
// whatever DRBD does.
const (
	DefaultEventsQuiet    = 20 * time.Millisecond
	DefaultEventsMaxDelay = 50 * time.Millisecond
	DefaultEventsMinGap   = 100 * time.Millisecond
	// DefaultEventsBackoff is the first wait before the stream is started again after it
	// ended or could not start; each failure doubles it, up to DefaultEventsMaxBackoff, and a
	// stream that ran for DefaultEventsHealthy sets it back.
	DefaultEventsBackoff    = time.Second
	DefaultEventsMaxBackoff = 30 * time.Second
	DefaultEventsHealthy    = time.Minute
)

// DRBDEvents follows DRBD's own announcements of its state changes, `drbdsetup events2
// --statistics` (drbd.Events2Command), and asks for a report (Changed) when one matters: a
// connection, disk or role state, a pause flag, the end of a verification (drbd.Effect's
// Significant), and once each time the stream has dumped the current state, since changes
// may have been missed while it was not followed. What the report says is still read from
// `drbdsetup status --json`, the state events2 leaves out included (a resync's progress is
// not announced); the stream only says when. Changes close together make one report
// (Quiet, MaxDelay), and reports are at least MinGap apart. The Reporter's periodic read at
// its interval stays the safety net: when the stream ends or cannot start, DRBDEvents logs
// it and starts it again after a backoff, the reports going on at the interval meanwhile.
type DRBDEvents struct {
	// Streamer runs drbdsetup events2: drbd.ExecRunner on a host, the played kernel on the
	// local site.
	Streamer drbd.Streamer
	// Drbdsetup replaces the program and options before "events2" (tests); ["drbdsetup"]
	// when empty.
	Drbdsetup []string
	// ProcDRBD is the kernel's /proc/drbd: while it is missing no stream is started;
	// "/proc/drbd" when empty.
	ProcDRBD string
	// Changed asks for a report; it must not block (Reporter.Trigger).
	Changed func()

	// Quiet is how long the stream must stay quiet after a change before the report is
	// asked for, MaxDelay the longest a change waits for the quiet, MinGap the least time
	// between two reports asked for; DefaultEvents* when zero.
	Quiet, MaxDelay, MinGap time.Duration
	// Backoff, MaxBackoff and Healthy: see DefaultEventsBackoff; the defaults when zero.
	Backoff, MaxBackoff, Healthy time.Duration

	mu      sync.Mutex
	starts  int
	dumped  int
	changes int
}

// DRBDEventsStats are counts since Run started, for tests and benchmarks.
type DRBDEventsStats struct {
	// Starts is how many streams were started (successfully or not), Dumped how many dumped
	// the current state, Reports how many reports were asked for.
	Starts, Dumped, Reports int
}

// Stats are the counts so far.
func (e *DRBDEvents) Stats() DRBDEventsStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return DRBDEventsStats{Starts: e.starts, Dumped: e.dumped, Reports: e.changes}
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Run follows the stream until ctx ends.
func (e *DRBDEvents) Run(ctx context.Context) error {
	if e.Streamer == nil || e.Changed == nil {
		return errors.New("following DRBD's events needs a streamer and something to call on a change")
	}
	log := klog.FromContext(ctx).WithName("drbd-events")
	proc := e.ProcDRBD
	if proc == "" {
		proc = "/proc/drbd"
	}
	signal := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { e.debounce(ctx, signal) })

	backoff := orDefault(e.Backoff, DefaultEventsBackoff)
	failures := 0
	for ctx.Err() == nil {
		started := time.Now()
		err := e.follow(ctx, proc, signal)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) >= orDefault(e.Healthy, DefaultEventsHealthy) {
			backoff, failures = orDefault(e.Backoff, DefaultEventsBackoff), 0
		}
		failures++
		switch {
		case errors.Is(err, errNoDRBD):
			// Not loaded: nothing to follow, and nothing worth a log line each time.
			log.V(1).Info("DRBD is not loaded; looking again", "in", backoff)
		case failures <= 3 || failures%20 == 0:
			log.Error(err, "Following DRBD's events stopped; reports go on at the report interval, the stream starts again", "in", backoff, "failures", failures)
		}
		// A little jitter, so that the agents of a cluster do not start together.
		wait := backoff + rand.N(backoff/10+1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, orDefault(e.MaxBackoff, DefaultEventsMaxBackoff))
	}
	return nil
}

var errNoDRBD = errors.New("the kernel has no DRBD module loaded")

// follow runs one stream to its end.
func (e *DRBDEvents) follow(ctx context.Context, proc string, signal chan<- struct{}) error {
	if _, err := os.Stat(proc); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (%s is missing)", errNoDRBD, proc)
	}
	argv := drbd.Events2Command()
	if len(e.Drbdsetup) > 0 {
		argv = append(append([]string{}, e.Drbdsetup...), argv[1:]...)
	}
	e.mu.Lock()
	e.starts++
	e.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := e.Streamer.Stream(ctx, argv)
	if err != nil {
		return err
	}
	defer func() { _ = stream.Close() }()
	state := &drbd.Events2{}
	err = state.Read(stream, func(effect drbd.Effect) {
		if effect.DumpDone {
			e.mu.Lock()
			e.dumped++
			e.mu.Unlock()
		}
		if effect.DumpDone || (effect.Significant && state.Dumped()) {
			select {
			case signal <- struct{}{}:
			default:
			}
		}
	})
	if err == nil {
		err = errors.New("drbdsetup events2 ended")
	}
	return err
}

// debounce turns the stream's signals into reports asked for: after Quiet without another
// signal, or MaxDelay after the first, and never within MinGap of the last.
func (e *DRBDEvents) debounce(ctx context.Context, signal <-chan struct{}) {
	quiet, maxDelay, minGap := orDefault(e.Quiet, DefaultEventsQuiet), orDefault(e.MaxDelay, DefaultEventsMaxDelay), orDefault(e.MinGap, DefaultEventsMinGap)
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-signal:
		}
		first := time.Now()
		timer := time.NewTimer(quiet)
	gather:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-signal:
				if left := maxDelay - time.Since(first); left > 0 {
					timer.Reset(min(quiet, left))
				}
			case <-timer.C:
				break gather
			}
		}
		if wait := minGap - time.Since(last); !last.IsZero() && wait > 0 {
			// Signals meanwhile are left in the channel, for the next report.
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		e.mu.Lock()
		e.changes++
		e.mu.Unlock()
		e.Changed()
	}
}
