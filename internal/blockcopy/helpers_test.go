//go:build linux

package blockcopy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"lukechampine.com/blake3"
)

// testChunk is small so that files of a few hundred KiB span many chunks.
const testChunk = 64 << 10

var testOptions = Options{ChunkSize: testChunk, Buffers: 3}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// writeDense writes content to a new file byte for byte, zeros included.
func writeDense(t testing.TB, path string, content []byte) {
	t.Helper()
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeSparse creates a file of the given size that holds data only at the
// given extents and is a hole elsewhere. It returns the file's content.
func writeSparse(t testing.TB, path string, size int64, data []Extent) []byte {
	t.Helper()
	content := make([]byte, size)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, e := range data {
		part := randomBytes(t, int(e.Length))
		copy(content[e.Offset:], part)
		if _, err := f.WriteAt(part, e.Offset); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return content
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func allocatedBytes(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func blake3Digest(content []byte) string {
	sum := blake3.Sum256(content)
	return "blake3:" + hex.EncodeToString(sum[:])
}

func sha256Digest(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func paths(t testing.TB) (src, dst string) {
	dir := t.TempDir()
	return filepath.Join(dir, "source.img"), filepath.Join(dir, "target.img")
}

func requireOK(t testing.TB, r Result) {
	t.Helper()
	if r.Status != StatusOK || r.ExitCode != ExitOK || r.Error != "" {
		t.Fatalf("%s failed: status %s, exit %d: %s", r.Command, r.Status, r.ExitCode, r.Error)
	}
}

func requireSameContent(t testing.TB, want []byte, path string) {
	t.Helper()
	got := readFile(t, path)
	if len(got) < len(want) {
		t.Fatalf("%s is %d bytes, want at least %d", path, len(got), len(want))
	}
	if i := firstDifference(want, got[:len(want)]); i != len(want) {
		t.Fatalf("%s differs from the source at byte %d", path, i)
	}
}

func requireUnchanged(t testing.TB, path string, before []byte) {
	t.Helper()
	if !bytes.Equal(readFile(t, path), before) {
		t.Fatalf("%s was modified", path)
	}
}
