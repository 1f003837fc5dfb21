package cli

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzOSImageAndName: whatever --image is, checkOSImage does not panic; an image it takes is
// pinned by digest with a tag before it, and the default name made from it is a name the API
// server takes.
func FuzzOSImageAndName(f *testing.F) {
	for _, seed := range []string{osImageV2, "quay.io/kairos/ubuntu:v2", "localhost:5000/k:_.-+A@sha256:" + strings.Repeat("0", 64),
		"r:" + strings.Repeat("x", 128) + "@sha256:" + strings.Repeat("f", 64), "", "@sha256:", "a:b@sha256:" + strings.Repeat("a", 63)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, image string) {
		if checkOSImage(image) != nil {
			return
		}
		if !osDigestPattern.MatchString(image) || !strings.Contains(strings.Split(image, "@")[0], ":") {
			t.Fatalf("%q taken without a digest or a tag", image)
		}
		if name := defaultOSPolicyName(image); len(validation.IsDNS1123Subdomain(name)) > 0 || len(name) > 63 {
			t.Fatalf("%q: the default name %q is not one the API server takes", image, name)
		}
	})
}
