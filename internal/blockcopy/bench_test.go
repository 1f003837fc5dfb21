//go:build linux

package blockcopy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Benchmarks of the whole copy (copy, sync, read-back, compare) on small
// files with the default options; hack/bench-copy.sh measures large ones
// against dd.
func benchmarkRunCopy(b *testing.B, size int64, data []Extent) {
	dir := b.TempDir()
	src, dst := filepath.Join(dir, "source.img"), filepath.Join(dir, "target.img")
	writeSparse(b, src, size, data)
	b.SetBytes(size)
	for b.Loop() {
		r := RunCopy(context.Background(), Request{Source: src, Target: dst})
		requireOK(b, r)
		if err := os.Remove(dst); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRunCopyDense(b *testing.B) {
	benchmarkRunCopy(b, 64<<20, []Extent{{0, 64 << 20}})
}

func BenchmarkRunCopySparse(b *testing.B) {
	var data []Extent
	for off := int64(0); off < 64<<20; off += 10 << 20 {
		data = append(data, Extent{off, 1 << 20})
	}
	benchmarkRunCopy(b, 64<<20, data)
}
