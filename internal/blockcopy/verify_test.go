//go:build linux

package blockcopy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRunVerifyFindsEveryFlippedByte(t *testing.T) {
	src, dst := paths(t)
	size := int64(9*testChunk + 999)
	// Data, a hole (in the source, zero-filled and skipped in the target)
	// and an unaligned tail.
	writeSparse(t, src, size, []Extent{{0, 3 * testChunk}, {6 * testChunk, 2*testChunk + 500}, {size - 300, 300}})
	requireOK(t, RunCopy(context.Background(), Request{Source: src, Target: dst, Options: testOptions}))

	clean := RunVerify(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
	requireOK(t, clean)
	if clean.SourceDigest == "" || clean.SourceDigest != clean.TargetDigest {
		t.Fatalf("verify of identical volumes: digests %q and %q", clean.SourceDigest, clean.TargetDigest)
	}

	for _, off := range []int64{0, 4095, 4096, testChunk - 1, 2*testChunk + 17, 4*testChunk + 3, 8*testChunk + 499, size - 1} {
		for _, flipped := range []string{dst, src} {
			flipByte(t, flipped, off)
			r := RunVerify(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
			flipByte(t, flipped, off)

			if r.ExitCode != ExitMismatch || r.Status != StatusMismatch {
				t.Fatalf("byte %d flipped in %s: exit %d status %s, want a mismatch", off, filepath.Base(flipped), r.ExitCode, r.Status)
			}
			wantChunk := off / testChunk * testChunk
			if r.MismatchChunkOffset == nil || *r.MismatchChunkOffset != wantChunk || *r.MismatchByteOffset != off {
				t.Fatalf("byte %d flipped: mismatch reported at chunk %v byte %v, want chunk %d byte %d",
					off, r.MismatchChunkOffset, r.MismatchByteOffset, wantChunk, off)
			}
			if !strings.Contains(r.Error, "chunk at offset") {
				t.Fatalf("error %q does not name the chunk offset", r.Error)
			}
		}
	}
}

func TestRunVerifyRefusesSmallerTarget(t *testing.T) {
	src, dst := paths(t)
	writeDense(t, src, randomBytes(t, 2*testChunk))
	writeDense(t, dst, randomBytes(t, 2*testChunk-1))
	r := RunVerify(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
	if r.ExitCode != ExitBadInput || !strings.Contains(r.Error, "--dst "+dst) {
		t.Fatalf("exit %d error %q, want bad input naming --dst", r.ExitCode, r.Error)
	}
}

func TestRunVerifyComparesOnlySourceLength(t *testing.T) {
	src, dst := paths(t)
	content := randomBytes(t, 2*testChunk+1)
	writeDense(t, src, content)
	writeDense(t, dst, append(append([]byte{}, content...), randomBytes(t, 5000)...))
	r := RunVerify(context.Background(), Request{Source: src, Target: dst, Options: testOptions})
	requireOK(t, r)
	if r.TargetDigest != blake3Digest(content) {
		t.Fatalf("target digest %s covers more than the source's length", r.TargetDigest)
	}
}

// A file target is checked whatever the caller vouches: one holding data is
// not taken for zeroed, so the holes of the source are written over it and
// the copy succeeds instead of skipping them and failing at the read-back.
func TestRunCopyChecksFileTargetClaimedZeroed(t *testing.T) {
	src, dst := paths(t)
	content := writeSparse(t, src, 4*testChunk, []Extent{{0, 100}})
	writeDense(t, dst, randomBytes(t, 4*testChunk))
	r := RunCopy(context.Background(), Request{Source: src, Target: dst, TargetZeroed: true, Options: testOptions})
	requireOK(t, r)
	requireSameContent(t, content, dst)
	if r.TargetZeroed || r.BytesSkipped != 0 || r.BytesWritten != 4*testChunk {
		t.Fatalf("targetZeroed %t written %d skipped %d, want a used file written in full despite the claim",
			r.TargetZeroed, r.BytesWritten, r.BytesSkipped)
	}
}
