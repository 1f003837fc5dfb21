//go:build linux

package blockcopy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
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

// digester is a running digest that can absorb zeros without reading them.
type digester interface {
	write(p []byte)
	// writeZeros hashes n zero bytes; n is at most one chunk.
	writeZeros(n int64)
	Sum(b []byte) []byte
}

// newDigester returns a digester for a; BLAKE3 digesters share zeroTrees.
func (a Algorithm) newDigester(zeros []byte, zeroTrees *zeroSubtrees) digester {
	if a == SHA256 {
		return plainDigester{Hash: sha256.New(), zeros: zeros}
	}
	return newBLAKE3Hasher(zeros, zeroTrees)
}

// plainDigester hashes zeros like any other bytes: SHA-256 is a chain, so
// no part of its work on zeros can be reused.
type plainDigester struct {
	hash.Hash
	zeros []byte
}

// Hashes cannot fail to absorb bytes; hash.Hash returns an error only to
// be an io.Writer.
func (d plainDigester) write(p []byte)     { d.Write(p) }
func (d plainDigester) writeZeros(n int64) { d.Write(d.zeros[:n]) }

// formatDigest renders a sum as "<algorithm>:<hex>".
func formatDigest(a Algorithm, sum []byte) string {
	return string(a) + ":" + hex.EncodeToString(sum)
}
