package profile

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// These tests run the real cosign (built by hack/cosign.sh, which make test runs first) against
// this package, both ways: keys, signatures and the canonical bytes must be what cosign makes and
// accepts. cosign runs offline: no transparency log upload when signing, none checked when
// verifying.

const cosignPassword = "correct horse battery staple"

// cosignBinary is the cosign testenv.CosignBinary finds. Without it the tests fail: a
// compatibility claim that is not checked is worse than none.
func cosignBinary(t *testing.T) string {
	t.Helper()
	path, err := testenv.CosignBinary()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// cosign runs cosign in dir with the test password and a private HOME, and returns its stdout and
// whether it succeeded.
type cosign struct {
	t    *testing.T
	bin  string
	dir  string
	home string
}

func newCosign(t *testing.T) *cosign {
	return &cosign{t: t, bin: cosignBinary(t), dir: t.TempDir(), home: t.TempDir()}
}

func (c *cosign) run(args ...string) (stdout string, ok bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = c.dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COSIGN_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+c.home, "COSIGN_PASSWORD="+cosignPassword)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		c.t.Fatalf("running cosign %s: %v", strings.Join(args, " "), err)
	}
	result := "ok"
	if err != nil {
		result = err.Error()
	}
	c.t.Logf("$ cosign %s  => %s; stderr: %s", strings.Join(args, " "), result, strings.TrimSpace(lastLine(errOut.String())))
	return out.String(), err == nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func (c *cosign) write(name string, data []byte) string {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, name), data, 0o600); err != nil {
		c.t.Fatal(err)
	}
	return name
}

func (c *cosign) read(name string) []byte {
	c.t.Helper()
	data, err := os.ReadFile(filepath.Join(c.dir, name))
	if err != nil {
		c.t.Fatal(err)
	}
	return data
}

