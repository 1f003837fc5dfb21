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
// disk holds and writes skip the page cache copy; the unaligned tail and
// everything on filesystems that refuse O_DIRECT use a buffered descriptor.
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

func (f *File) directFor(p []byte, off int64) *os.File {
	if f.direct == nil || f.directFailed.Load() || off%ioAlignment != 0 || !isAligned(p) {
		return nil
	}
	return f.direct
}

func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if d := f.directFor(p, off); d != nil {
		n, err := d.ReadAt(p, off)
		if n > 0 || !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		f.directFailed.Store(true)
	}
	return f.buffered.ReadAt(p, off)
}

func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if d := f.directFor(p, off); d != nil {
		n, err := d.WriteAt(p, off)
		if n > 0 || !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		f.directFailed.Store(true)
	}
	return f.buffered.WriteAt(p, off)
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
