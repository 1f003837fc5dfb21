package profile

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// The PEM block types of cosign's key files.
const (
	// PEMTypeEncryptedSigstore is the block cosign v2 writes its private keys in.
	PEMTypeEncryptedSigstore = "ENCRYPTED SIGSTORE PRIVATE KEY"
	// PEMTypeEncryptedCosign is the block older cosign releases wrote their private keys in.
	PEMTypeEncryptedCosign = "ENCRYPTED COSIGN PRIVATE KEY"
	// PEMTypePrivateKey is an unencrypted PKCS#8 private key.
	PEMTypePrivateKey = "PRIVATE KEY"
	// PEMTypePublicKey is a PKIX public key, as cosign writes cosign.pub.
	PEMTypePublicKey = "PUBLIC KEY"
)

// The RSA key sizes accepted. The CRD limits the signature to 1024 characters of base64, which
// an RSA signature fits up to 6144 bits; 4096 is the largest size in common use.
const (
	minRSABits = 2048
	maxRSABits = 4096
)

// Key errors. Every error about a key file wraps one of them.
var (
	// ErrMalformedKey: the file is not a key in a format this package reads.
	ErrMalformedKey = errors.New("malformed key")
	// ErrUnsupportedKey: the key is well formed but of an algorithm or size not accepted.
	ErrUnsupportedKey = errors.New("unsupported key")
)

// KeyID names a public key: "sha256:" and the hex SHA-256 of its PKIX DER encoding.
type KeyID string

// PublicKey is a public key that may verify profile signatures: ECDSA P-256 or P-384, ed25519,
// or RSA of 2048 to 4096 bits.
type PublicKey struct {
	key crypto.PublicKey
	der []byte
	id  KeyID
}

// ID is the key's id.
func (k PublicKey) ID() KeyID { return k.id }

// Key is the key itself (*ecdsa.PublicKey, ed25519.PublicKey or *rsa.PublicKey).
func (k PublicKey) Key() crypto.PublicKey { return k.key }

// PEM is the key as cosign writes cosign.pub.
func (k PublicKey) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: PEMTypePublicKey, Bytes: k.der})
}

// Algorithm names the signature algorithm the key verifies, as cosign uses it with --key.
func (k PublicKey) Algorithm() string {
	switch key := k.key.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + key.Curve.Params().Name + " with SHA-256"
	case ed25519.PublicKey:
		return "Ed25519"
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA-%d PKCS#1 v1.5 with SHA-256", key.N.BitLen())
	}
	return "none"
}

// NewPublicKey checks that key is of an accepted algorithm and size and returns it as a
// PublicKey.
func NewPublicKey(key crypto.PublicKey) (PublicKey, error) {
	if err := checkKeyAlgorithm(key); err != nil {
		return PublicKey{}, err
	}
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%w: %w", ErrUnsupportedKey, err)
	}
	sum := sha256.Sum256(der)
	return PublicKey{key: key, der: der, id: KeyID("sha256:" + hex.EncodeToString(sum[:]))}, nil
}

func checkKeyAlgorithm(key crypto.PublicKey) error {
	switch key := key.(type) {
	case *ecdsa.PublicKey:
		if key.Curve != elliptic.P256() && key.Curve != elliptic.P384() {
			return fmt.Errorf("%w: ECDSA on %s; use P-256 or P-384", ErrUnsupportedKey, key.Curve.Params().Name)
		}
	case ed25519.PublicKey:
		if len(key) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: an ed25519 key of %d bytes", ErrUnsupportedKey, len(key))
		}
	case *rsa.PublicKey:
		if bits := key.N.BitLen(); bits < minRSABits || bits > maxRSABits {
			return fmt.Errorf("%w: RSA of %d bits; use %d to %d bits", ErrUnsupportedKey, bits, minRSABits, maxRSABits)
		}
	default:
		return fmt.Errorf("%w: %T; use ECDSA P-256 or P-384, ed25519 or RSA", ErrUnsupportedKey, key)
	}
	return nil
}

// PrivateKey signs profiles.
type PrivateKey struct {
	signer crypto.Signer
	public PublicKey
}

// Public is the key's public half.
func (k *PrivateKey) Public() PublicKey { return k.public }

// GenerateKeyPair makes an ECDSA P-256 key pair, as cosign generate-key-pair does: the private
// key PKCS#8-encoded and encrypted under password in cosign's format (PEM block "ENCRYPTED
// SIGSTORE PRIVATE KEY": scrypt N=32768 r=8 p=1 and NaCl secretbox), and the public key as a
// PKIX "PUBLIC KEY" PEM block. An empty password is allowed, as cosign allows it.
func GenerateKeyPair(password []byte) (privatePEM, publicPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	sealed, err := encryptKey(pkcs8, password)
	if err != nil {
		return nil, nil, err
	}
	pub, err := NewPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: PEMTypeEncryptedSigstore, Bytes: sealed}), pub.PEM(), nil
}

