//go:build linux

package blockcopy

import (
	"bytes"
	"encoding/binary"
	"testing"

	"lukechampine.com/blake3"
)

// hashOps feeds the same input to the package's BLAKE3 and to the
// reference lukechampine.com/blake3 Hasher: each op is a length, written as
// zeros through writeZeros when zero is set, as random bytes otherwise.
func hashOps(t *testing.T, zeroTrees *zeroSubtrees, lengths []int, zero []bool, data []byte) (got, want []byte) {
	t.Helper()
	zeros := make([]byte, len(data))
	ours := newBLAKE3Hasher(zeros, zeroTrees)
	reference := blake3.New(32, nil)
	for i, n := range lengths {
		p := data[:n]
		if zero[i] {
			ours.writeZeros(int64(n))
			p = zeros[:n]
		} else {
			ours.write(p)
		}
		if _, err := reference.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	return ours.Sum(nil), reference.Sum(nil)
}

func TestBLAKE3MatchesReference(t *testing.T) {
	data := randomBytes(t, 1<<20)
	cases := []struct {
		name    string
		lengths []int
		zero    []bool
	}{
		{"empty", nil, nil},
		{"one byte", []int{1}, []bool{false}},
		{"exactly one chunk", []int{1024}, []bool{false}},
		{"chunk and a byte", []int{1025}, []bool{false}},
		{"zeros only", []int{testChunk, testChunk, 3}, []bool{true, true, true}},
		{"odd pieces", []int{7, 1024, 4095, testChunk, 1, testChunk - 5, 2048}, []bool{false, true, false, true, true, false, true}},
		{"aligned chunks", []int{testChunk, testChunk, testChunk, testChunk}, []bool{false, true, true, false}},
		{"large zero runs", []int{1 << 20, 5, 1<<20 - 5, 1 << 20, 1 << 20}, []bool{true, false, true, true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			zeroTrees := newZeroSubtrees()
			for pass := range 2 { // the second pass reads zero subtrees from the cache
				got, want := hashOps(t, zeroTrees, tc.lengths, tc.zero, data)
				if !bytes.Equal(got, want) {
					t.Fatalf("pass %d: digest %x, reference %x", pass, got, want)
				}
			}
		})
	}
}

func TestZeroSubtreesAreReused(t *testing.T) {
	zeroTrees := newZeroSubtrees()
	// Large enough for subtrees of the cached heights.
	lengths := []int{1 << 20, 1 << 20, 1 << 20}
	zero := []bool{true, true, true}
	data := randomBytes(t, 1<<20)
	hashOps(t, zeroTrees, lengths, zero, data)
	cached := len(zeroTrees.cvs)
	if cached == 0 {
		t.Fatal("hashing zeros cached no subtrees")
	}
	// Poison the cache: if the second pass really uses it, its digest changes.
	for key := range zeroTrees.cvs {
		zeroTrees.cvs[key] = [8]uint32{1}
	}
	got, want := hashOps(t, zeroTrees, lengths, zero, data)
	if bytes.Equal(got, want) {
		t.Fatal("the second pass ignored the cached zero subtrees")
	}
	if len(zeroTrees.cvs) != cached {
		t.Fatalf("cache grew from %d to %d entries on an identical pass", cached, len(zeroTrees.cvs))
	}
}

// FuzzBLAKE3Zeros checks that any mix of data and zero writes, of any
// lengths, hashes exactly as the reference implementation, with and without
// cached zero subtrees.
func FuzzBLAKE3Zeros(f *testing.F) {
	f.Add([]byte{0, 4, 1, 0, 16, 2, 255, 255, 3})
	f.Add([]byte{1, 0, 1, 1, 0, 1, 0, 255, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var lengths []int
		var zero []bool
		for ; len(ops) >= 3 && len(lengths) < 16; ops = ops[3:] {
			// Up to 256 KiB, so that subtrees of cached heights occur.
			length := int(binary.LittleEndian.Uint16(ops[1:]))*4 + int(ops[0]>>1)%4
			lengths = append(lengths, length%(256<<10+1))
			zero = append(zero, ops[0]%2 == 1)
		}
		data := bytes.Repeat([]byte{0xa5, 0x3c, 0x00, 0x7e}, 64<<10)
		zeroTrees := newZeroSubtrees()
		for pass := range 2 {
			got, want := hashOps(t, zeroTrees, lengths, zero, data)
			if !bytes.Equal(got, want) {
				t.Fatalf("pass %d, lengths %v zero %v: digest %x, reference %x", pass, lengths, zero, got, want)
			}
		}
	})
}
