//go:build linux

package blockcopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// Source is a volume to read: a file, a block device, or in tests anything
// that can fail on demand.
type Source interface {
	io.ReaderAt
	// Size is the number of bytes the volume holds.
	Size() int64
	// DataExtents lists the ranges that may hold data; everything else is
	// a hole that reads as zeros. Returning the whole volume is always
	// correct, just slower.
	DataExtents() ([]Extent, error)
}

// Sink is a volume to write.
type Sink interface {
	io.WriterAt
	Sync() error
}

// CopyStats describes a finished copy.
type CopyStats struct {
	SourceDigest string
	BytesTotal   int64
	BytesWritten int64
	// BytesSkipped were holes or all-zero chunks not written because the
	// target already reads as zeros there.
	BytesSkipped int64
}

// Copy copies src to dst, hashing the source on the way, and syncs dst.
// When targetZeroed is true, holes and all-zero chunks are not written;
// otherwise zeros are written for them so dst ends up equal to src. On error
// the stats tell how far the copy got and dst is in an undefined state.
func (e *Engine) Copy(ctx context.Context, src Source, dst Sink, targetZeroed bool) (CopyStats, error) {
	size := src.Size()
	stats := CopyStats{BytesTotal: size}
	extents, err := src.DataExtents()
	if err != nil {
		return stats, fmt.Errorf("%w: listing source data extents: %w", ErrIO, err)
	}
	progress := e.opts.Progress
	h := e.opts.Algorithm.newDigester(e.zeros, e.zeroTrees)
	var written, skipped atomic.Int64
	progress.begin(PhaseCopy, size)

	read := func(c *chunk) error {
		if !c.Data {
			return nil
		}
		return readFull(src, c.data(), c.Offset, "source")
	}
	hash := func(c *chunk) error {
		c.zero = e.absorb(h, c, c.buf)
		return nil
	}
	write := func(c *chunk) error {
		defer progress.advance(c.Length)
		switch {
		case c.zero && targetZeroed:
			skipped.Add(c.Length)
			return nil
		case c.zero:
			return writeFull(dst, e.zeros[:c.Length], c.Offset, &written)
		}
		return writeFull(dst, c.data(), c.Offset, &written)
	}

	segments := planSegments(size, int64(e.opts.ChunkSize), extents)
	err = runPipeline(ctx, segments, e.chunks,
		stage{work: read, workers: ioWorkers}, stage{work: hash}, stage{work: write, workers: ioWorkers})
	stats.BytesWritten, stats.BytesSkipped = written.Load(), skipped.Load()
	if err != nil {
		return stats, err
	}
	if err := dst.Sync(); err != nil {
		return stats, fmt.Errorf("%w: syncing target: %w", ErrIO, err)
	}
	stats.SourceDigest = formatDigest(e.opts.Algorithm, h.Sum(nil))
	return stats, nil
}

// readFull fills p from off. io.ReaderAt already promises a full read or an
// error, but a volume that shrank mid-copy returns io.EOF early, which must
// fail the copy rather than count as data.
func readFull(src io.ReaderAt, p []byte, off int64, role string) error {
	n, err := src.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w after %d of %d bytes", io.ErrUnexpectedEOF, n, len(p))
	}
	return fmt.Errorf("%w: reading %s at offset %d: %w", ErrIO, role, off, err)
}

func writeFull(dst io.WriterAt, p []byte, off int64, written *atomic.Int64) error {
	n, err := dst.WriteAt(p, off)
	written.Add(int64(n))
	if err == nil && n != len(p) {
		err = fmt.Errorf("%w: %d of %d bytes", io.ErrShortWrite, n, len(p))
	}
	if err != nil {
		return fmt.Errorf("%w: writing target at offset %d: %w", ErrIO, off, err)
	}
	return nil
}
