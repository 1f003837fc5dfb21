//go:build linux

package blockcopy

import "fmt"

// Defaults keep the working set at DefaultBuffers × DefaultChunkSize plus one
// chunk of zeros (28 MiB): enough chunks in flight for reading, hashing and
// writing to overlap, and far below the 64 MiB the copy job is allowed.
const (
	DefaultChunkSize = 4 << 20
	DefaultBuffers   = 6
	minChunkSize     = 64 << 10
	maxChunkSize     = 64 << 20
	minBuffers       = 2
	maxBuffers       = 16
)

// Options tune the engine; zero values mean the defaults.
type Options struct {
	Algorithm Algorithm
	ChunkSize int
	Buffers   int
	Progress  *Progress
}

func (o Options) withDefaults() (Options, error) {
	if o.Algorithm == "" {
		o.Algorithm = BLAKE3
	}
	if _, err := ParseAlgorithm(string(o.Algorithm)); err != nil {
		return o, err
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.Buffers == 0 {
		o.Buffers = DefaultBuffers
	}
	if o.ChunkSize < minChunkSize || o.ChunkSize > maxChunkSize || o.ChunkSize%ioAlignment != 0 {
		return o, fmt.Errorf("%w: --chunk-size %d: want a multiple of %d between %d and %d",
			ErrBadInput, o.ChunkSize, ioAlignment, minChunkSize, maxChunkSize)
	}
	if o.Buffers < minBuffers || o.Buffers > maxBuffers {
		return o, fmt.Errorf("%w: --buffers %d: want %d to %d", ErrBadInput, o.Buffers, minBuffers, maxBuffers)
	}
	return o, nil
}
