package kairosplay

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Registry is a played OCI registry of Kairos images, in a folder: one folder per image, named
// after its digest's hex, holding the image's /etc/kairos-release (ReleaseFile) and its full
// reference (RefFile). Images are found by digest only, as a pull of REPOSITORY:TAG@sha256:...
// is: the repository and tag of the reference are not looked at.
type Registry struct {
	Dir string
}

// The files of an image's folder (and of a slot's, host.go).
const (
	ReleaseFile = "kairos-release"
	RefFile     = "image"
)

// DefaultRepository is the repository AddVersion puts its images in, Kairos's own for its
// Ubuntu 24.04 images (KAIROS_REGISTRY_AND_ORG "quay.io/kairos", flavor "ubuntu").
const DefaultRepository = "quay.io/kairos/ubuntu"

// imageRef is a reference pinned by digest, REPOSITORY:TAG@sha256:<64 hex>: the pattern the
// API's CRDs check (api/v1alpha1 OSImageOperation.image), with the parts captured.
var imageRef = regexp.MustCompile(`^([a-z0-9]([a-z0-9._-]*[a-z0-9])?(?::[0-9]+)?(?:/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*):([A-Za-z0-9_][A-Za-z0-9_.+-]{0,127})@sha256:([a-f0-9]{64})$`)

// ParseRef splits an image reference REPOSITORY:TAG@sha256:<64 hex> into its parts.
func ParseRef(ref string) (repository, tag, digest string, err error) {
	m := imageRef.FindStringSubmatch(ref)
	if m == nil {
		return "", "", "", fmt.Errorf("image %q: not REPOSITORY:TAG@sha256:<64 hex digits>", ref)
	}
	return m[1], m[4], m[5], nil
}

// version is what AddVersion accepts: Kairos's vX.Y.Z, with an optional suffix.
var version = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.+-]+)?$`)

// AddVersion adds to the registry the Kairos image of version (e.g. "v3.4.2"): a standard
// Ubuntu 24.04 image of DefaultRepository, tagged as Kairos tags its images
// (24.04-standard-amd64-generic-VERSION), its kairos-release as kairos-init and Kairos's build
// write it (Release). It returns the image's reference, pinned by the digest of its release
// file: the same version gives the same reference.
func (r Registry) AddVersion(v string) (string, error) {
	if !version.MatchString(v) {
		return "", fmt.Errorf("version %q: not vX.Y.Z", v)
	}
	label := "24.04-standard-amd64-generic-" + v
	release := Release(DefaultRepository+":"+label, label, v)
	sum := sha256.Sum256([]byte(release))
	ref := DefaultRepository + ":" + label + "@sha256:" + hex.EncodeToString(sum[:])
	return ref, r.Add(ref, release)
}

// Add adds the image ref with release as its /etc/kairos-release.
func (r Registry) Add(ref, release string) error {
	_, _, digest, err := ParseRef(ref)
	if err != nil {
		return err
	}
	dir := filepath.Join(r.Dir, digest)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return errors.Join(os.WriteFile(filepath.Join(dir, ReleaseFile), []byte(release), 0o644),
		os.WriteFile(filepath.Join(dir, RefFile), []byte(ref+"\n"), 0o644))
}

// Image is the folder of the image ref, found by its digest; an error when the registry does
// not have it.
func (r Registry) Image(ref string) (string, error) {
	_, _, digest, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(r.Dir, digest)
	if _, err := os.Stat(filepath.Join(dir, ReleaseFile)); err != nil {
		return "", fmt.Errorf("image %s: not in the registry: manifest unknown", ref)
	}
	return dir, nil
}

// Release is an /etc/kairos-release of a Kairos standard Ubuntu 24.04 amd64 image, whose
// KAIROS_IMAGE_REPO is imageRepo (REPOSITORY:TAG, the reference without its digest), and
// KAIROS_IMAGE_LABEL label. The keys are those kairos-init writes (its GetKairosReleaseStage,
// kairos-io/kairos-init pkg/stages/steps_init.go, commit
// ccd9c8929745047e2786763f10a1a12fd198ec1f), and those Kairos's release images carry besides,
// which the same function's comment lists (KAIROS_IMAGE_REPO, KAIROS_VERSION_ID,
// KAIROS_GITHUB_REPO, KAIROS_ARTIFACT, KAIROS_PRETTY_NAME) and kairos-init's commit 0b23967
// wrote (KAIROS_IMAGE_LABEL, KAIROS_REGISTRY_AND_ORG), and KAIROS_FRAMEWORK_VERSION, which
// the sample of a standard image in internal/hostos's testdata carries. The format is the one kairos-init's
// yip stage writes through godotenv: KEY="VALUE" lines sorted by key (testdata/README.md).
func Release(imageRepo, label, v string) string {
	env := map[string]string{
		"KAIROS_ARCH":                    "amd64",
		"KAIROS_ARTIFACT":                "kairos-ubuntu-24.04-" + strings.TrimPrefix(label, "24.04-"),
		"KAIROS_BUG_REPORT_URL":          "https://github.com/kairos-io/kairos/issues",
		"KAIROS_FAMILY":                  "debian",
		"KAIROS_FIPS":                    "false",
		"KAIROS_FLAVOR":                  "ubuntu",
		"KAIROS_FLAVOR_RELEASE":          "24.04",
		"KAIROS_FRAMEWORK_VERSION":       "v2.22.0",
		"KAIROS_GITHUB_REPO":             "kairos-io/kairos",
		"KAIROS_HOME_URL":                "https://github.com/kairos-io/kairos",
		"KAIROS_ID":                      "kairos",
		"KAIROS_ID_LIKE":                 "kairos-standard-ubuntu-24.04",
		"KAIROS_IMAGE_LABEL":             label,
		"KAIROS_IMAGE_REPO":              imageRepo,
		"KAIROS_INIT_VERSION":            "v0.5.8",
		"KAIROS_MODEL":                   "generic",
		"KAIROS_NAME":                    "kairos-standard-ubuntu-24.04",
		"KAIROS_PRETTY_NAME":             "kairos-standard-ubuntu-24.04 " + v,
		"KAIROS_REGISTRY_AND_ORG":        "quay.io/kairos",
		"KAIROS_RELEASE":                 v,
		"KAIROS_SOFTWARE_VERSION":        "v1.32.4+k3s1",
		"KAIROS_SOFTWARE_VERSION_PREFIX": "k3s",
		"KAIROS_TARGETARCH":              "amd64",
		"KAIROS_TRUSTED_BOOT":            "false",
		"KAIROS_VARIANT":                 "standard",
		"KAIROS_VERSION":                 v,
		"KAIROS_VERSION_ID":              v,
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "%s=%q\n", k, env[k])
	}
	return b.String()
}

// ReleaseValue is the value of key in a kairos-release's text ("" when absent), its double
// quotes taken off.
func ReleaseValue(release, key string) string {
	for line := range strings.SplitSeq(release, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
