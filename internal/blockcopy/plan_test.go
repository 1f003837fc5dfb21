//go:build linux

package blockcopy

import (
	"encoding/binary"
	"slices"
	"testing"
)

func collect(size, chunkSize int64, data []Extent) []Segment {
	return slices.Collect(planSegments(size, chunkSize, data))
}

func TestPlanSegments(t *testing.T) {
	const chunk = 16384
	tests := []struct {
		name string
		size int64
		data []Extent
		want []Segment
	}{
		{"empty volume", 0, nil, nil},
		{"all hole", 20000, nil, []Segment{{0, 16384, false}, {16384, 3616, false}}},
		{"all data, unaligned size", 20000, []Extent{{0, 20000}}, []Segment{{0, 16384, true}, {16384, 3616, true}}},
		{
			"unaligned extent widens to 4096 and splits at the chunk grid",
			40000,
			[]Extent{{5000, 15000}},
			[]Segment{{0, 4096, false}, {4096, 12288, true}, {16384, 4096, true}, {20480, 12288, false}, {32768, 7232, false}},
		},
		{
			"touching and overlapping extents merge, order does not matter",
			32768,
			[]Extent{{12288, 4096}, {0, 4096}, {4096, 4096}, {2000, 100}},
			[]Segment{{0, 8192, true}, {8192, 4096, false}, {12288, 4096, true}, {16384, 16384, false}},
		},
		{
			"extents beyond the size are clamped",
			10000,
			[]Extent{{8192, 100000}, {-50, 10}, {20000, 5}},
			[]Segment{{0, 8192, false}, {8192, 1808, true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(tt.size, chunk, tt.data)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("planSegments(%d, %v)\n got  %v\n want %v", tt.size, tt.data, got, tt.want)
			}
		})
	}
}

// FuzzPlanSegments checks the invariants the copy's correctness rests on for
// arbitrary extent lists: full, ordered, non-overlapping coverage; no
// segment crossing the chunk grid; O_DIRECT-friendly data segments; every
// byte of every data extent planned as data; no block without data read.
func FuzzPlanSegments(f *testing.F) {
	f.Add(uint32(20000), uint8(3), []byte{})
	f.Add(uint32(1<<20+7), uint8(15), []byte{0, 0, 1, 0, 0, 0, 16, 0, 5, 5, 5, 0, 1, 0, 0, 0})
	f.Add(uint32(4096), uint8(0), []byte{255, 255, 255, 255, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, rawSize uint32, rawChunk uint8, rawExtents []byte) {
		size := int64(rawSize % (4 << 20))
		chunkSize := int64(rawChunk%16+1) * ioAlignment
		var data []Extent
		for b := rawExtents; len(b) >= 8; b = b[8:] {
			// Offsets may start before 0 and run past size on purpose.
			off := int64(binary.LittleEndian.Uint32(b)%(5<<20)) - 4096
			length := int64(binary.LittleEndian.Uint32(b[4:]) % (1 << 20))
			data = append(data, Extent{Offset: off, Length: length})
		}
		checkPlan(t, size, chunkSize, data, collect(size, chunkSize, data))
	})
}

func checkPlan(t *testing.T, size, chunkSize int64, data []Extent, plan []Segment) {
	t.Helper()
	blocks := (size + ioAlignment - 1) / ioAlignment
	blockHasData := make([]bool, blocks)
	for _, e := range data {
		start, end := max(e.Offset, 0), min(e.Offset+e.Length, size)
		for off := start; off < end; off = (off/ioAlignment + 1) * ioAlignment {
			blockHasData[off/ioAlignment] = true
		}
	}

	pos := int64(0)
	for i, s := range plan {
		if s.Offset != pos || s.Length <= 0 {
			t.Fatalf("segment %d %+v: want a non-empty segment at offset %d", i, s, pos)
		}
		end := s.Offset + s.Length
		if s.Offset/chunkSize != (end-1)/chunkSize {
			t.Fatalf("segment %d %+v crosses a chunk boundary (chunk %d)", i, s, chunkSize)
		}
		if s.Data && (s.Offset%ioAlignment != 0 || (end%ioAlignment != 0 && end != size)) {
			t.Fatalf("data segment %d %+v is not aligned to %d", i, s, ioAlignment)
		}
		for b := s.Offset / ioAlignment; b*ioAlignment < end; b++ {
			if blockHasData[b] != s.Data {
				t.Fatalf("segment %d %+v has data=%t but block %d has data=%t (extents %v)", i, s, s.Data, b, blockHasData[b], data)
			}
		}
		if i > 0 && plan[i-1].Data == s.Data && plan[i-1].Offset/chunkSize == s.Offset/chunkSize {
			t.Fatalf("segments %d and %d are of one kind within one chunk and should be one", i-1, i)
		}
		pos = end
	}
	if pos != size {
		t.Fatalf("plan covers %d bytes, want %d", pos, size)
	}
}
