//go:build linux

package blockcopy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
)

// memVolume is an in-memory Source and Sink whose failures are chosen by the
// test: the engine's error paths run for real, only the storage is fake.
type memVolume struct {
	data      []byte
	extents   []Extent // nil means all data
	failRead  func(off int64) error
	shortRead func(off int64) bool
	writeAt   func(p []byte, off int64) (int, error)
	syncErr   error
	reads     atomic.Int32
}

func (m *memVolume) Size() int64 { return int64(len(m.data)) }

func (m *memVolume) DataExtents() ([]Extent, error) {
	if m.extents == nil {
		return []Extent{{0, m.Size()}}, nil
	}
	return m.extents, nil
}

func (m *memVolume) ReadAt(p []byte, off int64) (int, error) {
	m.reads.Add(1)
	if m.failRead != nil {
		if err := m.failRead(off); err != nil {
			return 0, err
		}
	}
	if m.shortRead != nil && m.shortRead(off) {
		return copy(p[:len(p)/2], m.data[off:]), io.EOF
	}
	return copy(p, m.data[off:]), nil
}

func (m *memVolume) WriteAt(p []byte, off int64) (int, error) {
	if m.writeAt != nil {
		return m.writeAt(p, off)
	}
	return copy(m.data[off:], p), nil
}

func (m *memVolume) Sync() error { return m.syncErr }

func newTestEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := NewEngine(testOptions)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func newMemPair(t *testing.T, chunks int) (src, dst *memVolume) {
	return &memVolume{data: randomBytes(t, chunks*testChunk)}, &memVolume{data: make([]byte, chunks*testChunk)}
}

func TestCopyInMemory(t *testing.T) {
	src, dst := newMemPair(t, 8)
	stats, err := newTestEngine(t).Copy(context.Background(), src, dst, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src.data, dst.data) || stats.SourceDigest != blake3Digest(src.data) || stats.BytesWritten != src.Size() {
		t.Fatalf("copy is not faithful: equal %t digest %s written %d", bytes.Equal(src.data, dst.data), stats.SourceDigest, stats.BytesWritten)
	}
}

func TestCopyReportsReadErrorMidCopy(t *testing.T) {
	src, dst := newMemPair(t, 8)
	failAt := int64(5 * testChunk)
	src.failRead = func(off int64) error {
		if off == failAt {
			return syscall.EIO
		}
		return nil
	}
	stats, err := newTestEngine(t).Copy(context.Background(), src, dst, false)
	if !errors.Is(err, ErrIO) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v, want an I/O error wrapping EIO", err)
	}
	if stats.SourceDigest != "" || stats.BytesWritten > failAt {
		t.Fatalf("digest %q written %d: a failed copy must not look finished or write past the failure", stats.SourceDigest, stats.BytesWritten)
	}
	if code, _ := Classify(err); code != ExitIO {
		t.Fatalf("exit code %d, want %d", code, ExitIO)
	}
}

func TestCopyReportsSourceEndingEarly(t *testing.T) {
	src, dst := newMemPair(t, 4)
	src.shortRead = func(off int64) bool { return off == 2*testChunk }
	_, err := newTestEngine(t).Copy(context.Background(), src, dst, false)
	if !errors.Is(err, ErrIO) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want an I/O error wrapping io.ErrUnexpectedEOF", err)
	}
}

func TestCopyReportsShortWrite(t *testing.T) {
	src, dst := newMemPair(t, 6)
	dst.writeAt = func(p []byte, off int64) (int, error) {
		if off == 3*testChunk {
			return copy(dst.data[off:], p[:len(p)-1]), nil
		}
		return copy(dst.data[off:], p), nil
	}
	stats, err := newTestEngine(t).Copy(context.Background(), src, dst, false)
	if !errors.Is(err, ErrIO) || !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("err = %v, want an I/O error wrapping io.ErrShortWrite", err)
	}
	if stats.SourceDigest != "" {
		t.Fatal("a copy with a short write produced a digest")
	}
}

func TestCopyReportsWriteAndSyncErrors(t *testing.T) {
	src, dst := newMemPair(t, 2)
	dst.writeAt = func([]byte, int64) (int, error) { return 0, syscall.ENOSPC }
	if _, err := newTestEngine(t).Copy(context.Background(), src, dst, false); !errors.Is(err, ErrIO) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write failure: err = %v, want an I/O error wrapping ENOSPC", err)
	}

	src, dst = newMemPair(t, 2)
	dst.syncErr = syscall.EIO
	if _, err := newTestEngine(t).Copy(context.Background(), src, dst, false); !errors.Is(err, ErrIO) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync failure: err = %v, want an I/O error wrapping EIO", err)
	}
}

func TestCopyStopsPromptlyWhenCancelled(t *testing.T) {
	const chunks = 64
	src, dst := newMemPair(t, chunks)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src.failRead = func(off int64) error {
		if off == 3*testChunk {
			cancel()
		}
		return nil
	}
	stats, err := newTestEngine(t).Copy(ctx, src, dst, false)
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrCancelled", err)
	}
	// The pipeline may finish the few chunks already in flight, no more.
	if limit := 3 + testOptions.Buffers + 1; src.reads.Load() > int32(limit) {
		t.Fatalf("%d chunks read after cancellation at the 4th, want at most %d", src.reads.Load(), limit)
	}
	if stats.SourceDigest != "" || stats.BytesWritten >= src.Size() {
		t.Fatalf("digest %q written %d: a cancelled copy must be incomplete", stats.SourceDigest, stats.BytesWritten)
	}
	if code, _ := Classify(err); code != ExitCancelled {
		t.Fatalf("exit code %d, want %d", code, ExitCancelled)
	}
}

func TestDigestHashesHolesAsZeros(t *testing.T) {
	content := make([]byte, 5*testChunk+10)
	copy(content[2*testChunk:], randomBytes(t, 100))
	sparse := &memVolume{data: content, extents: []Extent{{2 * testChunk, 100}}}
	got, err := newTestEngine(t).Digest(context.Background(), sparse, sparse.Size())
	if err != nil {
		t.Fatal(err)
	}
	if got != blake3Digest(content) {
		t.Fatalf("digest %s, want %s", got, blake3Digest(content))
	}
	if sparse.reads.Load() != 1 {
		t.Fatalf("%d reads, want 1: holes must not be read", sparse.reads.Load())
	}
}
