package profile

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
)

func TestGenerateKeyPair(t *testing.T) {
	privPEM, pubPEM, err := GenerateKeyPair([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode(privPEM)
	if block == nil || block.Type != PEMTypeEncryptedSigstore || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("private key PEM:\n%s", privPEM)
	}
	// The content is go-securesystemslib's encrypted JSON, with cosign's parameters.
	var sealed struct {
		KDF struct {
			Name   string
			Params struct{ N, R, P int } `json:"params"`
			Salt   []byte
		}
		Cipher struct {
			Name  string
			Nonce []byte
		}
		Ciphertext []byte
	}
	if err := json.Unmarshal(block.Bytes, &sealed); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if sealed.KDF.Name != "scrypt" || sealed.KDF.Params.N != 32768 || sealed.KDF.Params.R != 8 || sealed.KDF.Params.P != 1 ||
		len(sealed.KDF.Salt) != 32 || sealed.Cipher.Name != "nacl/secretbox" || len(sealed.Cipher.Nonce) != 24 {
		t.Errorf("encryption parameters: %s", block.Bytes)
	}

	key := mustLoad(t, privPEM, []byte("pw"))
	ecKey, ok := key.signer.(*ecdsa.PrivateKey)
	if !ok || ecKey.Curve != elliptic.P256() {
		t.Errorf("key is %T, want ECDSA P-256", key.signer)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	if pub.ID() != key.Public().ID() || !strings.HasPrefix(string(pub.ID()), "sha256:") || len(pub.ID()) != 71 {
		t.Errorf("public key id %s, private key's public half %s", pub.ID(), key.Public().ID())
	}
	if !bytes.Equal(pub.PEM(), pubPEM) {
		t.Errorf("PEM() does not round-trip:\n%s\n%s", pub.PEM(), pubPEM)
	}

	if _, err := LoadPrivateKey(privPEM, []byte("wrong")); !errors.Is(err, ErrWrongPassword) {
		t.Errorf("wrong password: got %v, want ErrWrongPassword", err)
	}
	if _, err := LoadPrivateKey(privPEM, nil); !errors.Is(err, ErrWrongPassword) {
		t.Errorf("no password: got %v, want ErrWrongPassword", err)
	}

	// An empty password is allowed, as cosign allows it.
	privPEM, _, err = GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	mustLoad(t, privPEM, []byte{})
}

func TestLoadPrivateKeyFormats(t *testing.T) {
	reEncode := func(t *testing.T, pkcs8PEM []byte, blockType string) []byte {
		block, _ := pem.Decode(pkcs8PEM)
		sealed, err := encryptKey(block.Bytes, []byte("pw"))
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: sealed})
	}
	ecKey := mustECDSA(elliptic.P256()).(*ecdsa.PrivateKey)
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		pem     func(t *testing.T) []byte
		wantAlg string
	}{
		{"encrypted, sigstore block", func(t *testing.T) []byte { return reEncode(t, testKeyP256, PEMTypeEncryptedSigstore) }, "ECDSA P-256 with SHA-256"},
		{"encrypted, older cosign block", func(t *testing.T) []byte { return reEncode(t, testKeyP384, PEMTypeEncryptedCosign) }, "ECDSA P-384 with SHA-256"},
		{"PKCS#8 P-256", func(*testing.T) []byte { return testKeyP256 }, "ECDSA P-256 with SHA-256"},
		{"PKCS#8 P-384", func(*testing.T) []byte { return testKeyP384 }, "ECDSA P-384 with SHA-256"},
		{"PKCS#8 Ed25519", func(*testing.T) []byte { return testKeyEd25519 }, "Ed25519"},
		{"PKCS#8 RSA", func(*testing.T) []byte { return testKeyRSA2048 }, "RSA-2048 PKCS#1 v1.5 with SHA-256"},
		{"SEC 1 EC", func(*testing.T) []byte { return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}) }, "ECDSA P-256 with SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := mustLoad(t, tc.pem(t), []byte("pw"))
			if got := key.Public().Algorithm(); got != tc.wantAlg {
				t.Errorf("algorithm %s, want %s", got, tc.wantAlg)
			}
		})
	}
}

