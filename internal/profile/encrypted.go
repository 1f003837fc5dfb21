package profile

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"
)

// cosign's encrypted private key: the JSON of go-securesystemslib's encrypted package, an
// scrypt-derived key and a NaCl secretbox around the PKCS#8 DER of the key. This file writes and
// reads that format without depending on sigstore's libraries.

// ErrWrongPassword is returned for an encrypted key that does not open with the password given.
// NaCl secretbox cannot tell a wrong password from a damaged file, so the message says both.
var ErrWrongPassword = errors.New("wrong password, or the key file is damaged")

const (
	scryptKeyLen    = 32
	scryptSaltLen   = 32
	secretboxNonces = 24
	nameScrypt      = "scrypt"
	nameSecretbox   = "nacl/secretbox"
)

type scryptParams struct {
	N int `json:"N"`
	R int `json:"r"`
	P int `json:"p"`
}

// The scrypt parameters go-securesystemslib reads (its Legacy, Standard and OWASP levels).
// Anything else is refused, as it does, so a file cannot make the KDF run for hours or take
// gigabytes of memory.
var (
	scryptLegacy   = scryptParams{N: 1 << 15, R: 8, P: 1}
	scryptStandard = scryptParams{N: 1 << 16, R: 8, P: 1}
	scryptOWASP    = scryptParams{N: 1 << 17, R: 8, P: 1}
)

type encryptedKey struct {
	KDF struct {
		Name   string       `json:"name"`
		Params scryptParams `json:"params"`
		Salt   []byte       `json:"salt"`
	} `json:"kdf"`
	Cipher struct {
		Name  string `json:"name"`
		Nonce []byte `json:"nonce"`
	} `json:"cipher"`
	Ciphertext []byte `json:"ciphertext"`
}

// encryptKey encrypts plaintext under password as cosign does, with scrypt N=32768, r=8, p=1.
func encryptKey(plaintext, password []byte) ([]byte, error) {
	var e encryptedKey
	e.KDF.Name = nameScrypt
	e.KDF.Params = scryptLegacy
	e.KDF.Salt = make([]byte, scryptSaltLen)
	e.Cipher.Name = nameSecretbox
	e.Cipher.Nonce = make([]byte, secretboxNonces)
	if _, err := rand.Read(e.KDF.Salt); err != nil {
		return nil, err
	}
	if _, err := rand.Read(e.Cipher.Nonce); err != nil {
		return nil, err
	}
	key, err := scrypt.Key(password, e.KDF.Salt, e.KDF.Params.N, e.KDF.Params.R, e.KDF.Params.P, scryptKeyLen)
	if err != nil {
		return nil, err
	}
	var k [scryptKeyLen]byte
	var nonce [secretboxNonces]byte
	copy(k[:], key)
	copy(nonce[:], e.Cipher.Nonce)
	e.Ciphertext = secretbox.Seal(nil, plaintext, &nonce, &k)
	return json.Marshal(e)
}

// decryptKey opens what encryptKey (or cosign) wrote.
func decryptKey(data, password []byte) ([]byte, error) {
	var e encryptedKey
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("the encrypted key is not the JSON cosign writes: %w", err)
	}
	if e.KDF.Name != nameScrypt {
		return nil, fmt.Errorf("unsupported key derivation %q (cosign uses %q)", e.KDF.Name, nameScrypt)
	}
	if e.Cipher.Name != nameSecretbox {
		return nil, fmt.Errorf("unsupported cipher %q (cosign uses %q)", e.Cipher.Name, nameSecretbox)
	}
	switch e.KDF.Params {
	case scryptLegacy, scryptStandard, scryptOWASP:
	default:
		p := e.KDF.Params
		return nil, fmt.Errorf("unsupported scrypt parameters N=%d r=%d p=%d", p.N, p.R, p.P)
	}
	if len(e.Cipher.Nonce) != secretboxNonces {
		return nil, fmt.Errorf("the nonce has %d bytes, not %d", len(e.Cipher.Nonce), secretboxNonces)
	}
	key, err := scrypt.Key(password, e.KDF.Salt, e.KDF.Params.N, e.KDF.Params.R, e.KDF.Params.P, scryptKeyLen)
	if err != nil {
		return nil, err
	}
	var k [scryptKeyLen]byte
	var nonce [secretboxNonces]byte
	copy(k[:], key)
	copy(nonce[:], e.Cipher.Nonce)
	plaintext, ok := secretbox.Open(nil, e.Ciphertext, &nonce, &k)
	if !ok {
		return nil, ErrWrongPassword
	}
	return plaintext, nil
}
