package profile

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

func TestSignVerifyEveryAlgorithm(t *testing.T) {
	for name, pkcs8 := range map[string][]byte{
		"P-256": testKeyP256, "P-384": testKeyP384, "Ed25519": testKeyEd25519, "RSA-2048": testKeyRSA2048,
	} {
		t.Run(name, func(t *testing.T) {
			key := mustLoad(t, pkcs8, nil)
			spec := testSpec()
			sig := mustSign(t, spec, key)
			id, err := Verify(spec, sig, []PublicKey{key.Public()})
			if err != nil || id != key.Public().ID() {
				t.Fatalf("Verify = %s, %v; want %s", id, err, key.Public().ID())
			}
			if n := base64.StdEncoding.EncodedLen(len(sig)); n > maxSignatureBase64 {
				t.Errorf("the signature takes %d characters of base64; the CRD allows %d", n, maxSignatureBase64)
			}
		})
	}
}

// Any change to any field of the spec after signing fails verification.
func TestVerifyRefusesATamperedSpec(t *testing.T) {
	key := mustLoad(t, testKeyP256, nil)
	signed := testSpec()
	sig := mustSign(t, signed, key)
	trusted := []PublicKey{key.Public()}

	for _, tc := range []struct {
		name   string
		tamper func(*v1alpha1.EdgeProfileSpec)
	}{
		{"version", func(s *v1alpha1.EdgeProfileSpec) { s.Version = "1.4.1" }},
		{"version with a v", func(s *v1alpha1.EdgeProfileSpec) { s.Version = "v1.4.0" }},
		{"topology", func(s *v1alpha1.EdgeProfileSpec) { s.Topology = v1alpha1.TopologyThreeNode }},
		{"storage backend", func(s *v1alpha1.EdgeProfileSpec) { s.Storage.Backend = v1alpha1.StorageLonghorn }},
		{"storage class", func(s *v1alpha1.EdgeProfileSpec) { s.Storage.StorageClassName = "linstor-r3" }},
		{"storage class removed", func(s *v1alpha1.EdgeProfileSpec) { s.Storage.StorageClassName = "" }},
		{"os", func(s *v1alpha1.EdgeProfileSpec) { s.OS = v1alpha1.HostOSTalos }},
		{"bond interface, one byte", func(s *v1alpha1.EdgeProfileSpec) { s.Network.BondInterface = "bond1" }},
		{"bond mode", func(s *v1alpha1.EdgeProfileSpec) { s.Network.BondMode = v1alpha1.BondModeActiveBackup }},
		{"member added", func(s *v1alpha1.EdgeProfileSpec) {
			s.Network.MemberInterfaces = append(s.Network.MemberInterfaces, "enp3s0")
		}},
		{"members reordered", func(s *v1alpha1.EdgeProfileSpec) { s.Network.MemberInterfaces = []string{"enp2s0", "enp1s0"} }},
		{"VLAN", func(s *v1alpha1.EdgeProfileSpec) { s.Network.StorageVLAN = ptr.To[int32](121) }},
		{"VLAN removed", func(s *v1alpha1.EdgeProfileSpec) { s.Network.StorageVLAN = nil }},
		{"legacy removed", func(s *v1alpha1.EdgeProfileSpec) { s.Legacy = nil }},
		{"legacy config map", func(s *v1alpha1.EdgeProfileSpec) { s.Legacy.ConfigMapRef.Name = "other" }},
		{"legacy daemon set namespace", func(s *v1alpha1.EdgeProfileSpec) { s.Legacy.DaemonSetRef.Namespace = "default" }},
		{"legacy event component", func(s *v1alpha1.EdgeProfileSpec) { s.Legacy.EventComponent = "node-init2" }},
		{"heartbeat", func(s *v1alpha1.EdgeProfileSpec) { s.Thresholds.HeartbeatStaleAfter.Duration = 46 * time.Second }},
		{"heartbeat to its default", func(s *v1alpha1.EdgeProfileSpec) { s.Thresholds.HeartbeatStaleAfter = metav1.Duration{} }},
		{"DRBD timeout, one nanosecond", func(s *v1alpha1.EdgeProfileSpec) { s.Thresholds.DRBDSyncTimeout.Duration += time.Nanosecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec()
			spec.Legacy = spec.Legacy.DeepCopy()
			tc.tamper(&spec)
			_, err := Verify(spec, sig, trusted)
			if !errors.Is(err, ErrSignatureInvalid) {
				t.Fatalf("got %v, want ErrSignatureInvalid", err)
			}
			if !strings.Contains(err.Error(), "the spec was changed after it was signed, or it was signed with a key that is not trusted") {
				t.Errorf("unhelpful: %v", err)
			}
		})
	}
	// The untampered spec, and one that differs only in how its durations were spelled or in an
	// explicit default, still verify: the canonical encoding is the same.
	equivalent := testSpec()
	equivalent.Thresholds.DRBDSyncTimeout.Duration = 5400 * time.Second
	for _, spec := range []v1alpha1.EdgeProfileSpec{signed, equivalent} {
		if _, err := Verify(spec, sig, trusted); err != nil {
			t.Errorf("an equivalent spec does not verify: %v", err)
		}
	}
	// A one-bit change of the signature fails too.
	for i := range sig {
		bad := []byte(string(sig))
		bad[i] ^= 0x80
		if _, err := Verify(signed, bad, trusted); !errors.Is(err, ErrSignatureInvalid) {
			t.Fatalf("signature with byte %d changed: got %v", i, err)
		}
	}
}

