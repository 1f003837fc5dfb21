package osimage_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osimage"
)

func TestAnImageIsAllowedByItsRepositoryOrItself(t *testing.T) {
	const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	pinned := "registry.local:5000/kairos/ubuntu:24.04-v3.5.0" + digest
	p := &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: nwv1.EdgeProfileSpec{Version: "1.0.0",
		OSImages: []string{"quay.io/kairos/ubuntu", pinned}}}
	for image, want := range map[string]string{
		"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0" + digest: "",
		pinned: "",
		"registry.local:5000/kairos/ubuntu:24.04-v3.6.0" + digest: "neither registry.local:5000/kairos/ubuntu:24.04-v3.6.0" + digest + " nor its repository registry.local:5000/kairos/ubuntu",
		"quay.io/kairos/ubuntu-evil:v1" + digest:                  "allows only quay.io/kairos/ubuntu, " + pinned,
		"quay.io/kairos:ubuntu" + digest:                          "nor its repository quay.io/kairos",
	} {
		got := osimage.Allowed(p, image)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: %q; want %q", image, got, want)
		}
	}
	p.Spec.OSImages = nil
	if got := osimage.Allowed(p, pinned); !strings.Contains(got, "allows no OS image (spec.osImages is empty)") {
		t.Errorf("an empty list: %q", got)
	}
}