// LoadPrivateKey reads a private key: cosign's encrypted format (PEM block "ENCRYPTED SIGSTORE
// PRIVATE KEY", or "ENCRYPTED COSIGN PRIVATE KEY" from older cosign releases) opened with
// password, or an unencrypted "PRIVATE KEY" (PKCS#8), "EC PRIVATE KEY" (SEC 1) or "RSA PRIVATE
// KEY" (PKCS#1), for which password is ignored. A wrong password is ErrWrongPassword.
func LoadPrivateKey(pemBytes, password []byte) (*PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block found", ErrMalformedKey)
	}
	if _, encrypted := block.Headers["Proc-Type"]; encrypted {
		return nil, fmt.Errorf("%w: legacy OpenSSL PEM encryption; convert the key with 'cosign import-key-pair'", ErrUnsupportedKey)
	}
	var key any
	var err error
	switch block.Type {
	case PEMTypeEncryptedSigstore, PEMTypeEncryptedCosign:
		der, derr := decryptKey(block.Bytes, password)
		if derr != nil {
			if errors.Is(derr, ErrWrongPassword) {
				return nil, fmt.Errorf("opening the %s: %w", block.Type, derr)
			}
			return nil, fmt.Errorf("%w: %s: %w", ErrMalformedKey, block.Type, derr)
		}
		key, err = x509.ParsePKCS8PrivateKey(der)
	case PEMTypePrivateKey:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "ENCRYPTED PRIVATE KEY":
		return nil, fmt.Errorf("%w: an encrypted PKCS#8 key; convert it with 'cosign import-key-pair'", ErrUnsupportedKey)
	case PEMTypePublicKey:
		return nil, fmt.Errorf("%w: this is a public key; signing needs the private key (cosign.key)", ErrMalformedKey)
	default:
		return nil, fmt.Errorf("%w: PEM block %q is not a private key", ErrMalformedKey, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a key in the format its PEM block says: %w", ErrMalformedKey, block.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: %T cannot sign", ErrUnsupportedKey, key)
	}
	pub, err := NewPublicKey(signer.Public())
	if err != nil {
		return nil, err
	}
	return &PrivateKey{signer: signer, public: pub}, nil
}

// ParsePublicKey reads a PEM document holding exactly one "PUBLIC KEY" block (PKIX), such as
// cosign.pub.
func ParsePublicKey(pemBytes []byte) (PublicKey, error) {
	keys, err := ParsePublicKeys(pemBytes)
	if err != nil {
		return PublicKey{}, err
	}
	if len(keys) != 1 {
		return PublicKey{}, fmt.Errorf("%w: %d PEM blocks where one public key was expected", ErrMalformedKey, len(keys))
	}
	return keys[0], nil
}

// ParsePublicKeys reads every "PUBLIC KEY" block of a PEM document; there must be at least one.
// An error about one block is a *KeyError naming it.
func ParsePublicKeys(pemBytes []byte) ([]PublicKey, error) {
	var keys []PublicKey
	rest := pemBytes
	for n := 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		key, err := parsePublicKeyBlock(block)
		if err != nil {
			return nil, &KeyError{Index: -1, Block: n, Err: err}
		}
		keys = append(keys, key)
	}
	// pem.Decode skips what it cannot read; a damaged block must not vanish unnoticed.
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, &KeyError{Index: -1, Block: len(keys) + 1, Err: fmt.Errorf("%w: a PEM block that cannot be read (damaged base64 or missing END line)", ErrMalformedKey)}
	}
	if len(keys) == 0 {
		return nil, &KeyError{Index: -1, Err: fmt.Errorf("%w: no PEM block found", ErrMalformedKey)}
	}
	return keys, nil
}

// LoadPublicKeys reads trusted public keys from PEM documents, each holding one or more "PUBLIC
// KEY" blocks. An error is a *KeyError naming the document (by its index in pems) and the block.
func LoadPublicKeys(pems ...[]byte) ([]PublicKey, error) {
	var all []PublicKey
	for i, doc := range pems {
		keys, err := ParsePublicKeys(doc)
		if err != nil {
			var ke *KeyError
			if errors.As(err, &ke) {
				ke.Index = i
				return nil, ke
			}
			return nil, &KeyError{Index: i, Err: err}
		}
		all = append(all, keys...)
	}
	return all, nil
}

func parsePublicKeyBlock(block *pem.Block) (PublicKey, error) {
	switch {
	case block.Type == PEMTypePublicKey:
	case strings.Contains(block.Type, "PRIVATE KEY"):
		return PublicKey{}, fmt.Errorf("%w: this is a private key (%s); give the public key (cosign.pub)", ErrMalformedKey, block.Type)
	case block.Type == "CERTIFICATE":
		return PublicKey{}, fmt.Errorf("%w: a certificate; give the public key (openssl x509 -pubkey -noout)", ErrUnsupportedKey)
	default:
		return PublicKey{}, fmt.Errorf("%w: PEM block %q is not a %q block", ErrMalformedKey, block.Type, PEMTypePublicKey)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%w: not a PKIX public key: %w", ErrMalformedKey, err)
	}
	return NewPublicKey(key)
}

// KeyError is an error about one key of several.
type KeyError struct {
	// Index is the key document's position among the ones given (from 0), or -1.
	Index int
	// Block is the PEM block's position in the document (from 1), or 0 for the document as a
	// whole.
	Block int
	Err   error
}

func (e *KeyError) Error() string {
	var where []string
	if e.Index >= 0 {
		where = append(where, fmt.Sprintf("public key %d", e.Index+1))
	}
	if e.Block > 0 {
		where = append(where, fmt.Sprintf("PEM block %d", e.Block))
	}
	if len(where) == 0 {
		return e.Err.Error()
	}
	return strings.Join(where, ", ") + ": " + e.Err.Error()
}

func (e *KeyError) Unwrap() error { return e.Err }
