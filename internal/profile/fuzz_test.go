package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// FuzzDecode: Decode never panics, and what it accepts is a valid spec whose canonical encoding
// survives writing the profile out again, as YAML or as JSON, and reading it back.
func FuzzDecode(f *testing.F) {
	asJSON, _ := yaml.YAMLToJSON([]byte(testProfileYAML))
	for _, seed := range []string{
		testProfileYAML,
		string(asJSON),
		testProfileYAML + "signature: MEUCIQDx\n",
		strings.Replace(testProfileYAML, "storageVLAN: 120", "storageVLAN: 5000", 1),
		strings.Replace(testProfileYAML, "drbdSyncTimeout: 1h30m", "drbdSyncTimeout: 1.5h", 1),
		strings.Replace(testProfileYAML, "  legacy:", "  unknown: 1\n  legacy:", 1),
		"apiVersion: nodewright.spectrocloud.com/v1alpha1\nkind: EdgeProfile\nspec:\n  version: v0.1.0-rc.1\n  topology: SingleNode\n  storage: {backend: TopoLVM}\n  os: Talos\n  network: {bondInterface: b, bondMode: broadcast}\n",
		"a: &a [*a, *a]\n",
		"---\n---\n",
		"{}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode(data)
		if err != nil {
			if p != nil {
				t.Fatal("Decode returned a profile with an error")
			}
			return
		}
		if err := Validate(p.Spec); err != nil {
			t.Fatalf("Decode accepted a spec Validate refuses: %v", err)
		}
		want, err := Canonical(p.Spec)
		if err != nil {
			t.Fatalf("Canonical of a decoded spec: %v", err)
		}
		if again, _ := Canonical(p.Spec); !bytes.Equal(again, want) {
			t.Fatalf("Canonical is not stable:\n%s\n%s", want, again)
		}
		for _, marshal := range []func(any) ([]byte, error){yaml.Marshal, json.Marshal} {
			out, err := marshal(p)
			if err != nil {
				t.Fatalf("writing the profile out: %v", err)
			}
			p2, err := Decode(out)
			if err != nil {
				t.Fatalf("the profile written out does not decode: %v\n%s", err, out)
			}
			got, err := Canonical(p2.Spec)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the canonical encoding changed through writing out:\n%s\n%s (%v)", want, got, err)
			}
			if !bytes.Equal(p2.Signature, p.Signature) {
				t.Fatal("the signature changed through writing out")
			}
		}
	})
}

