//go:build linux

package blockcopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// Mismatch locates the first difference between two volumes.
type Mismatch struct {
	// ChunkOffset is the offset of the first differing chunk on the grid
	// of Options.ChunkSize, the unit a caller would re-copy.
	ChunkOffset int64
	// ByteOffset is the offset of the first differing byte.
	ByteOffset int64
}

func (m *Mismatch) Error() string {
	return fmt.Sprintf("volumes differ in the chunk at offset %d (first differing byte at offset %d)",
		m.ChunkOffset, m.ByteOffset)
}

// CompareStats describes two volumes found identical over the compared length.
type CompareStats struct {
	SourceDigest string
	TargetDigest string
	BytesTotal   int64
}

// Compare reads the first length bytes of both volumes side by side and
// stops at the first difference, returning an error that wraps ErrMismatch
// and a *Mismatch. Ranges that are holes in both are equal without reading.
func (e *Engine) Compare(ctx context.Context, src, dst Source, length int64) (CompareStats, error) {
	stats := CompareStats{BytesTotal: length}
	srcExtents, err := src.DataExtents()
	if err != nil {
		return stats, fmt.Errorf("%w: listing source data extents: %w", ErrIO, err)
	}
	dstExtents, err := dst.DataExtents()
	if err != nil {
		return stats, fmt.Errorf("%w: listing target data extents: %w", ErrIO, err)
	}
	progress := e.opts.Progress
	srcHash := e.opts.Algorithm.newDigester(e.zeros, e.zeroTrees)
	dstHash := e.opts.Algorithm.newDigester(e.zeros, e.zeroTrees)
	chunkSize := int64(e.opts.ChunkSize)
	progress.begin(PhaseCompare, length)

	read := func(c *chunk) error {
		if !c.Data {
			return nil
		}
		if err := readFull(src, c.data(), c.Offset, "source"); err != nil {
			return err
		}
		return readFull(dst, c.otherData(), c.Offset, "target")
	}
	// Comparing and hashing the source share a stage and hashing the target
	// gets its own, so both digests are computed on two cores at once.
	compareAndHashSource := func(c *chunk) error {
		if a, b := c.data(), c.otherData(); c.Data && !bytes.Equal(a, b) {
			first := int64(firstDifference(a, b))
			return fmt.Errorf("%w: %w", ErrMismatch, &Mismatch{
				ChunkOffset: (c.Offset + first) / chunkSize * chunkSize,
				ByteOffset:  c.Offset + first,
			})
		}
		e.absorb(srcHash, c, c.buf)
		return nil
	}
	hashTarget := func(c *chunk) error {
		defer progress.advance(c.Length)
		e.absorb(dstHash, c, c.other)
		return nil
	}

	segments := planSegments(length, chunkSize, append(srcExtents, dstExtents...))
	err = runPipeline(ctx, segments, e.pairedChunks(),
		stage{work: read, workers: ioWorkers}, stage{work: compareAndHashSource}, stage{work: hashTarget})
	if err != nil {
		return stats, err
	}
	stats.SourceDigest = formatDigest(e.opts.Algorithm, srcHash.Sum(nil))
	stats.TargetDigest = formatDigest(e.opts.Algorithm, dstHash.Sum(nil))
	return stats, nil
}

func firstDifference(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// AsMismatch returns the location of the difference err reports, if any.
func AsMismatch(err error) (*Mismatch, bool) {
	var m *Mismatch
	ok := errors.As(err, &m)
	return m, ok
}
