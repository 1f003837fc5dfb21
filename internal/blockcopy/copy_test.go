//go:build linux

package blockcopy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

func TestRunCopyDenseUnaligned(t *testing.T) {
	for _, algo := range []Algorithm{BLAKE3, SHA256} {
		t.Run(string(algo), func(t *testing.T) {
			src, dst := paths(t)
			// Neither a multiple of the chunk size nor of 4096.
			content := randomBytes(t, 5*testChunk+1234567%testChunk+3)
			writeDense(t, src, content)

			opts := testOptions
			opts.Algorithm = algo
			r := RunCopy(context.Background(), Request{Source: src, Target: dst, Options: opts})
			requireOK(t, r)
			requireSameContent(t, content, dst)
			want := blake3Digest(content)
			if algo == SHA256 {
				want = sha256Digest(content)
			}
			if r.SourceDigest != want || r.TargetDigest != want {
				t.Fatalf("digests %s / %s, want %s", r.SourceDigest, r.TargetDigest, want)
			}
			if r.BytesTotal != int64(len(content)) || r.BytesWritten != int64(len(content)) || r.BytesSkipped != 0 {
				t.Fatalf("total %d written %d skipped %d, want %d written and nothing skipped",
					r.BytesTotal, r.BytesWritten, r.BytesSkipped, len(content))
			}
			if r.Incomplete || !r.TargetZeroed {
				t.Fatalf("incomplete %t targetZeroed %t, want a complete copy into a fresh (zeroed) file", r.Incomplete, r.TargetZeroed)
			}
		})
	}
}

