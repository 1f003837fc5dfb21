//go:build linux

package blockcopy

// Engine copies, digests and compares volumes with one fixed set of
// buffers, so that memory stays flat across a copy and its read-back. An
// Engine runs one operation at a time.
type Engine struct {
	opts   Options
	chunks []*chunk
	// zeros is a chunk of zeros: hashed for holes, written for holes on
	// targets that do not read as zeros, and compared against to find
	// zero chunks.
	zeros []byte
	// zeroTrees lets the read-back reuse the hashing of the copy's holes.
	zeroTrees *zeroSubtrees
}

// ioWorkers is how many reads or writes are in flight at once.
const ioWorkers = 2

// NewEngine validates opts and allocates the buffers.
func NewEngine(opts Options) (*Engine, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{
		opts:      opts,
		chunks:    make([]*chunk, opts.Buffers),
		zeros:     alignedBuffer(opts.ChunkSize),
		zeroTrees: newZeroSubtrees(),
	}
	for i := range e.chunks {
		e.chunks[i] = &chunk{buf: alignedBuffer(opts.ChunkSize)}
	}
	return e, nil
}

// pairedChunks returns chunks with two buffers each, for reading two
// volumes side by side, made from the same memory as the single ones.
func (e *Engine) pairedChunks() []*chunk {
	half := len(e.chunks) / 2
	pairs := make([]*chunk, half)
	for i := range pairs {
		pairs[i] = &chunk{buf: e.chunks[i].buf, other: e.chunks[half+i].buf}
	}
	return pairs
}

// absorb feeds a segment to h, whose bytes are in buf if it is data, and
// reports whether it reads as zeros. Holes and all-zero data take the zero
// path, whose work the read-back can reuse.
func (e *Engine) absorb(h digester, c *chunk, buf []byte) (zero bool) {
	if c.Data && !isZero(buf[:c.Length], e.zeros) {
		h.write(buf[:c.Length])
		return false
	}
	h.writeZeros(c.Length)
	return true
}
