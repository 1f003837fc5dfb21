//go:build linux

package blockcopy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"

	"lukechampine.com/blake3"
)

// Algorithm names a digest algorithm; it is also the prefix of every digest
// string so that a digest can never be compared with one of another kind.
type Algorithm string

const (
	BLAKE3 Algorithm = "blake3"
	SHA256 Algorithm = "sha256"
)

// ParseAlgorithm accepts the names used on the command line.
func ParseAlgorithm(name string) (Algorithm, error) {
	switch Algorithm(name) {
	case BLAKE3, SHA256:
		return Algorithm(name), nil
	}
	return "", fmt.Errorf("%w: --hash %q: unknown algorithm, want %s or %s", ErrBadInput, name, BLAKE3, SHA256)
}

func (a Algorithm) newHash() hash.Hash {
	if a == SHA256 {
		return sha256.New()
	}
	return blake3.New(32, nil)
}

// formatDigest renders a sum as "<algorithm>:<hex>".
func formatDigest(a Algorithm, sum []byte) string {
	return string(a) + ":" + hex.EncodeToString(sum)
}

// hashZeros feeds n zero bytes to h, which is how holes enter the digest
// without being read. n never exceeds len(zeros) because segments are at
// most one chunk long.
func hashZeros(h hash.Hash, n int64, zeros []byte) {
	h.Write(zeros[:n])
}
