//go:build linux

package blockcopy

import (
	"sync"
	"time"
)

// Progress is updated by the engine and read by whoever reports it. A nil
// *Progress is valid and records nothing.
type Progress struct {
	mu          sync.Mutex
	phase       string
	started     time.Time
	done        int64
	total       int64
	onPhaseDone func(ProgressReport)
}

// NewProgress returns a Progress that calls onPhaseDone with the final state
// of each phase when the next one begins, so that a reporter sampling on a
// timer still shows every phase, however short.
func NewProgress(onPhaseDone func(ProgressReport)) *Progress {
	return &Progress{onPhaseDone: onPhaseDone}
}

func (p *Progress) begin(phase string, total int64) {
	if p == nil {
		return
	}
	if p.phase != "" && p.onPhaseDone != nil {
		p.onPhaseDone(p.Report(time.Now()))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.started, p.done, p.total = phase, time.Now(), 0, total
}

func (p *Progress) advance(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.done += n
	p.mu.Unlock()
}

// Report returns the state of the current phase as of now. The rate is the
// phase average, which is steadier than an instantaneous one and good
// enough for an ETA on sequential I/O.
func (p *Progress) Report(now time.Time) ProgressReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := ProgressReport{Phase: p.phase, BytesDone: p.done, BytesTotal: p.total}
	if p.phase == "" {
		return r
	}
	elapsed := now.Sub(p.started).Seconds()
	r.ElapsedSeconds = roundSeconds(elapsed)
	if elapsed > 0 && p.done > 0 {
		rate := float64(p.done) / elapsed
		r.BytesPerSecond = int64(rate)
		r.EtaSeconds = roundSeconds(float64(p.total-p.done) / rate)
	}
	return r
}

func roundSeconds(s float64) float64 {
	return float64(int64(s*1000+0.5)) / 1000
}
