package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Checkpoint is a signed statement that the chain had Size entries and that the last of them
// hashed to Head. Anyone holding the public key can check that a stream still contains what
// was signed: an entry before the checkpoint edited, deleted or inserted breaks the link to Head.
type Checkpoint struct {
	Size      uint64 // entries before the checkpoint, which is also its own sequence number
	Head      Hash   // hash of entry Size-1; zero when Size is 0
	Time      time.Time
	KeyID     string
	Signature []byte
}

// checkpointDomain starts every signed message, so that a signature over a checkpoint can never
// be passed off as a signature over anything else made with the same key.
const checkpointDomain = "nodewright-audit checkpoint\n"

// signedMessage is what the key signs: the domain line, then
// {"v":1,"size":N,"head":"hex","time":T,"keyId":S} in the canonical encoding.
func (c *Checkpoint) signedMessage() []byte {
	m := append([]byte(checkpointDomain), `{"v":`...)
	m = strconv.AppendInt(m, FormatVersion, 10)
	m = append(m, ',')
	body := appendCheckpoint(nil, c, false)
	return append(m, body[1:]...)
}

// KeyID names a public key in checkpoints: the first 8 bytes of its SHA-256, in hex, so that a
// verifier holding several keys (across a key rotation) knows which one to use.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Signer signs checkpoints with an ed25519 key.
type Signer struct {
	key   ed25519.PrivateKey
	keyID string
}

// NewSigner wraps a private key.
func NewSigner(key ed25519.PrivateKey) *Signer {
	return &Signer{key: key, keyID: KeyID(key.Public().(ed25519.PublicKey))}
}

// PublicKey is the key that verifies this signer's checkpoints.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// KeyID names the signer's public key.
func (s *Signer) KeyID() string { return s.keyID }

// sign fills in the key ID and the signature.
func (s *Signer) sign(c *Checkpoint) {
	c.KeyID = s.keyID
	c.Signature = ed25519.Sign(s.key, c.signedMessage())
}

// verifySignature checks c against the key its KeyID names among keys.
func verifySignature(c *Checkpoint, keys map[string]ed25519.PublicKey) (known, valid bool) {
	pub, ok := keys[c.KeyID]
	if !ok {
		return false, false
	}
	return true, ed25519.Verify(pub, c.signedMessage(), c.Signature)
}

// GenerateKey makes a new key pair: the private key as a PKCS #8 PEM block (what the operator
// reads from its Secret) and the public key as a PKIX PEM block (what verifiers are given).
func GenerateKey() (privatePEM, publicPEM []byte, err error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating an ed25519 key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the private key: %w", err)
	}
	publicPEM, err = MarshalPublicKey(key.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), publicPEM, nil
}

// MarshalPublicKey encodes a public key as a PKIX PEM block.
func MarshalPublicKey(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding the public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// LoadSigner reads a private key as a Secret may hold it: a PKCS #8 PEM block, or the 32-byte
// ed25519 seed raw, in hex or in base64.
func LoadSigner(data []byte) (*Signer, error) {
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("audit signing key: PEM block %q, want \"PRIVATE KEY\"", block.Type)
		}
		parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("audit signing key: %w", err)
		}
		key, ok := parsed.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("audit signing key: a %T, want ed25519", parsed)
		}
		return NewSigner(key), nil
	}
	seed, err := rawKey(data, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	return NewSigner(ed25519.NewKeyFromSeed(seed)), nil
}

// ParsePublicKey reads a public key: a PKIX PEM block, or the 32 bytes raw, in hex or in base64.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("audit public key: PEM block %q, want \"PUBLIC KEY\"", block.Type)
		}
		parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("audit public key: %w", err)
		}
		key, ok := parsed.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("audit public key: a %T, want ed25519", parsed)
		}
		return key, nil
	}
	raw, err := rawKey(data, ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("audit public key: %w", err)
	}
	return ed25519.PublicKey(raw), nil
}

// rawKey accepts size bytes as they are, or hex or base64 text of them (surrounding whitespace,
// as a file or a kubectl-made Secret often has, ignored).
func rawKey(data []byte, size int) ([]byte, error) {
	if len(data) == size {
		return bytes.Clone(data), nil
	}
	text := bytes.TrimSpace(data)
	if b, err := hex.DecodeString(string(text)); err == nil && len(b) == size {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(string(text)); err == nil && len(b) == size {
		return b, nil
	}
	return nil, errors.New("neither a PEM block nor a 32-byte key raw, in hex or in base64")
}
