//go:build linux

package blockcopy

import (
	"context"
	"fmt"
)

// Digest hashes the first length bytes of src, reading only its data
// extents and hashing holes as zeros, exactly as Copy hashes a source. It is
// how the target is read back after a copy.
func Digest(ctx context.Context, src Source, length int64, opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	extents, err := src.DataExtents()
	if err != nil {
		return "", fmt.Errorf("%w: listing target data extents: %w", ErrIO, err)
	}
	zeros := alignedBuffer(opts.ChunkSize)
	h := opts.Algorithm.newHash()
	opts.Progress.begin(PhaseVerify, length)

	read := func(c *chunk) error {
		if !c.Data {
			return nil
		}
		return readFull(src, c.data(), c.Offset, "target")
	}
	hash := func(c *chunk) error {
		defer opts.Progress.advance(c.Length)
		if c.Data {
			h.Write(c.data())
		} else {
			hashZeros(h, c.Length, zeros)
		}
		return nil
	}

	chunks := newChunks(opts.Buffers, opts.ChunkSize, false)
	if err := runPipeline(ctx, planSegments(length, int64(opts.ChunkSize), extents), chunks, read, hash); err != nil {
		return "", err
	}
	return formatDigest(opts.Algorithm, h.Sum(nil)), nil
}
