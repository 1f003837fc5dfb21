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
	buf   []byte // holds a data segment's bytes
	other []byte // the second volume's bytes, when comparing two volumes
}

func (c *chunk) data() []byte      { return c.buf[:c.Length] }
func (c *chunk) otherData() []byte { return c.other[:c.Length] }

func newChunks(count, chunkSize int, pairs bool) []*chunk {
	chunks := make([]*chunk, count)
	for i := range chunks {
		chunks[i] = &chunk{buf: alignedBuffer(chunkSize)}
		if pairs {
			chunks[i].other = alignedBuffer(chunkSize)
		}
	}
	return chunks
}

// stage does one step of work on a chunk. Each stage runs in its own
// goroutine and sees chunks in plan order, so stages that hash or compare
// need no reordering, while reading, hashing and writing overlap in time.
type stage func(*chunk) error

// runPipeline pushes every segment through the stages using only the given
// chunks. The first stage error stops the pipeline and is returned; a
// cancelled ctx is reported as ErrCancelled.
func runPipeline(ctx context.Context, segments iter.Seq[Segment], chunks []*chunk, stages ...stage) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Every channel can hold all chunks, so sends never block and only the
	// wait for a free chunk needs to watch ctx.
	free := make(chan *chunk, len(chunks))
	for _, c := range chunks {
		free <- c
	}
	links := make([]chan *chunk, len(stages))
	for i := range links {
		links[i] = make(chan *chunk, len(chunks))
	}

	var wg sync.WaitGroup
	for i, work := range stages {
		in, out, last := links[i], free, i == len(stages)-1
		if !last {
			out = links[i+1]
		}
		wg.Go(func() {
			for c := range in {
				// After a failure or cancellation chunks are drained
				// without work so that every goroutine ends promptly.
				if ctx.Err() == nil {
					if err := work(c); err != nil {
						cancel(err)
					}
				}
				out <- c
			}
			if !last {
				close(out)
			}
		})
	}

	for seg := range segments {
		if ctx.Err() != nil {
			break
		}
		select {
		case c := <-free:
			c.Segment = seg
			links[0] <- c
		case <-ctx.Done():
		}
	}
	close(links[0])
	wg.Wait()
	return cancelledOr(context.Cause(ctx))
}
