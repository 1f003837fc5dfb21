package profile

import (
	"fmt"
	"slices"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TrustedKeys reads the trusted public keys from the data of the ConfigMap that holds them
// (source names it in errors): every data key is one PEM document with one or more "PUBLIC
// KEY" blocks (cosign.pub, say), read in the order of the data keys. No key at all is
// ErrNoTrustedKeys; a key that does not parse is an error naming its data key. The operator's
// admission (internal/profiletrust) and the node agent both read the keys with it.
func TrustedKeys(source string, data map[string]string) ([]PublicKey, error) {
	names := make([]string, 0, len(data))
	for name := range data {
		names = append(names, name)
	}
	slices.Sort(names)
	var keys []PublicKey
	for _, name := range names {
		k, err := ParsePublicKeys([]byte(data[name]))
		if err != nil {
			return nil, fmt.Errorf("%s, key %s: %w", source, name, err)
		}
		keys = append(keys, k...)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s holds none", ErrNoTrustedKeys, source)
	}
	return keys, nil
}

// VerifyProfile checks p's signature against the trusted keys and describes p as the profile
// in force. The error names what is wrong, starting with the field ("signature: ...", wrapping
// ErrNoTrustedKeys, ErrUnsigned or ErrSignatureInvalid). The operator's admission
// (internal/profiletrust) and the node agent both verify with it.
func VerifyProfile(p *v1alpha1.EdgeProfile, trusted []PublicKey) (v1alpha1.ActiveProfile, error) {
	id, err := Verify(p.Spec, p.Signature, trusted)
	if err != nil {
		return v1alpha1.ActiveProfile{}, fmt.Errorf("signature: %w", err)
	}
	digest, err := Digest(p.Spec)
	if err != nil {
		return v1alpha1.ActiveProfile{}, fmt.Errorf("spec: %w", err)
	}
	return v1alpha1.ActiveProfile{Name: p.Name, Version: p.Spec.Version, Digest: digest, KeyID: string(id)}, nil
}
