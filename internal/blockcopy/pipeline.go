//go:build linux

package blockcopy

import (
	"context"
	"iter"
	"sync"
)

// chunk carries one segment through a pipeline together with the buffers
// for its bytes. Chunks are recycled, so memory stays at the size of the
// pool whatever the size of the volume.
type chunk struct {
	Segment
	buf   []byte        // holds a data segment's bytes
	other []byte        // the second volume's bytes, when comparing two volumes
	zero  bool          // the segment reads as zeros: a hole, or data of zeros
	done  chan struct{} // closed when a parallel stage is finished with the chunk
}

func (c *chunk) data() []byte      { return c.buf[:c.Length] }
func (c *chunk) otherData() []byte { return c.other[:c.Length] }

// stage does one step of work on a chunk. Later stages always see chunks in
// plan order, so hashing needs no reordering, while the stages themselves
// run at the same time: reading, hashing and writing overlap.
type stage struct {
	work func(*chunk) error
	// workers > 1 runs the step on several chunks at once. Used for I/O,
	// it keeps requests queued at the disk while a goroutine waits to be
	// scheduled, which matters on a busy node.
	workers int
}

// runPipeline pushes every segment through the stages using only the given
// chunks. The first stage error stops the pipeline and is returned; a
// cancelled ctx is reported as ErrCancelled.
func runPipeline(ctx context.Context, segments iter.Seq[Segment], chunks []*chunk, stages ...stage) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Every channel can hold all chunks, so sends never block and only the
	// wait for a free chunk needs to watch ctx.
	newLink := func() chan *chunk { return make(chan *chunk, len(chunks)) }
	free := newLink()
	for _, c := range chunks {
		free <- c
	}
	// After a failure or cancellation chunks are drained without work so
	// that every goroutine ends promptly.
	do := func(work func(*chunk) error, c *chunk) {
		if ctx.Err() == nil {
			if err := work(c); err != nil {
				cancel(err)
			}
		}
	}

	var wg sync.WaitGroup
	first := newLink()
	next := first
	for i, s := range stages {
		in, out, last := next, free, i == len(stages)-1
		if !last {
			out = newLink()
		}
		if s.workers <= 1 {
			wg.Go(func() {
				for c := range in {
					do(s.work, c)
					out <- c
				}
				if !last {
					close(out)
				}
			})
		} else {
			runParallel(&wg, in, out, last, s, do, newLink)
		}
		next = out
	}

	for seg := range segments {
		if ctx.Err() != nil {
			break
		}
		select {
		case c := <-free:
			c.Segment = seg
			first <- c
		case <-ctx.Done():
		}
	}
	close(first)
	wg.Wait()
	return cancelledOr(context.Cause(ctx))
}

// runParallel hands chunks to s.workers goroutines and passes them on in
// the order they arrived, each once its work is done.
func runParallel(wg *sync.WaitGroup, in, out chan *chunk, last bool, s stage,
	do func(func(*chunk) error, *chunk), newLink func() chan *chunk) {
	jobs, inOrder := newLink(), newLink()
	wg.Go(func() {
		for c := range in {
			c.done = make(chan struct{})
			inOrder <- c
			jobs <- c
		}
		close(jobs)
		close(inOrder)
	})
	for range s.workers {
		wg.Go(func() {
			for c := range jobs {
				do(s.work, c)
				close(c.done)
			}
		})
	}
	wg.Go(func() {
		for c := range inOrder {
			<-c.done
			out <- c
		}
		if !last {
			close(out)
		}
	})
}