func TestVerifyErrors(t *testing.T) {
	key := mustLoad(t, testKeyP256, nil)
	other := mustLoad(t, testKeyEd25519, nil)
	third := mustLoad(t, testKeyP384, nil)
	spec := testSpec()
	sig := mustSign(t, spec, key)

	for _, tc := range []struct {
		name    string
		sig     []byte
		trusted []PublicKey
		wantErr error
		want    string
	}{
		{"untrusted key", sig, []PublicKey{other.Public()}, ErrSignatureInvalid,
			"the signature does not verify: it is not a signature of this spec by the trusted key " + string(other.Public().ID())},
		{"untrusted among several", sig, []PublicKey{other.Public(), third.Public()}, ErrSignatureInvalid,
			"not a signature of this spec by any of the 2 trusted keys (" + string(other.Public().ID()) + ", " + string(third.Public().ID()) + ")"},
		{"unsigned", nil, []PublicKey{key.Public()}, ErrUnsigned, "the profile is not signed (signature is empty)"},
		{"no trusted keys", sig, nil, ErrNoTrustedKeys, "no trusted public keys are configured"},
		{"garbage signature", []byte("x"), []PublicKey{key.Public()}, ErrSignatureInvalid, "not a signature of this spec"},
		{"base64 twice", []byte(base64.StdEncoding.EncodeToString(sig)), []PublicKey{key.Public()}, ErrSignatureInvalid,
			"the signature is base64-encoded twice"},
		{"a zero PublicKey", sig, []PublicKey{{}}, ErrSignatureInvalid, "not a signature of this spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := Verify(spec, tc.sig, tc.trusted)
			if !errors.Is(err, tc.wantErr) || id != "" {
				t.Fatalf("got %q, %v; want %v", id, err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}

	// With several trusted keys, the one that signed is named.
	id, err := Verify(spec, sig, []PublicKey{other.Public(), key.Public(), third.Public()})
	if err != nil || id != key.Public().ID() {
		t.Errorf("got %s, %v; want %s", id, err, key.Public().ID())
	}
}

func TestSignRefusesAnInvalidSpec(t *testing.T) {
	spec := testSpec()
	spec.Network.StorageVLAN = ptr.To[int32](5000)
	_, err := Sign(spec, mustLoad(t, testKeyP256, nil))
	var fes FieldErrors
	if !errors.As(err, &fes) || fes[0].Error() != "spec.network.storageVLAN: must be between 1 and 4094, got 5000" {
		t.Fatalf("got %v", err)
	}
	if _, err := Sign(testSpec(), nil); err == nil {
		t.Error("signed without a key")
	}
}
