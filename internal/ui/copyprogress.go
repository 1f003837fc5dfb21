package ui

import (
	"context"
	"encoding/json"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
)

// kindCopyProgress is a running migration's copy progress, by the migration's key: what its
// data Job's log says (migration.ReadCopyProgress), read with the user's credentials. The
// operator reads no pod's log, so the migration's status holds no progress while it copies.
const kindCopyProgress = "CopyProgress"

// copyProgressInterval is how often a running copy's log is read.
const copyProgressInterval = 2 * time.Second

// copyProgressSampler reads the progress of the migrations whose data step runs, one loop per
// migration, for one run of the hub.
type copyProgressSampler struct {
	// jobs is what each sampled migration's loop reads, by key; a loop ends when its
	// migration no longer runs a data step, or another loop took its place.
	jobs map[string]sampling
	// loops numbers the loops started, so that a loop knows its own entry.
	loops uint64
}

// sampling is one migration's sampling: the data Job its loop reads, and which loop.
type sampling struct {
	job  string
	loop uint64
}

// observeMigration starts sampling m's copy progress when a data step of its runs, and stops
// it (its loop sees the change) when none does.
func (h *hub) observeMigration(ctx context.Context, gen uint64, obj client.Object) {
	m, ok := obj.(*nwv1.VMVolumeMigration)
	if !ok || h.progress == nil {
		return
	}
	key := objectKey(m)
	job := runningDataJob(m)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.current(gen) {
		return
	}
	sampler := &h.run.progress
	was, sampled := sampler.jobs[key]
	switch {
	case job == "" && sampled:
		delete(sampler.jobs, key)
	case job != "" && !sampled:
		sampler.loops++
		loop := sampler.loops
		sampler.jobs[key] = sampling{job: job, loop: loop}
		h.run.wg.Go(func() { h.sampleCopyProgress(ctx, gen, key, m.Namespace, job, loop) })
	case job != "" && was.job != job:
		sampler.jobs[key] = sampling{job: job, loop: was.loop} // the loop reads the new Job's log from its next round
	}
}

// runningDataJob is the data Job of m's running data step, or "".
func runningDataJob(m *nwv1.VMVolumeMigration) string {
	for _, s := range m.Status.Steps {
		if s.State == nwv1.StepRunning && (s.Name == string(migration.Copy) || s.Name == string(migration.VerifyClone)) {
			return m.Status.JobName
		}
	}
	return ""
}

// sampleCopyProgress reads the progress of the migration key's data Job until it no longer
// runs one, and then removes what it showed.
func (h *hub) sampleCopyProgress(ctx context.Context, gen uint64, key, namespace, job string, loop uint64) {
	defer h.remove(gen, kindCopyProgress, key)
	t := time.NewTicker(copyProgressInterval)
	defer t.Stop()
	var last *nwv1.MigrationProgress
	for {
		rctx, cancel := context.WithTimeout(ctx, copyProgressInterval)
		p, err := migration.ReadCopyProgress(rctx, h.progress, namespace, job)
		cancel()
		if err == nil && p != nil {
			if shown := migration.Progress(p.BytesDone, p.BytesTotal); shown != nil && (last == nil || *shown != *last) {
				if data, err := json.Marshal(shown); err == nil {
					h.upsert(gen, kindCopyProgress, key, data)
					last = shown
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		var current sampling
		ok := h.current(gen)
		if ok {
			current, ok = h.run.progress.jobs[key]
		}
		h.mu.Unlock()
		if !ok || current.loop != loop {
			return // the step ended, or a loop of a later step took over
		}
		job = current.job
	}
}
