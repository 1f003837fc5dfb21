package kairosplay

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/hostos"
)

var update = flag.Bool("update", false, "rewrite testdata/kairos-release-v3.4.2 from Release")

// TestReleaseGolden pins the played kairos-release (testdata/README.md says where its keys come
// from), and checks that the keys kairos-init's validation requires are there and that
// internal/hostos parses it.
func TestReleaseGolden(t *testing.T) {
	reg := Registry{Dir: t.TempDir()}
	ref, err := reg.AddVersion("v3.4.2")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := reg.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, ReleaseFile))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "kairos-release-v3.4.2")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("kairos-release:\n%s\nwant (%s):\n%s", got, golden, want)
	}
	vars, err := hostos.ParseOSRelease(got)
	if err != nil {
		t.Fatal(err)
	}
	// kairos-init's validate (pkg/validation/validate.go) requires these, not empty.
	for _, k := range []string{"KAIROS_ID", "KAIROS_ID_LIKE", "KAIROS_NAME", "KAIROS_VERSION", "KAIROS_ARCH", "KAIROS_TARGETARCH",
		"KAIROS_FLAVOR", "KAIROS_FLAVOR_RELEASE", "KAIROS_FAMILY", "KAIROS_MODEL", "KAIROS_VARIANT", "KAIROS_BUG_REPORT_URL",
		"KAIROS_HOME_URL", "KAIROS_RELEASE"} {
		if vars[k] == "" {
			t.Errorf("%s missing", k)
		}
	}
	repo, _, _ := strings.Cut(ref, "@")
	if vars["KAIROS_IMAGE_REPO"] != repo || ReleaseValue(string(got), "KAIROS_IMAGE_REPO") != repo {
		t.Errorf("KAIROS_IMAGE_REPO %q, want %q (the reference without its digest)", vars["KAIROS_IMAGE_REPO"], repo)
	}
	// The sample of a real release image in internal/hostos's testdata has the same keys but
	// for those kairos-init does not write (KAIROS_IMAGE_REPO and the release's others).
	sample, err := os.ReadFile(filepath.Join("..", "..", "..", "internal", "hostos", "testdata", "os-release", "kairos-release-ubuntu-24.04-standard"))
	if err != nil {
		t.Fatal(err)
	}
	sampleVars, err := hostos.ParseOSRelease(sample)
	if err != nil {
		t.Fatal(err)
	}
	for k := range sampleVars {
		if _, ok := vars[k]; !ok {
			t.Errorf("the played kairos-release lacks %s, which the sample has", k)
		}
	}
}

func TestParseRef(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		ref string
		ok  bool
	}{
		{"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2@sha256:" + digest, true},
		{"localhost:5000/k/ubuntu:v1@sha256:" + digest, true},
		{"quay.io/kairos/ubuntu:v3.4.2-k3sv1.32.4+k3s1@sha256:" + digest, true},
		{"quay.io/kairos/ubuntu:v1", false},
		{"quay.io/kairos/ubuntu@sha256:" + digest, false},
		{"quay.io/kairos/ubuntu:v1@sha256:" + digest[:63], false},
		{"quay.io/kairos/ubuntu:v1@sha256:" + strings.ToUpper(digest), false},
		{"../../etc:v1@sha256:" + digest, false},
		{"", false},
	} {
		_, _, d, err := ParseRef(tc.ref)
		if (err == nil) != tc.ok || tc.ok && d != digest {
			t.Errorf("ParseRef(%q): %q, %v; want ok=%v", tc.ref, d, err, tc.ok)
		}
	}
}

func TestAddVersion(t *testing.T) {
	reg := Registry{Dir: t.TempDir()}
	a, err := reg.AddVersion("v3.4.2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := reg.AddVersion("v3.4.2")
	if err != nil || a != b {
		t.Fatalf("the same version gave %s then %s (%v)", a, b, err)
	}
	c, err := reg.AddVersion("v3.5.0")
	if err != nil || c == a {
		t.Fatalf("another version gave %s (%v)", c, err)
	}
	for _, bad := range []string{"", "3.4.2", "v3.4", "v3.4.2/../x", "v3.4.2 x"} {
		if _, err := reg.AddVersion(bad); err == nil {
			t.Errorf("AddVersion(%q) accepted", bad)
		}
	}
}
