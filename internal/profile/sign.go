package profile

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Signature errors. Verify's errors wrap exactly one of them, so a webhook can answer
// "signature: " and the error.
var (
	// ErrUnsigned: the profile has no signature.
	ErrUnsigned = errors.New("the profile is not signed (signature is empty)")
	// ErrNoTrustedKeys: there is no key to verify with.
	ErrNoTrustedKeys = errors.New("no trusted public keys are configured")
	// ErrSignatureInvalid: the signature is not one of the spec by any trusted key.
	ErrSignatureInvalid = errors.New("the signature does not verify")
)

// Sign checks spec (Validate) and signs its canonical encoding as cosign sign-blob --key does:
// ECDSA over the SHA-256 of the bytes (ASN.1 DER signature, SHA-256 for every curve), Ed25519
// over the bytes, RSA PKCS#1 v1.5 over their SHA-256. The result goes into the profile's
// signature field as is (its YAML and JSON form is base64, as cosign prints it).
func Sign(spec v1alpha1.EdgeProfileSpec, key *PrivateKey) ([]byte, error) {
	if key == nil || key.signer == nil {
		return nil, errors.New("no signing key")
	}
	if err := Validate(spec); err != nil {
		return nil, err
	}
	blob, err := Canonical(spec)
	if err != nil {
		return nil, err
	}
	return key.signBlob(blob)
}

func (k *PrivateKey) signBlob(blob []byte) ([]byte, error) {
	switch k.signer.(type) {
	case ed25519.PrivateKey:
		return k.signer.Sign(rand.Reader, blob, crypto.Hash(0))
	case *ecdsa.PrivateKey, *rsa.PrivateKey:
		digest := sha256.Sum256(blob)
		// ecdsa.PrivateKey.Sign returns the ASN.1 DER form; rsa.PrivateKey.Sign with a hash is
		// PKCS#1 v1.5.
		return k.signer.Sign(rand.Reader, digest[:], crypto.SHA256)
	}
	return nil, fmt.Errorf("%w: %T", ErrUnsupportedKey, k.signer)
}

// Verify checks that signature is a signature of spec's canonical encoding by one of the trusted
// keys, and returns that key's id. It wraps ErrNoTrustedKeys, ErrUnsigned or
// ErrSignatureInvalid, or returns the error of Canonical.
func Verify(spec v1alpha1.EdgeProfileSpec, signature []byte, trusted []PublicKey) (KeyID, error) {
	if len(trusted) == 0 {
		return "", ErrNoTrustedKeys
	}
	if len(signature) == 0 {
		return "", ErrUnsigned
	}
	blob, err := Canonical(spec)
	if err != nil {
		return "", fmt.Errorf("canonical encoding of the spec: %w", err)
	}
	if id, ok := verifyBlob(blob, signature, trusted); ok {
		return id, nil
	}
	return "", signatureInvalid(blob, signature, trusted)
}

func verifyBlob(blob, signature []byte, trusted []PublicKey) (KeyID, bool) {
	digest := sha256.Sum256(blob)
	for _, k := range trusted {
		var ok bool
		switch key := k.key.(type) {
		case *ecdsa.PublicKey:
			ok = ecdsa.VerifyASN1(key, digest[:], signature)
		case ed25519.PublicKey:
			ok = len(key) == ed25519.PublicKeySize && ed25519.Verify(key, blob, signature)
		case *rsa.PublicKey:
			ok = rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], signature) == nil
		}
		if ok {
			return k.id, true
		}
	}
	return "", false
}

// signatureInvalid says what was tried and, when it can tell, what is likely wrong.
func signatureInvalid(blob, signature []byte, trusted []PublicKey) error {
	ids := make([]string, len(trusted))
	for i, k := range trusted {
		ids[i] = string(k.id)
	}
	keys := "the trusted key " + ids[0]
	if len(ids) > 1 {
		keys = fmt.Sprintf("any of the %d trusted keys (%s)", len(ids), strings.Join(ids, ", "))
	}
	hint := "the spec was changed after it was signed, or it was signed with a key that is not trusted"
	// cosign prints base64; pasting that into a file and encoding it again leaves base64 text
	// where the signature's bytes should be.
	if inner, err := base64.StdEncoding.DecodeString(string(signature)); err == nil && len(inner) > 0 {
		if _, ok := verifyBlob(blob, inner, trusted); ok {
			hint = "the signature is base64-encoded twice; put cosign's output in signature: as it is printed"
		} else {
			hint = "the signature field holds base64 text of base64 text; put cosign's output in signature: as it is printed (" + hint + ")"
		}
	}
	return fmt.Errorf("%w: it is not a signature of this spec by %s; %s", ErrSignatureInvalid, keys, hint)
}
