//go:build linux

package blockcopy

import (
	"math/bits"
	"sync"

	"lukechampine.com/blake3/guts"
)

// blake3Hasher is unkeyed BLAKE3 with a 256-bit output, driving the SIMD
// compression functions of lukechampine.com/blake3/guts with the same tree
// walk as that package's Hasher, so its digests are identical. It exists to
// hash runs of zeros by subtree: the chaining value of an all-zero subtree
// depends only on its position, so the read-back of a sparse target reuses
// what the copy computed for the source's holes instead of hashing gigabytes
// of zeros a second time.
type blake3Hasher struct {
	// stack holds the chaining values of completed subtrees, at most one
	// per height; bit i of counter says whether stack[i] is in use.
	stack   [64][8]uint32
	counter uint64 // chunks absorbed into the stack
	// buf holds the last, possibly partial chunk, which is compressed only
	// once more input arrives because the final chunk is compressed
	// differently, as the root.
	buf       [guts.ChunkSize]byte
	buflen    int
	zeros     []byte
	zeroTrees *zeroSubtrees
}

func newBLAKE3Hasher(zeros []byte, zeroTrees *zeroSubtrees) *blake3Hasher {
	return &blake3Hasher{zeros: zeros, zeroTrees: zeroTrees}
}

func (h *blake3Hasher) write(p []byte) { h.absorb(p, false) }

// writeZeros hashes n zero bytes; n is at most len(zeros).
func (h *blake3Hasher) writeZeros(n int64) { h.absorb(h.zeros[:n], true) }

func (h *blake3Hasher) absorb(p []byte, zero bool) {
	if h.buflen > 0 {
		n := copy(h.buf[h.buflen:], p)
		h.buflen += n
		p = p[n:]
	}
	if h.buflen == guts.ChunkSize && len(p) > 0 {
		h.push(guts.ChainingValue(guts.CompressChunk(h.buf[:], &guts.IV, h.counter, 0)), 0)
		h.buflen = 0
	}
	if len(p) > guts.ChunkSize {
		// All whole chunks but the last, which may end the input.
		whole := (len(p) - 1) / guts.ChunkSize
		for _, height := range guts.Eigentrees(h.counter, uint64(whole)) {
			size := guts.ChunkSize << height
			h.push(h.subtree(p[:size], height, zero), height)
			p = p[size:]
		}
	}
	h.buflen += copy(h.buf[h.buflen:], p)
}

func (h *blake3Hasher) subtree(p []byte, height int, zero bool) [8]uint32 {
	compute := func() [8]uint32 {
		return guts.ChainingValue(guts.CompressEigentree(p, &guts.IV, h.counter, 0))
	}
	if !zero || h.zeroTrees == nil {
		return compute()
	}
	return h.zeroTrees.get(h.counter, height, compute)
}

// push adds the chaining value of a subtree of 2^height chunks starting at
// counter, merging it with completed subtrees of equal height.
func (h *blake3Hasher) push(cv [8]uint32, height int) {
	i := height
	for ; h.counter&(1<<i) != 0; i++ {
		cv = guts.ChainingValue(guts.ParentNode(h.stack[i], cv, &guts.IV, 0))
	}
	h.stack[i] = cv
	h.counter += 1 << height
}

// Sum appends the digest; it does not change the state.
func (h *blake3Hasher) Sum(b []byte) []byte {
	n := guts.CompressChunk(h.buf[:h.buflen], &guts.IV, h.counter, 0)
	for i := bits.TrailingZeros64(h.counter); i < bits.Len64(h.counter); i++ {
		if h.counter&(1<<i) != 0 {
			n = guts.ParentNode(h.stack[i], guts.ChainingValue(n), &guts.IV, 0)
		}
	}
	n.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(n))
	return append(b, out[:32]...)
}

// zeroSubtrees remembers chaining values of all-zero subtrees by position.
// It is bounded, to about 8 MiB: once full it stops remembering and hashing
// zeros costs what it would without it. At the default chunk size the bound
// covers about 85 GiB of holes.
type zeroSubtrees struct {
	mu  sync.Mutex
	cvs map[zeroSubtree][8]uint32
}

type zeroSubtree struct {
	counter uint64
	height  int
}

const (
	maxZeroSubtrees = 1 << 17
	// Subtrees below 64 KiB are cheap to hash and would crowd the cache.
	minCachedHeight = 6
)

func newZeroSubtrees() *zeroSubtrees {
	return &zeroSubtrees{cvs: make(map[zeroSubtree][8]uint32)}
}

func (z *zeroSubtrees) get(counter uint64, height int, compute func() [8]uint32) [8]uint32 {
	if height < minCachedHeight {
		return compute()
	}
	key := zeroSubtree{counter, height}
	z.mu.Lock()
	cv, ok := z.cvs[key]
	z.mu.Unlock()
	if ok {
		return cv
	}
	cv = compute()
	z.mu.Lock()
	if len(z.cvs) < maxZeroSubtrees {
		z.cvs[key] = cv
	}
	z.mu.Unlock()
	return cv
}
