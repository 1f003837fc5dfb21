package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"testing"
)

func TestKeyFormats(t *testing.T) {
	privPEM, pubPEM, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := LoadSigner(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil || !pub.Equal(signer.PublicKey()) {
		t.Fatalf("public key %x, %v; signer's %x", pub, err, signer.PublicKey())
	}
	seed := bytes.Repeat([]byte{7}, 32)
	for _, form := range [][]byte{seed, []byte(hex.EncodeToString(seed) + "\n"), []byte(base64.StdEncoding.EncodeToString(seed))} {
		s, err := LoadSigner(form)
		if err != nil || s.KeyID() != testSigner(t).KeyID() {
			t.Errorf("seed form %q: %v", form, err)
		}
	}
	for _, bad := range [][]byte{nil, []byte("short"), pubPEM} {
		if _, err := LoadSigner(bad); err == nil {
			t.Errorf("LoadSigner accepted %q", bad)
		}
	}
	if _, err := ParsePublicKey(privPEM); err == nil {
		t.Error("ParsePublicKey accepted a private key")
	}
}
