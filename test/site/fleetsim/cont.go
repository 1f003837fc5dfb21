package fleetsim

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// continueToken is a list's continuation, encoded as the kube-apiserver's etcd3 store encodes
// it: base64 (URL alphabet, unpadded) of {"v":"meta.k8s.io/v1","rv":N,"start":"key\x00"}.
// rv is the list's resourceVersion; start is where the next page starts.
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

const continueAPIVersion = "meta.k8s.io/v1"

func encodeContinue(rv uint64, lastKey string) (string, error) {
	data, err := json.Marshal(continueToken{APIVersion: continueAPIVersion, ResourceVersion: int64(rv), StartKey: lastKey + "\x00"})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(data), nil
}

// decodeContinue reads a continue token a client sent back; an error says why it is not
// valid (the API server answers 400 then). The token is untrusted text.
func decodeContinue(token string) (rv uint64, startKey string, err error) {
	data, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, "", fmt.Errorf("continue key is not valid: %w", err)
	}
	var c continueToken
	if err := json.Unmarshal(data, &c); err != nil {
		return 0, "", fmt.Errorf("continue key is not valid: %w", err)
	}
	switch {
	case c.APIVersion != continueAPIVersion:
		return 0, "", fmt.Errorf("continue key is not valid: server does not recognize this encoded key (v is %q, not %q)", c.APIVersion, continueAPIVersion)
	case c.ResourceVersion == 0:
		return 0, "", fmt.Errorf("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	case c.ResourceVersion < 0:
		return 0, "", fmt.Errorf("continue key is not valid: resourceVersion %d is negative", c.ResourceVersion)
	case c.StartKey == "":
		return 0, "", fmt.Errorf("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
	case strings.Contains(c.StartKey, "/../") || strings.HasPrefix(c.StartKey, "../"):
		// The API server refuses a key that climbs out of the resource's prefix.
		return 0, "", fmt.Errorf("continue key is not valid: the start key climbs out of the resource")
	}
	return uint64(c.ResourceVersion), c.StartKey, nil
}
