//go:build linux

package blockcopy

import (
	"bytes"
	"unsafe"
)

// ioAlignment is the alignment O_DIRECT demands of offsets, lengths and
// memory. 4096 satisfies devices with 512-byte and 4 KiB logical blocks.
const ioAlignment = 4096

// alignedBuffer returns n zeroed bytes starting on an ioAlignment boundary.
// Go does not promise alignment for large allocations, so it over-allocates
// and slices; the capacity is clipped so appends can never leave the block.
func alignedBuffer(n int) []byte {
	raw := make([]byte, n+ioAlignment)
	skip := 0
	if rem := int(uintptr(unsafe.Pointer(&raw[0])) % ioAlignment); rem != 0 {
		skip = ioAlignment - rem
	}
	return raw[skip : skip+n : skip+n]
}

func isAligned(p []byte) bool {
	return len(p) > 0 && len(p)%ioAlignment == 0 &&
		uintptr(unsafe.Pointer(&p[0]))%ioAlignment == 0
}

// isZero reports whether b holds only zero bytes. Comparing against a zero
// buffer uses the runtime's vectorised memequal, which is several times
// faster than a byte or word loop and stops at the first non-zero block.
func isZero(b, zeros []byte) bool {
	return bytes.Equal(b, zeros[:len(b)])
}
