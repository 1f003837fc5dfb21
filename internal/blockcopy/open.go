//go:build linux

package blockcopy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OpenSource opens a regular file or block device for reading. flag names
// the command-line flag the path came from, for error messages.
func OpenSource(flag, path string) (*File, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: %s is required", ErrBadInput, flag)
	}
	buffered, err := os.Open(path)
	if err != nil {
		return nil, openError(flag, path, err)
	}
	f, err := newFile(flag, path, buffered, os.O_RDONLY)
	if err != nil {
		_ = buffered.Close() // the reason it is unusable is the error to report
		return nil, err
	}
	return f, nil
}

// TargetState says how the target was prepared.
type TargetState struct {
	// Created is true when the target file did not exist before.
	Created bool
	// Zeroed is true when the target is known to read as zeros, so holes
	// and zero chunks need not be written.
	Zeroed bool
}

// OpenTarget opens or creates the copy target for src. A new or empty
// regular file is sized to src and counts as zeroed, as does an existing
// file that is one hole, and no other file, whatever assumeZeroed says; a
// block device counts as zeroed only when the caller vouches for it with
// assumeZeroed. A target smaller than src, or the same file or device as
// src, is refused before anything is written.
func OpenTarget(flag, path string, src *File, assumeZeroed bool) (*File, TargetState, error) {
	state := TargetState{Zeroed: assumeZeroed}
	if path == "" {
		return nil, state, fmt.Errorf("%w: %s is required", ErrBadInput, flag)
	}
	srcInfo, err := src.buffered.Stat()
	if err != nil {
		return nil, state, fmt.Errorf("%w: %s: %w", ErrIO, src.path, err)
	}
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		state.Created, state.Zeroed = true, true
	case err != nil:
		return nil, state, openError(flag, path, err)
	case sameVolume(srcInfo, info):
		return nil, state, badInput(flag, path, "is the same file or device as the source "+src.Path())
	}
	if info != nil {
		if why := overlap(srcInfo, info); why != "" {
			return nil, state, badInput(flag, path, why+"; writing it would change the source "+src.Path())
		}
	}

	openFlags := os.O_RDWR
	if state.Created {
		openFlags |= os.O_CREATE | os.O_EXCL
	} else if isBlockDevice(info) {
		// O_EXCL on a block device fails with EBUSY while it is mounted
		// or held by another exclusive opener.
		openFlags |= os.O_EXCL
	}
	buffered, err := os.OpenFile(path, openFlags, 0o600)
	if err != nil {
		return nil, state, openError(flag, path, err)
	}
	dst, err := newFile(flag, path, buffered, os.O_RDWR)
	if err != nil {
		_ = buffered.Close() // the reason it is unusable is the error to report
		return nil, state, err
	}
	if err := prepareTarget(flag, dst, src, &state); err != nil {
		dst.release()
		return nil, state, err
	}
	return dst, state, nil
}

func prepareTarget(flag string, dst, src *File, state *TargetState) error {
	if !dst.device && dst.size == 0 {
		state.Zeroed = true
		if err := dst.buffered.Truncate(src.size); err != nil {
			return fmt.Errorf("%w: %s %s: sizing to %d bytes: %w", ErrIO, flag, dst.path, src.size, err)
		}
		dst.size = src.size
		return reserveSpace(flag, dst, src)
	}
	if dst.size < src.size {
		return badInput(flag, dst.path, fmt.Sprintf("is %d bytes, smaller than the source's %d bytes", dst.size, src.size))
	}
	if !dst.device {
		// A file is checked whatever the caller vouches: its extents say
		// whether it reads as zeros, and trusting a wrong claim would skip
		// writing zeros over its old data and fail only at the read-back.
		extents, err := dst.DataExtents()
		if err != nil {
			return fmt.Errorf("%w: %s %w", ErrIO, flag, err)
		}
		state.Zeroed = len(extents) == 0
	}
	return nil
}

// reserveSpace allocates the source's data extents in a fresh target so that
// a full disk fails the copy up front rather than half-way, while holes stay
// holes. Filesystems without fallocate simply skip the reservation.
func reserveSpace(flag string, dst, src *File) error {
	extents, err := src.DataExtents()
	if err != nil {
		return fmt.Errorf("%w: --src %w", ErrIO, err)
	}
	fd := int(dst.buffered.Fd())
	for _, e := range normalizeExtents(src.size, extents) {
		err := unix.Fallocate(fd, 0, e.Offset, e.Length)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %s %s: reserving %d bytes at offset %d: %w", ErrIO, flag, dst.path, e.Length, e.Offset, err)
		}
	}
	return nil
}

// newFile completes an open file: checks its type, measures it and opens a
// second, O_DIRECT descriptor when the filesystem allows.
func newFile(flag, path string, buffered *os.File, mode int) (*File, error) {
	info, err := buffered.Stat()
	if err != nil {
		return nil, openError(flag, path, err)
	}
	f := &File{path: path, buffered: buffered, device: isBlockDevice(info)}
	switch {
	case info.Mode().IsRegular():
		f.size = info.Size()
	case f.device:
		size, err := blockDeviceSize(buffered)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: reading device size: %w", ErrIO, flag, path, err)
		}
		f.size = size
	default:
		return nil, badInput(flag, path, "is neither a regular file nor a block device")
	}
	// Reopening through /proc/self/fd guarantees the second descriptor is
	// the same inode even if the path is replaced in between. EINVAL means
	// the filesystem refuses O_DIRECT (older tmpfs, some FUSE), and then
	// buffered I/O is all there is.
	direct, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", buffered.Fd()), mode|unix.O_DIRECT, 0)
	if err == nil {
		f.direct = direct
	}
	return f, nil
}

func blockDeviceSize(f *os.File) (int64, error) {
	var size uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size)))
	if errno != 0 {
		return 0, errno
	}
	return int64(size), nil
}

func isBlockDevice(info os.FileInfo) bool {
	return info.Mode()&fs.ModeDevice != 0 && info.Mode()&fs.ModeCharDevice == 0
}

// sameVolume compares device and inode, which os.Stat takes from the final
// target of any symlinks, and for block devices also the device number, as
// two device nodes can name one disk.
func sameVolume(a, b os.FileInfo) bool {
	if os.SameFile(a, b) {
		return true
	}
	sa, okA := a.Sys().(*syscall.Stat_t)
	sb, okB := b.Sys().(*syscall.Stat_t)
	return okA && okB && isBlockDevice(a) && isBlockDevice(b) && sa.Rdev == sb.Rdev
}

func openError(flag, path string, err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		err = pathErr.Err // the path is already in the message
	}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission),
		errors.Is(err, unix.EBUSY), errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTDIR):
		return badInput(flag, path, err.Error())
	}
	return fmt.Errorf("%w: %s %s: %w", ErrIO, flag, path, err)
}
