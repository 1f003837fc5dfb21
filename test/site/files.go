package site

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// layout places the site's files: volumes/<pv>.img, snapshots/<content>.img and
// pods/<uid>/ (logs and termination messages).
type layout struct{ root string }

func (l layout) volumes() string   { return filepath.Join(l.root, "volumes") }
func (l layout) snapshots() string { return filepath.Join(l.root, "snapshots") }
func (l layout) pods() string      { return filepath.Join(l.root, "pods") }

// volume is the backing file of the volume whose CSI volume handle is handle.
func (l layout) volume(handle string) string { return filepath.Join(l.volumes(), handle+".img") }

// snapshot is the file of the snapshot whose CSI snapshot handle is handle.
func (l layout) snapshot(handle string) string {
	return filepath.Join(l.snapshots(), handle+".img")
}

// pod is the folder of one pod's logs and termination messages.
func (l layout) pod(uid string) string { return filepath.Join(l.pods(), uid) }

func (l layout) create() error {
	for _, dir := range []string{l.volumes(), l.snapshots(), l.pods()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("site: %w", err)
		}
	}
	return nil
}

// list returns the regular files under the root, relative to it, sorted.
func (l layout) list() ([]string, error) {
	var files []string
	err := filepath.WalkDir(l.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(l.root, path)
		if err != nil {
			return err
		}
		files = append(files, rel)
		return nil
	})
	sort.Strings(files)
	return files, err
}

// createSparse makes path a file of size bytes that is all hole, unless it exists already.
func createSparse(path string, size int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	return publish(path, func(f *os.File) error { return f.Truncate(size) })
}

// copySparse makes dst a copy of src, size bytes long (src's size when size is smaller), unless
// dst exists already. Only src's data extents are copied, with copy_file_range, so holes stay
// holes and a mostly empty gigabyte copies in a moment. With corrupt, the byte in the middle of
// the copy is flipped before dst appears, so a retry never flips it back.
func copySparse(src, dst string, size int64, corrupt bool) error {
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	size = max(size, info.Size())
	return publish(dst, func(out *os.File) error {
		if err := out.Truncate(size); err != nil {
			return err
		}
		if err := copyExtents(in, out, info.Size()); err != nil {
			return err
		}
		if corrupt {
			return flipMiddleByte(out)
		}
		return nil
	})
}

// copyExtents copies the data extents of in's first n bytes to the same offsets in out.
func copyExtents(in, out *os.File, n int64) error {
	fd := int(in.Fd())
	for offset := int64(0); offset < n; {
		start, err := unix.Seek(fd, offset, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("finding data in %s: %w", in.Name(), err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("finding a hole in %s: %w", in.Name(), err)
		}
		end = min(end, n)
		if start >= end {
			return nil
		}
		if _, err := in.Seek(start, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(start, io.SeekStart); err != nil {
			return err
		}
		// *os.File to *os.File through a LimitedReader is copy_file_range in the kernel.
		if _, err := io.Copy(out, io.LimitReader(in, end-start)); err != nil {
			return fmt.Errorf("copying %s to %s: %w", in.Name(), out.Name(), err)
		}
		offset = end
	}
	return nil
}

// publish writes a file through fill under a temporary name and renames it to path, so a
// file under its final name is always complete.
func publish(path string, fill func(*os.File) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	err = fill(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// removeFile removes a file the site made; one that is already gone is fine.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// flipMiddleByte inverts the byte in the middle of f.
func flipMiddleByte(f *os.File) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if info.Size() == 0 {
		return fmt.Errorf("%s is empty: no byte to flip", f.Name())
	}
	b := make([]byte, 1)
	at := info.Size() / 2
	if _, err := f.ReadAt(b, at); err != nil {
		return err
	}
	b[0] ^= 0xff
	_, err = f.WriteAt(b, at)
	return err
}
