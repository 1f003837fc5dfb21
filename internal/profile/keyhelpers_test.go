package profile

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Unencrypted PKCS#8 keys of every accepted algorithm, made once (RSA generation is slow).
var (
	testKeyP256    = mustPKCS8(mustECDSA(elliptic.P256()))
	testKeyP384    = mustPKCS8(mustECDSA(elliptic.P384()))
	testKeyEd25519 = mustPKCS8(mustEd25519())
	testKeyRSA2048 = mustPKCS8(mustRSA(2048))
)

func mustECDSA(c elliptic.Curve) any {
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func mustEd25519() any {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func mustRSA(bits int) any {
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		panic(err)
	}
	return k
}

func mustPKCS8(key any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: PEMTypePrivateKey, Bytes: der})
}

func mustLoad(t testing.TB, pemBytes, password []byte) *PrivateKey {
	t.Helper()
	k, err := LoadPrivateKey(pemBytes, password)
	if err != nil {
		t.Fatalf("LoadPrivateKey: %v", err)
	}
	return k
}

func mustSign(t testing.TB, spec v1alpha1.EdgeProfileSpec, k *PrivateKey) []byte {
	t.Helper()
	sig, err := Sign(spec, k)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return sig
}