func TestLoadPrivateKeyRefuses(t *testing.T) {
	_, pubPEM, err := GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	privPEM, _, err := GenerateKeyPair([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(privPEM)
	withParams := func(n int) []byte {
		var m map[string]any
		if err := json.Unmarshal(block.Bytes, &m); err != nil {
			t.Fatal(err)
		}
		m["kdf"].(map[string]any)["params"].(map[string]any)["N"] = n
		b, _ := json.Marshal(m)
		return pem.EncodeToMemory(&pem.Block{Type: PEMTypeEncryptedSigstore, Bytes: b})
	}
	var sealed map[string]any
	if err := json.Unmarshal(block.Bytes, &sealed); err != nil {
		t.Fatal(err)
	}
	ciphertext := []byte(sealed["ciphertext"].(string))
	// Another letter of the base64 alphabet: still base64, another ciphertext. (Flipping a
	// bit of the letter, as this did, made a character outside the alphabet for A, Z, z, +
	// and /: in one run out of a dozen or so the key was refused as malformed instead.)
	if ciphertext[10] == 'A' {
		ciphertext[10] = 'B'
	} else {
		ciphertext[10] = 'A'
	}
	sealed["ciphertext"] = string(ciphertext)
	damaged, _ := json.Marshal(sealed)
	for _, tc := range []struct {
		name    string
		pem     []byte
		wantErr error
		want    string
	}{
		{"not PEM", []byte("hello"), ErrMalformedKey, "no PEM block found"},
		{"a public key", pubPEM, ErrMalformedKey, "this is a public key"},
		{"P-521", mustPKCS8(mustECDSA(elliptic.P521())), ErrUnsupportedKey, "ECDSA on P-521"},
		{"RSA 1024", mustPKCS8(mustRSA(1024)), ErrUnsupportedKey, "RSA of 1024 bits"},
		{"a certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), ErrMalformedKey, `"CERTIFICATE" is not a private key`},
		{"garbage PKCS#8", pem.EncodeToMemory(&pem.Block{Type: PEMTypePrivateKey, Bytes: []byte{1, 2}}), ErrMalformedKey, "PRIVATE KEY"},
		{"encrypted, not JSON", pem.EncodeToMemory(&pem.Block{Type: PEMTypeEncryptedSigstore, Bytes: []byte("x")}), ErrMalformedKey, "not the JSON cosign writes"},
		{"encrypted, costly scrypt", withParams(1 << 30), ErrMalformedKey, "unsupported scrypt parameters N=1073741824"},
		{"encrypted, damaged", pem.EncodeToMemory(&pem.Block{Type: PEMTypeEncryptedSigstore, Bytes: damaged}), ErrWrongPassword, "wrong password, or the key file is damaged"},
		{"encrypted PKCS#8", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}), ErrUnsupportedKey, "cosign import-key-pair"},
		{"legacy OpenSSL encryption", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: []byte{1}}), ErrUnsupportedKey, "legacy OpenSSL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPrivateKey(tc.pem, []byte("pw"))
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("got %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q in it", err, tc.want)
			}
		})
	}
}

func TestParsePublicKeys(t *testing.T) {
	var pubs [][]byte
	for _, k := range [][]byte{testKeyP256, testKeyP384, testKeyEd25519, testKeyRSA2048} {
		pubs = append(pubs, mustLoad(t, k, nil).Public().PEM())
	}
	for i, p := range pubs {
		if _, err := ParsePublicKey(p); err != nil {
			t.Errorf("key %d: %v", i, err)
		}
	}
	bundle := bytes.Join(pubs, []byte("\n# a comment between keys\n"))
	keys, err := ParsePublicKeys(bundle)
	if err != nil || len(keys) != 4 {
		t.Fatalf("a bundle of 4: %d keys, %v", len(keys), err)
	}
	if _, err := ParsePublicKey(bundle); err == nil {
		t.Error("ParsePublicKey accepted 4 keys")
	}
	if keys, err := LoadPublicKeys(pubs[0], bundle); err != nil || len(keys) != 5 {
		t.Errorf("LoadPublicKeys: %d keys, %v", len(keys), err)
	}

	damaged := bytes.Replace(pubs[1], []byte("\n"), []byte("\n!"), 2)
	for _, tc := range []struct {
		name string
		docs [][]byte
		want string
	}{
		{"a private key", [][]byte{pubs[0], testKeyP256}, "public key 2, PEM block 1: malformed key: this is a private key (PRIVATE KEY); give the public key"},
		{"no PEM", [][]byte{[]byte("ssh-ed25519 AAAA")}, "public key 1: malformed key: no PEM block found"},
		{"empty", [][]byte{nil}, "public key 1: malformed key: no PEM block found"},
		{"damaged second block", [][]byte{append(bytes.Clone(pubs[0]), damaged...)}, "public key 1, PEM block 2: malformed key: a PEM block that cannot be read"},
		{"not PKIX", [][]byte{pem.EncodeToMemory(&pem.Block{Type: PEMTypePublicKey, Bytes: []byte{1, 2, 3}})}, "public key 1, PEM block 1: malformed key: not a PKIX public key"},
		{"RSA 1024", [][]byte{mustLoadUnchecked(mustPKCS8(mustRSA(1024)))}, "public key 1, PEM block 1: unsupported key: RSA of 1024 bits; use 2048 to 4096 bits"},
		{"P-521", [][]byte{mustLoadUnchecked(mustPKCS8(mustECDSA(elliptic.P521())))}, "unsupported key: ECDSA on P-521"},
		{"a certificate", [][]byte{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}})}, "unsupported key: a certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPublicKeys(tc.docs...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %s", err, tc.want)
			}
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Errorf("%T is not a *KeyError", err)
			}
			if !errors.Is(err, ErrMalformedKey) && !errors.Is(err, ErrUnsupportedKey) {
				t.Errorf("%v wraps neither ErrMalformedKey nor ErrUnsupportedKey", err)
			}
		})
	}
}

// mustLoadUnchecked returns the PKIX PEM of a private key's public half without the algorithm
// checks, to test that ParsePublicKey makes them.
func mustLoadUnchecked(pkcs8PEM []byte) []byte {
	block, _ := pem.Decode(pkcs8PEM)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.(crypto.Signer).Public())
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: PEMTypePublicKey, Bytes: der})
}