func TestRunCopySparseSkipsHolesAndKeepsDenseDigest(t *testing.T) {
	src, dst := paths(t)
	size := int64(12*testChunk + 4321)
	data := []Extent{{0, 10000}, {3*testChunk + 5, 70000}, {size - 100, 100}}
	content := writeSparse(t, src, size, data)

	r := RunCopy(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
	requireOK(t, r)
	requireSameContent(t, content, dst)
	if r.SourceDigest != blake3Digest(content) {
		t.Fatalf("source digest %s, want %s", r.SourceDigest, blake3Digest(content))
	}
	// Data extents are block granular, so at most one extra block per end.
	maxWritten := int64(10000+70000+100) + 6*ioAlignment
	if r.BytesWritten == 0 || r.BytesWritten > maxWritten || r.BytesWritten+r.BytesSkipped != size {
		t.Fatalf("written %d skipped %d of %d, want 1..%d written and the rest skipped", r.BytesWritten, r.BytesSkipped, size, maxWritten)
	}
	if got, limit := allocatedBytes(t, dst), allocatedBytes(t, src)+4*ioAlignment; got > limit {
		t.Fatalf("target allocates %d bytes, want at most %d: holes were filled", got, limit)
	}

	// The same bytes stored densely must hash the same.
	denseSrc := filepath.Join(t.TempDir(), "dense.img")
	writeDense(t, denseSrc, content)
	dense := RunCopy(context.Background(), Request{Source: denseSrc, Target: denseSrc + ".copy", Options: testOptions})
	requireOK(t, dense)
	if dense.SourceDigest != r.SourceDigest {
		t.Fatalf("dense copy digest %s differs from sparse copy digest %s", dense.SourceDigest, r.SourceDigest)
	}
	if dense.BytesSkipped == 0 {
		t.Fatal("dense copy of mostly zero data skipped nothing, want zero chunks skipped")
	}
}

func TestRunCopyAllZeros(t *testing.T) {
	size := int64(7*testChunk + 100)
	for name, write := range map[string]func(t *testing.T, path string){
		"written zeros": func(t *testing.T, path string) { writeDense(t, path, make([]byte, size)) },
		"one hole":      func(t *testing.T, path string) { writeSparse(t, path, size, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			src, dst := paths(t)
			write(t, src)
			r := RunCopy(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
			requireOK(t, r)
			requireSameContent(t, make([]byte, size), dst)
			if r.BytesWritten != 0 || r.BytesSkipped != size {
				t.Fatalf("written %d skipped %d, want everything skipped", r.BytesWritten, r.BytesSkipped)
			}
			if r.SourceDigest != blake3Digest(make([]byte, size)) {
				t.Fatalf("digest %s is not the digest of %d zeros", r.SourceDigest, size)
			}
		})
	}
}

func TestRunCopyIntoUsedLargerTargetWritesHoles(t *testing.T) {
	src, dst := paths(t)
	size := int64(4*testChunk + 77)
	content := writeSparse(t, src, size, []Extent{{testChunk, 5000}})
	junk := bytes.Repeat([]byte{0xff}, int(size)+testChunk)
	writeDense(t, dst, junk)

	r := RunCopy(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
	requireOK(t, r)
	if r.TargetZeroed || r.BytesSkipped != 0 || r.BytesWritten != size {
		t.Fatalf("targetZeroed %t written %d skipped %d, want all %d bytes written into a used target",
			r.TargetZeroed, r.BytesWritten, r.BytesSkipped, size)
	}
	got := readFile(t, dst)
	requireSameContent(t, content, dst)
	if !bytes.Equal(got[size:], junk[size:]) || len(got) != len(junk) {
		t.Fatal("bytes past the source size were changed")
	}
}

func TestRunCopyIntoExistingHoleTargetSkips(t *testing.T) {
	src, dst := paths(t)
	content := randomBytes(t, 3*testChunk)
	clear(content[testChunk : 2*testChunk])
	writeDense(t, src, content)
	writeSparse(t, dst, 10*testChunk, nil)

	r := RunCopy(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
	requireOK(t, r)
	requireSameContent(t, content, dst)
	if !r.TargetZeroed || r.BytesSkipped != testChunk {
		t.Fatalf("targetZeroed %t skipped %d, want the zero chunk skipped in a target that is one hole", r.TargetZeroed, r.BytesSkipped)
	}
}

func TestRunCopyRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "source.img")
	content := randomBytes(t, 3*testChunk+5)
	writeDense(t, src, content)
	small := filepath.Join(dir, "small.img")
	smallContent := randomBytes(t, 3*testChunk)
	writeDense(t, small, smallContent)
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	hardlink := filepath.Join(dir, "hardlink.img")
	if err := os.Link(src, hardlink); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, src, dst, wantInError string
	}{
		{"missing source flag", "", filepath.Join(dir, "x"), "--src is required"},
		{"missing target flag", src, "", "--dst is required"},
		{"source does not exist", filepath.Join(dir, "nope"), filepath.Join(dir, "x"), "--src " + filepath.Join(dir, "nope") + ": no such file"},
		{"source is a directory", dir, filepath.Join(dir, "x"), "neither a regular file nor a block device"},
		{"target too small", src, small, "smaller than the source"},
		{"same path", src, src, "same file or device"},
		{"target is a symlink to the source", src, link, "same file or device"},
		{"target is a hard link to the source", link, hardlink, "same file or device"},
		{"target directory missing", src, filepath.Join(dir, "no", "dir"), "no such file"},
		{"target is a directory", src, dir, "is a directory"},
		{"target is a character device", src, os.DevNull, "neither a regular file nor a block device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := RunCopy(context.Background(), Request{Source: tt.src, Target: tt.dst, Options: testOptions})
			if r.ExitCode != ExitBadInput || r.Status != StatusBadInput || !r.Incomplete {
				t.Fatalf("exit %d status %s incomplete %t, want bad input: %s", r.ExitCode, r.Status, r.Incomplete, r.Error)
			}
			if !strings.Contains(r.Error, tt.wantInError) {
				t.Fatalf("error %q does not say %q", r.Error, tt.wantInError)
			}
		})
	}
	requireUnchanged(t, src, content)
	requireUnchanged(t, small, smallContent)
}