// signBlob has cosign sign blob with key and returns the signature's bytes.
func (c *cosign) signBlob(key, blob string) []byte {
	c.t.Helper()
	out, ok := c.run("sign-blob", "--key", key, "--tlog-upload=false", blob)
	if !ok {
		c.t.Fatalf("cosign sign-blob failed")
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil {
		c.t.Fatalf("cosign printed %q, not base64: %v", out, err)
	}
	return sig
}

// verifyBlob says whether cosign accepts sig (bytes) as a signature of blob by pub.
func (c *cosign) verifyBlob(pub, blob string, sig []byte) bool {
	c.t.Helper()
	sigFile := c.write("sig-"+blob, []byte(base64.StdEncoding.EncodeToString(sig)))
	_, ok := c.run("verify-blob", "--key", pub, "--signature", sigFile, "--insecure-ignore-tlog=true", blob)
	return ok
}

func TestCosignSignsWithOurKeyAndWeVerify(t *testing.T) {
	c := newCosign(t)
	privPEM, pubPEM, err := GenerateKeyPair([]byte(cosignPassword))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	c.write("our.key", privPEM)
	spec := testSpec()
	c.write("profile.json", mustCanonical(t, spec))

	sig := c.signBlob("our.key", "profile.json")
	id, err := Verify(spec, sig, []PublicKey{pub})
	if err != nil {
		t.Fatalf("our Verify refused cosign's signature made with our key: %v", err)
	}
	if id != pub.ID() {
		t.Errorf("verified by %s, want %s", id, pub.ID())
	}

	// The user's path: cosign's output pasted as is into the file's signature field.
	out, _ := c.run("sign-blob", "--key", "our.key", "--tlog-upload=false", "profile.json")
	file := testProfileYAML + "signature: " + strings.TrimSpace(out) + "\n"
	p, err := Decode([]byte(file))
	if err != nil {
		t.Fatalf("Decode of the profile with cosign's signature pasted in: %v", err)
	}
	if _, err := Verify(p.Spec, p.Signature, []PublicKey{pub}); err != nil {
		t.Fatalf("our Verify refused the pasted cosign signature: %v", err)
	}
}

func TestWeSignAndCosignVerifies(t *testing.T) {
	c := newCosign(t)
	privPEM, pubPEM, err := GenerateKeyPair([]byte(cosignPassword))
	if err != nil {
		t.Fatal(err)
	}
	c.write("our.pub", pubPEM)
	spec := testSpec()
	c.write("profile.json", mustCanonical(t, spec))
	sig := mustSign(t, spec, mustLoad(t, privPEM, []byte(cosignPassword)))
	if !c.verifyBlob("our.pub", "profile.json", sig) {
		t.Fatal("cosign verify-blob refused our signature")
	}
}

func TestCosignKeyPairWorksWithUs(t *testing.T) {
	c := newCosign(t)
	if _, ok := c.run("generate-key-pair"); !ok {
		t.Fatal("cosign generate-key-pair failed")
	}
	key := mustLoad(t, c.read("cosign.key"), []byte(cosignPassword))
	pub, err := ParsePublicKey(c.read("cosign.pub"))
	if err != nil {
		t.Fatalf("ParsePublicKey(cosign.pub): %v", err)
	}
	if key.Public().ID() != pub.ID() {
		t.Fatalf("cosign.key's public half is %s, cosign.pub is %s", key.Public().ID(), pub.ID())
	}
	if _, err := LoadPrivateKey(c.read("cosign.key"), []byte("not the password")); !errors.Is(err, ErrWrongPassword) {
		t.Errorf("cosign.key with a wrong password: got %v, want ErrWrongPassword", err)
	}

	spec := testSpec()
	c.write("profile.json", mustCanonical(t, spec))
	if !c.verifyBlob("cosign.pub", "profile.json", mustSign(t, spec, key)) {
		t.Error("cosign verify-blob refused our signature made with cosign's key")
	}
	if _, err := Verify(spec, c.signBlob("cosign.key", "profile.json"), []PublicKey{pub}); err != nil {
		t.Errorf("our Verify refused cosign's signature made with cosign's key: %v", err)
	}
}

func TestOneByteTamperRefusedByCosignAndUs(t *testing.T) {
	c := newCosign(t)
	if _, ok := c.run("generate-key-pair"); !ok {
		t.Fatal("cosign generate-key-pair failed")
	}
	pub, err := ParsePublicKey(c.read("cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec()
	blob := mustCanonical(t, spec)
	c.write("profile.json", blob)
	sig := c.signBlob("cosign.key", "profile.json")

	// One byte of the bond's name: the tampered bytes are still a valid spec.
	tampered := bytes.Replace(blob, []byte(`"bond0"`), []byte(`"bond1"`), 1)
	if bytes.Equal(tampered, blob) {
		t.Fatal("test bug: nothing tampered")
	}
	c.write("tampered.json", tampered)
	if c.verifyBlob("cosign.pub", "tampered.json", sig) {
		t.Error("cosign verify-blob accepted the tampered blob")
	}
	var tamperedSpec v1alpha1.EdgeProfileSpec
	if err := json.Unmarshal(tampered, &tamperedSpec); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(tamperedSpec, sig, []PublicKey{pub}); !errors.Is(err, ErrSignatureInvalid) {
		t.Errorf("our Verify of the tampered spec: got %v, want ErrSignatureInvalid", err)
	}
	// And every other single byte: ours refuses them all (cosign is checked on one, above).
	for i := range blob {
		b := bytes.Clone(blob)
		b[i] ^= 0x01
		if _, ok := verifyBlob(b, sig, []PublicKey{pub}); ok {
			t.Fatalf("the blob with byte %d changed still verifies", i)
		}
	}
	// The untampered blob still verifies, on both sides.
	if !c.verifyBlob("cosign.pub", "profile.json", sig) {
		t.Error("cosign verify-blob refused the untampered blob")
	}
	if _, err := Verify(spec, sig, []PublicKey{pub}); err != nil {
		t.Errorf("our Verify refused the untampered spec: %v", err)
	}
}

// cosign reads P-384, Ed25519 and RSA keys from its key files too, and signs with the same
// algorithms as this package for each: SHA-256 whatever the curve, pure Ed25519, PKCS#1 v1.5.
// Both PEM block types cosign has used are read by both.
func TestCosignAlgorithmsMatchOurs(t *testing.T) {
	for _, tc := range []struct {
		name, blockType string
		pkcs8           []byte
	}{
		{"P-256 (older block type)", PEMTypeEncryptedCosign, testKeyP256},
		{"P-384", PEMTypeEncryptedSigstore, testKeyP384},
		{"Ed25519", PEMTypeEncryptedSigstore, testKeyEd25519},
		{"RSA-2048", PEMTypeEncryptedSigstore, testKeyRSA2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCosign(t)
			der, _ := pem.Decode(tc.pkcs8)
			sealed, err := encryptKey(der.Bytes, []byte(cosignPassword))
			if err != nil {
				t.Fatal(err)
			}
			keyPEM := pem.EncodeToMemory(&pem.Block{Type: tc.blockType, Bytes: sealed})
			key := mustLoad(t, keyPEM, []byte(cosignPassword))
			c.write("k.key", keyPEM)
			c.write("k.pub", key.Public().PEM())
			spec := testSpec()
			c.write("profile.json", mustCanonical(t, spec))

			if _, err := Verify(spec, c.signBlob("k.key", "profile.json"), []PublicKey{key.Public()}); err != nil {
				t.Errorf("our Verify refused cosign's %s signature: %v", tc.name, err)
			}
			if !c.verifyBlob("k.pub", "profile.json", mustSign(t, spec, key)) {
				t.Errorf("cosign verify-blob refused our %s signature", tc.name)
			}
		})
	}
}
