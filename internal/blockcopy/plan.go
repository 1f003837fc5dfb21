//go:build linux

package blockcopy

import (
	"cmp"
	"iter"
	"slices"
)

// Extent is a byte range [Offset, Offset+Length) of a volume.
type Extent struct {
	Offset int64
	Length int64
}

func (e Extent) end() int64 { return e.Offset + e.Length }

// Segment is one unit of work: a byte range that either holds data to be
// read, or is a hole known to read as zeros.
type Segment struct {
	Offset int64
	Length int64
	Data   bool
}

// planSegments splits [0, size) into segments that cover every byte exactly
// once, in order. A segment never crosses a multiple of chunkSize, so each
// fits a buffer and chunk offsets are stable across runs (verify reports the
// first differing chunk by offset). Data extents are widened to ioAlignment
// so data segments start aligned and end aligned or at size, as O_DIRECT
// needs; widening only turns hole bytes into data, never the reverse, so no
// data can be skipped. chunkSize must be a positive multiple of ioAlignment.
func planSegments(size, chunkSize int64, data []Extent) iter.Seq[Segment] {
	extents := normalizeExtents(size, data)
	return func(yield func(Segment) bool) {
		next := 0 // first extent that ends after pos
		for pos := int64(0); pos < size; {
			chunkEnd := min((pos/chunkSize+1)*chunkSize, size)
			for next < len(extents) && extents[next].end() <= pos {
				next++
			}
			seg := Segment{Offset: pos}
			switch {
			case next < len(extents) && extents[next].Offset <= pos:
				seg.Data = true
				seg.Length = min(extents[next].end(), chunkEnd) - pos
			case next < len(extents):
				seg.Length = min(extents[next].Offset, chunkEnd) - pos
			default:
				seg.Length = chunkEnd - pos
			}
			if !yield(seg) {
				return
			}
			pos += seg.Length
		}
	}
}

// normalizeExtents clamps extents to [0, size), widens them to ioAlignment,
// sorts them and merges those that overlap or touch.
func normalizeExtents(size int64, data []Extent) []Extent {
	out := make([]Extent, 0, len(data))
	for _, e := range data {
		start := max(e.Offset, 0)
		end := min(e.end(), size)
		if e.Length <= 0 || start >= end {
			continue
		}
		start = start / ioAlignment * ioAlignment
		end = min((end+ioAlignment-1)/ioAlignment*ioAlignment, size)
		out = append(out, Extent{Offset: start, Length: end - start})
	}
	slices.SortFunc(out, func(a, b Extent) int { return cmp.Compare(a.Offset, b.Offset) })
	merged := out[:0]
	for _, e := range out {
		if n := len(merged); n > 0 && e.Offset <= merged[n-1].end() {
			merged[n-1].Length = max(merged[n-1].end(), e.end()) - merged[n-1].Offset
			continue
		}
		merged = append(merged, e)
	}
	return merged
}