func TestRunCopyCancelled(t *testing.T) {
	src, dst := paths(t)
	writeDense(t, src, randomBytes(t, 4*testChunk))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := RunCopy(ctx, Request{Source: src, Target: dst, Options: testOptions})
	if r.ExitCode != ExitCancelled || r.Status != StatusCancelled || !r.Incomplete || r.SourceDigest != "" {
		t.Fatalf("exit %d status %s incomplete %t digest %q, want an incomplete, cancelled copy",
			r.ExitCode, r.Status, r.Incomplete, r.SourceDigest)
	}
}

func TestRunCopyBadOptions(t *testing.T) {
	src, dst := paths(t)
	writeDense(t, src, randomBytes(t, 10))
	for _, opts := range []Options{{ChunkSize: 5000}, {Buffers: 1}, {Algorithm: "md5"}} {
		r := RunCopy(context.Background(), Request{Source: src, Target: dst, Options: opts})
		if r.ExitCode != ExitBadInput {
			t.Fatalf("options %+v: exit %d, want %d", opts, r.ExitCode, ExitBadInput)
		}
		if _, err := os.Stat(dst); err == nil {
			t.Fatalf("options %+v: target was created despite bad options", opts)
		}
	}
}

// directIO must report what the filesystem allows: O_DIRECT where it is
// accepted, a working buffered copy where it is refused (tmpfs before
// Linux 6.6, some FUSE filesystems).
func TestRunCopyReportsDirectIO(t *testing.T) {
	dirs := []string{t.TempDir()}
	if shm, err := os.MkdirTemp("/dev/shm", "blockcopy-test-"); err == nil {
		t.Cleanup(func() {
			if err := os.RemoveAll(shm); err != nil {
				t.Error(err)
			}
		})
		dirs = append(dirs, shm)
	}
	for _, dir := range dirs {
		src, dst := filepath.Join(dir, "source.img"), filepath.Join(dir, "target.img")
		content := randomBytes(t, 2*testChunk+100)
		writeDense(t, src, content)
		probe, err := os.OpenFile(src, os.O_RDONLY|syscall.O_DIRECT, 0)
		if err == nil {
			if err := probe.Close(); err != nil {
				t.Fatal(err)
			}
		}
		r := RunCopy(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
		requireOK(t, r)
		requireSameContent(t, content, dst)
		if r.DirectIO != (err == nil) {
			t.Fatalf("%s: directIO %t, but opening with O_DIRECT gave %v", dir, r.DirectIO, err)
		}
	}
}

// residentPages reports which 4 KiB pages of a file are in the page cache.
func residentPages(t *testing.T, path string) []bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(info.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Munmap(mem) }()
	pageSize := os.Getpagesize()
	vec := make([]byte, (len(mem)+pageSize-1)/pageSize)
	if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)),
		uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	resident := make([]bool, len(vec))
	for i, v := range vec {
		resident[i] = v&1 != 0
	}
	return resident
}

// Only the partial block at the end of an unaligned volume may use the page
// cache: the whole blocks of the last chunk are written and read back with
// O_DIRECT like every other chunk, so the read-back sees the disk.
func TestRunCopyLastChunkUsesDirectIO(t *testing.T) {
	if os.Getpagesize() != ioAlignment {
		t.Skip("page size is not 4096")
	}
	src, dst := paths(t)
	// The last chunk holds 5 whole blocks and 1000 bytes more.
	size := 2*testChunk + 5*ioAlignment + 1000
	content := randomBytes(t, size)
	writeDense(t, src, content)
	probe, err := os.OpenFile(src, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Skipf("no O_DIRECT here: %v", err)
	}
	if err := probe.Close(); err != nil {
		t.Fatal(err)
	}
	r := RunCopy(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
	requireOK(t, r)
	if !r.DirectIO {
		t.Skip("the filesystem refused O_DIRECT on I/O")
	}
	resident := residentPages(t, dst)
	for page := 2 * testChunk / ioAlignment; page < len(resident)-1; page++ {
		if resident[page] {
			t.Fatalf("page %d of the target's last chunk is in the page cache: it was read or written buffered", page)
		}
	}
	requireSameContent(t, content, dst)
}
