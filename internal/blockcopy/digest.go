//go:build linux

package blockcopy

import (
	"context"
	"fmt"
)

// Digest hashes the first length bytes of src, reading only its data
// extents and hashing holes as zeros, exactly as Copy hashes a source. It is
// how the target is read back after a copy.
func (e *Engine) Digest(ctx context.Context, src Source, length int64) (string, error) {
	extents, err := src.DataExtents()
	if err != nil {
		return "", fmt.Errorf("%w: listing target data extents: %w", ErrIO, err)
	}
	progress := e.opts.Progress
	h := e.opts.Algorithm.newDigester(e.zeros, e.zeroTrees)
	progress.begin(PhaseVerify, length)

	read := func(c *chunk) error {
		if !c.Data {
			return nil
		}
		return readFull(src, c.data(), c.Offset, "target")
	}
	hash := func(c *chunk) error {
		defer progress.advance(c.Length)
		e.absorb(h, c, c.buf)
		return nil
	}

	segments := planSegments(length, int64(e.opts.ChunkSize), extents)
	if err := runPipeline(ctx, segments, e.chunks, stage{work: read, workers: ioWorkers}, stage{work: hash}); err != nil {
		return "", err
	}
	return formatDigest(e.opts.Algorithm, h.Sum(nil)), nil
}