// FuzzCanonical: for any spec, Canonical either refuses a string that is not UTF-8 or writes
// RFC 8785 JSON that holds the same value as the spec's JSON, and reading it back as a spec
// encodes to the same bytes.
func FuzzCanonical(f *testing.F) {
	f.Add("1.4.0", "linstor-r2", "node-init", "enp1s0", int32(120), int64(45*time.Second), int64(0), true, true)
	f.Add("", "", "", "", int32(0), int64(0), int64(0), false, false)
	f.Add("1.0.0-α", "<&>\u2028\"\\", "\x00\x1f\x7f", "\U0001F600", int32(-1), int64(-1), int64(1<<62), true, true)
	f.Add("a\xffb", "", "", "", int32(1), int64(1), int64(1), false, false)
	f.Fuzz(func(t *testing.T, version, class, component, member string, vlan int32, hb, drbd int64, withLegacy, withVLAN bool) {
		spec := v1alpha1.EdgeProfileSpec{
			Version: version, Topology: v1alpha1.Topology(member), OS: v1alpha1.HostOSKind(class),
			Storage: v1alpha1.ProfileStorage{Backend: v1alpha1.StorageBackendKind(component), StorageClassName: class},
			Network: v1alpha1.ProfileNetwork{BondInterface: member, BondMode: v1alpha1.BondMode(version), MemberInterfaces: []string{member, class}},
			Thresholds: v1alpha1.ProfileThresholds{
				HeartbeatStaleAfter: metav1.Duration{Duration: time.Duration(hb)},
				DRBDSyncTimeout:     metav1.Duration{Duration: time.Duration(drbd)},
			},
		}
		if withVLAN {
			spec.Network.StorageVLAN = ptr.To(vlan)
		}
		if withLegacy {
			spec.Legacy = &v1alpha1.LegacySource{EventComponent: component,
				ConfigMapRef: v1alpha1.NamespacedObjectReference{Namespace: class, Name: version}}
		}
		got, err := Canonical(spec)
		allUTF8 := utf8.ValidString(version) && utf8.ValidString(class) && utf8.ValidString(component) && utf8.ValidString(member)
		if err != nil {
			if allUTF8 {
				t.Fatalf("Canonical refused a spec of valid UTF-8: %v", err)
			}
			return
		}
		if !allUTF8 {
			t.Fatal("Canonical accepted a string that is not UTF-8")
		}
		if !json.Valid(got) {
			t.Fatalf("not JSON: %s", got)
		}
		// The same JSON value as encoding/json writes for the defaulted spec.
		plain, _ := json.Marshal(WithDefaults(spec))
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(plain, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("a different value:\n%s\n%s", got, plain)
		}
		// A fixed point: the canonical form of the canonical form is itself.
		var tree any
		dec := json.NewDecoder(bytes.NewReader(got))
		dec.UseNumber()
		if err := dec.Decode(&tree); err != nil {
			t.Fatal(err)
		}
		var again bytes.Buffer
		if err := writeJCS(&again, tree); err != nil || !bytes.Equal(again.Bytes(), got) {
			t.Fatalf("not canonical:\n%s\n%s (%v)", got, again.Bytes(), err)
		}
		// Read back as a spec, it encodes to the same bytes.
		var back v1alpha1.EdgeProfileSpec
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("reading the canonical bytes as a spec: %v", err)
		}
		if round, err := Canonical(back); err != nil || !bytes.Equal(round, got) {
			t.Fatalf("the spec read back encodes differently:\n%s\n%s (%v)", got, round, err)
		}
	})
}

// FuzzKeys: reading keys and checking signatures never panic, whatever the bytes; a private key
// that loads signs, and its public half verifies the signature.
func FuzzKeys(f *testing.F) {
	encrypted, pub, err := GenerateKeyPair([]byte("pw"))
	if err != nil {
		f.Fatal(err)
	}
	key, err := LoadPrivateKey(testKeyP256, nil)
	if err != nil {
		f.Fatal(err)
	}
	sig, err := Sign(testSpec(), key)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{encrypted, pub, testKeyP256, testKeyP384, testKeyEd25519, testKeyRSA2048, key.Public().PEM(), []byte("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n")} {
		f.Add(seed, []byte("pw"), sig)
	}
	spec := testSpec()
	f.Fuzz(func(t *testing.T, pemBytes, password, signature []byte) {
		if priv, err := LoadPrivateKey(pemBytes, password); err == nil {
			s, err := Sign(spec, priv)
			if err != nil {
				t.Fatalf("a loaded key does not sign: %v", err)
			}
			if _, err := Verify(spec, s, []PublicKey{priv.Public()}); err != nil {
				t.Fatalf("a loaded key's signature does not verify: %v", err)
			}
		} else if !errors.Is(err, ErrMalformedKey) && !errors.Is(err, ErrUnsupportedKey) && !errors.Is(err, ErrWrongPassword) {
			t.Fatalf("LoadPrivateKey error wraps no sentinel: %v", err)
		}
		keys, err := ParsePublicKeys(pemBytes)
		if err != nil {
			if !errors.Is(err, ErrMalformedKey) && !errors.Is(err, ErrUnsupportedKey) {
				t.Fatalf("ParsePublicKeys error wraps no sentinel: %v", err)
			}
			return
		}
		for _, k := range keys {
			if _, err := ParsePublicKey(k.PEM()); err != nil {
				t.Fatalf("a parsed key does not round-trip: %v", err)
			}
		}
		if _, err := Verify(spec, signature, keys); err != nil &&
			!errors.Is(err, ErrSignatureInvalid) && !errors.Is(err, ErrUnsigned) {
			t.Fatalf("Verify: unexpected error %v", err)
		}
	})
}
