package profile

import (
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestTrustedKeys reads a ConfigMap's data as the operator's admission and the node agent
// both read it: every data key one PEM document, in the order of the keys; none at all, or a
// damaged one, is an error naming the ConfigMap and the data key.
func TestTrustedKeys(t *testing.T) {
	a, b := mustLoad(t, testKeyP256, nil).Public(), mustLoad(t, testKeyEd25519, nil).Public()
	const source = "ConfigMap nodewright-system/nodewright-profile-keys"
	tests := []struct {
		name    string
		data    map[string]string
		want    []KeyID
		wantErr string
		is      error
	}{
		{"one key", map[string]string{"cosign.pub": string(a.PEM())}, []KeyID{a.ID()}, "", nil},
		{"two documents, in the order of their names", map[string]string{"z.pub": string(a.PEM()), "a.pub": string(b.PEM())},
			[]KeyID{b.ID(), a.ID()}, "", nil},
		{"two blocks in one document", map[string]string{"both.pub": string(a.PEM()) + string(b.PEM())}, []KeyID{a.ID(), b.ID()}, "", nil},
		{"no data", nil, nil, source + " holds none", ErrNoTrustedKeys},
		{"a damaged key", map[string]string{"cosign.pub": string(a.PEM()), "x.pub": "-----BEGIN PUBLIC KEY-----\nnot base64\n"},
			nil, source + ", key x.pub: ", ErrMalformedKey},
		{"a private key", map[string]string{"cosign.key": string(testKeyP256)}, nil, source + ", key cosign.key: ", ErrMalformedKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := TrustedKeys(source, tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, tc.is) {
					t.Fatalf("error %v; want one containing %q, wrapping %v", err, tc.wantErr, tc.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []KeyID
			for _, k := range keys {
				got = append(got, k.ID())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("keys %v; want %v", got, tc.want)
			}
		})
	}
}

// TestVerifyProfile: a profile signed by a trusted key is described as the profile in force
// (name, version, digest, the key's id); unsigned, signed by another key, changed after it
// was signed, or with no key to check it, it is refused, the error naming the field.
func TestVerifyProfile(t *testing.T) {
	trusted, other := mustLoad(t, testKeyP256, nil), mustLoad(t, testKeyEd25519, nil)
	spec := testSpec()
	signed := &v1alpha1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: "store-munich"}, Spec: spec, Signature: mustSign(t, spec, trusted)}
	active, err := VerifyProfile(signed, []PublicKey{other.Public(), trusted.Public()})
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := Digest(spec)
	if want := (v1alpha1.ActiveProfile{Name: "store-munich", Version: "1.4.0", Digest: digest, KeyID: string(trusted.Public().ID())}); active != want {
		t.Errorf("active %+v; want %+v", active, want)
	}
	changed := signed.DeepCopy()
	changed.Spec.Network.AllowedBondModes = []v1alpha1.BondMode{v1alpha1.BondModeBalanceRR}
	unsigned := signed.DeepCopy()
	unsigned.Signature = nil
	byOther := signed.DeepCopy()
	byOther.Signature = mustSign(t, spec, other)
	for _, tc := range []struct {
		name string
		p    *v1alpha1.EdgeProfile
		keys []PublicKey
		is   error
	}{
		{"unsigned", unsigned, []PublicKey{trusted.Public()}, ErrUnsigned},
		{"signed by a key not trusted", byOther, []PublicKey{trusted.Public()}, ErrSignatureInvalid},
		{"changed after it was signed", changed, []PublicKey{trusted.Public()}, ErrSignatureInvalid},
		{"no trusted key", signed, nil, ErrNoTrustedKeys},
	} {
		_, err := VerifyProfile(tc.p, tc.keys)
		if !errors.Is(err, tc.is) || !strings.HasPrefix(err.Error(), "signature: ") {
			t.Errorf("%s: %v; want signature: ... wrapping %v", tc.name, err, tc.is)
		}
	}
}
