//go:build linux

// Package blockcopy copies a block device or file to another one and proves
// the copy is identical.
//
// The engine is a bounded pipeline (read → hash → write) over a plan of
// chunk-sized segments. Holes in the source are planned as segments that are
// hashed as zeros but never read, and all-zero segments are not written when
// the target is known to read as zeros, so a sparse copy costs little more
// than its data while its digest equals that of a dense copy. After the copy
// the target is synced and read back, bypassing the page cache with O_DIRECT
// where the platform allows, and its digest must equal the source's.
//
// The code is Linux-only: it relies on O_DIRECT, SEEK_DATA/SEEK_HOLE,
// fallocate and the BLKGETSIZE64 ioctl.
package blockcopy
