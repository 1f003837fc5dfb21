//go:build linux

package blockcopy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysfsRoot is where the kernel describes block devices; tests point it at a fixture tree.
var sysfsRoot = "/sys"

// blockDevice is what sysfs says of a block device: the whole disk it belongs to, the sector
// range it covers on that disk, and, for a loop device, the file behind it.
type blockDevice struct {
	disk        string // "major:minor" of the whole disk
	partition   bool
	start, size int64 // in 512-byte sectors, on disk
	backingFile string
}

// overlap explains why writing the target would change the source although they are not
// the same file or device node: a partition and its disk, two overlapping partitions, or a
// loop device and the file behind it. It returns "" when they are independent, or when
// sysfs cannot tell (no sysfs, an unusual device), in which case nothing is refused.
func overlap(src, dst os.FileInfo) string {
	a, aDev := describe(src)
	b, bDev := describe(dst)
	switch {
	case aDev && bDev && a.disk == b.disk && (!a.partition || !b.partition):
		return "is on the same disk as the source (a disk and one of its partitions)"
	case aDev && bDev && a.disk == b.disk && a.start < b.start+b.size && b.start < a.start+a.size:
		return "overlaps the source on their disk (partitions sharing sectors)"
	case aDev && bDev && a.backingFile != "" && sameFileAt(a.backingFile, b.backingFile):
		return "is a loop device over the same file as the source, " + a.backingFile
	case aDev && !bDev && sameFileInfoAt(a.backingFile, dst):
		return "is the file behind the source loop device"
	case bDev && !aDev && sameFileInfoAt(b.backingFile, src):
		return "is a loop device over the source file"
	}
	return ""
}

// describe reads sysfs for a block device; ok is false for anything else or when sysfs
// cannot be read.
func describe(info os.FileInfo) (blockDevice, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || !isBlockDevice(info) {
		return blockDevice{}, false
	}
	id := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))) //nolint:unconvert // Rdev's type differs between architectures
	dir := filepath.Join(sysfsRoot, "dev", "block", id)
	d := blockDevice{disk: id}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		// dev/block/M:m links into the device tree, where a partition's folder sits in its
		// disk's: resolve the link before going up.
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return blockDevice{}, false
		}
		disk, err := readSysfs(filepath.Join(filepath.Dir(real), "dev"))
		start, errStart := readSysfsInt(filepath.Join(dir, "start"))
		size, errSize := readSysfsInt(filepath.Join(dir, "size"))
		if err != nil || errStart != nil || errSize != nil {
			return blockDevice{}, false
		}
		d.disk, d.partition, d.start, d.size = disk, true, start, size
	} else if !errors.Is(err, fs.ErrNotExist) {
		return blockDevice{}, false
	}
	if backing, err := readSysfs(filepath.Join(dir, "loop", "backing_file")); err == nil {
		d.backingFile = backing
	}
	return d, true
}

func readSysfs(path string) (string, error) {
	data, err := os.ReadFile(path)
	return strings.TrimSpace(string(data)), err
}

func readSysfsInt(path string) (int64, error) {
	s, err := readSysfs(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(s, 10, 64)
}

func sameFileAt(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ia, errA := os.Stat(a)
	ib, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(ia, ib)
}

func sameFileInfoAt(path string, info os.FileInfo) bool {
	if path == "" {
		return false
	}
	ip, err := os.Stat(path)
	return err == nil && os.SameFile(ip, info)
}
