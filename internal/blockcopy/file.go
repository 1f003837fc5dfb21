//go:build linux

package blockcopy

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// File is an open regular file or block device. Aligned I/O goes through an
// O_DIRECT descriptor when the filesystem accepts one, so reads see what the
// disk holds and writes skip the page cache copy; the partial block at the
// end of a volume whose size is not a multiple of 4096, and everything on
// filesystems that refuse O_DIRECT, use a buffered descriptor.
type File struct {
	path     string
	buffered *os.File
	direct   *os.File // nil when O_DIRECT could not be opened
	// directFailed is set when the kernel accepted O_DIRECT at open time
	// but refused it on I/O (EINVAL); the rest of the run is buffered.
	directFailed atomic.Bool
	size         int64
	device       bool
}

// Path is the path the file was opened by.
func (f *File) Path() string { return f.path }

// Size is the size of the regular file or block device.
func (f *File) Size() int64 { return f.size }

// DirectIO reports whether aligned I/O bypassed the page cache throughout.
func (f *File) DirectIO() bool { return f.direct != nil && !f.directFailed.Load() }

// directLen is how many bytes at the start of p can go through the O_DIRECT
// descriptor: all whole blocks of an aligned request, so that only the
// partial block at the end of an unaligned volume uses the page cache, not
// the whole last chunk. It is 0 when direct I/O is off or p cannot use it.
func (f *File) directLen(p []byte, off int64) int {
	if f.direct == nil || f.directFailed.Load() || off%ioAlignment != 0 || len(p) < ioAlignment {
		return 0
	}
	head := len(p) / ioAlignment * ioAlignment
	if !isAligned(p[:head]) {
		return 0
	}
	return head
}

func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.splitIO(p, off, f.direct.ReadAt, f.buffered.ReadAt)
}

func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.splitIO(p, off, f.direct.WriteAt, f.buffered.WriteAt)
}

// splitIO does the aligned head of p with direct and the rest, a partial
// block, with buffered. If the kernel refuses O_DIRECT on the first I/O
// (EINVAL) everything is buffered from then on.
func (f *File) splitIO(p []byte, off int64, direct, buffered func([]byte, int64) (int, error)) (int, error) {
	head := f.directLen(p, off)
	if head > 0 {
		n, err := direct(p[:head], off)
		switch {
		case n == 0 && errors.Is(err, unix.EINVAL):
			f.directFailed.Store(true)
		case err != nil || n < head || head == len(p):
			return n, err
		default:
			m, err := buffered(p[head:], off+int64(head))
			return n + m, err
		}
	}
	return buffered(p, off)
}

// Sync flushes data and metadata. One fsync covers writes made through
// either descriptor because both refer to the same inode.
func (f *File) Sync() error { return f.buffered.Sync() }

// DropCache asks the kernel to forget cached pages of the file so that a
// later buffered read of the tail comes from the disk. It is advice: the
// verification is still correct, only less strict, if the kernel ignores it.
func (f *File) DropCache() {
	_ = unix.Fadvise(int(f.buffered.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// DataExtents asks the filesystem for the ranges holding data with
// SEEK_DATA/SEEK_HOLE. Filesystems without support, and block devices,
// report the whole volume as data.
func (f *File) DataExtents() ([]Extent, error) {
	var extents []Extent
	for off := int64(0); off < f.size; {
		start, err := f.buffered.Seek(off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO): // no data after off
			return extents, nil
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
			return []Extent{{Offset: 0, Length: f.size}}, nil
		case err != nil:
			return nil, fmt.Errorf("SEEK_DATA on %s: %w", f.path, err)
		}
		end, err := f.buffered.Seek(start, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("SEEK_HOLE on %s: %w", f.path, err)
		}
		if start >= f.size {
			break
		}
		end = min(end, f.size)
		extents = append(extents, Extent{Offset: start, Length: end - start})
		off = end
	}
	return extents, nil
}

// release closes the file where a close error cannot change the outcome:
// the target's data is proven by Sync and the read-back, not by close.
func (f *File) release() { _ = f.Close() }

// Close closes both descriptors.
func (f *File) Close() error {
	err := f.buffered.Close()
	if f.direct != nil {
		err = errors.Join(err, f.direct.Close())
	}
	return err
}
