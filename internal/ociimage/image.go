// Package ociimage assembles OCI images of Nodewright's static binaries without a container
// engine: a minimal base (see BaseFiles), the binary and any files it needs beside it
// (Binary.Files) in one layer, one image per platform gathered in an OCI image index, and the index written as a tar of an OCI image layout.
// Everything it writes depends only on its inputs: the same binaries, metadata and epoch
// give the same bytes and digests. hack/images drives it; docs/images.md describes the result.
package ociimage

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The labels (in each config) and annotations (on each manifest and on the index).
const (
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelSource      = "org.opencontainers.image.source"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelCreated     = "org.opencontainers.image.created"
	LabelLicenses    = "org.opencontainers.image.licenses"
	LabelVendor      = "org.opencontainers.image.vendor"
	LabelBaseName    = "org.opencontainers.image.base.name"
	// AnnotationRefName names the index in the layout's index.json.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Fixed metadata.
const (
	Source   = "https://github.com/spectrocloud/nodewright"
	Licenses = "Apache-2.0"
	Vendor   = "Spectro Cloud"
	BaseName = "scratch"
)

// Spec is one image: a binary, built for one or more platforms.
type Spec struct {
	// Name is the image and binary name, such as "operator"; the binary goes to
	// /usr/local/bin/<Name>. Required; a file name, without "/".
	Name string
	// Description is the org.opencontainers.image.description label.
	Description string
	// Version and Revision are the .version and .revision labels (such as the output of
	// git describe and the commit). Required.
	Version, Revision string
	// Epoch is every timestamp in the image: the files' mtimes, the config's created, the
	// .created label.
	Epoch time.Time
	// Binaries are the compiled binaries, one per platform, in the order of the index.
	// At least one.
	Binaries []Binary
	// Licenses is the .licenses label, an SPDX expression; Licenses (the binaries' own)
	// when empty. An image that carries other programs (Binary.Files) names theirs too.
	Licenses string
}

// Binary is a compiled binary for one platform.
type Binary struct {
	// Platform is "os/arch" or "os/arch/variant", such as "linux/arm64".
	Platform string
	// Path is the binary's file.
	Path string
	// Files are more files for this platform's image, beside the binary and the base
	// (the agent's carries Debian's drbd-utils and the C library it needs).
	Files []File
}

// ParsePlatform parses "os/arch" or "os/arch/variant".
func ParsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || slicesContainEmpty(parts) {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch or os/arch/variant, such as linux/amd64", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

func slicesContainEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}

// Labels is what the images built from spec are labeled (config) and annotated (manifests,
// index) with.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		LabelTitle:       s.Name,
		LabelDescription: s.Description,
		LabelSource:      Source,
		LabelVersion:     s.Version,
		LabelRevision:    s.Revision,
		LabelCreated:     s.Epoch.UTC().Format(time.RFC3339),
		LabelLicenses:    s.licenses(),
		LabelVendor:      Vendor,
		LabelBaseName:    BaseName,
	}
}

func (s Spec) licenses() string {
	if s.Licenses != "" {
		return s.Licenses
	}
	return Licenses
}

func (s Spec) validate() error {
	var errs []error
	switch {
	case s.Name == "":
		errs = append(errs, errors.New("name is empty"))
	case strings.ContainsAny(s.Name, "/\\") || s.Name == "." || s.Name == "..":
		errs = append(errs, fmt.Errorf("name %q: want a file name, without a slash", s.Name))
	}
	if s.Version == "" {
		errs = append(errs, errors.New("version is empty"))
	}
	if s.Revision == "" {
		errs = append(errs, errors.New("revision is empty"))
	}
	if len(s.Binaries) == 0 {
		errs = append(errs, errors.New("no binaries: want one per platform"))
	}
	seen := map[string]bool{}
	for i, b := range s.Binaries {
		if _, err := ParsePlatform(b.Platform); err != nil {
			errs = append(errs, fmt.Errorf("binary %d: %w", i, err))
		} else if seen[b.Platform] {
			errs = append(errs, fmt.Errorf("binary %d: platform %s listed twice", i, b.Platform))
		}
		seen[b.Platform] = true
		if b.Path == "" {
			errs = append(errs, fmt.Errorf("binary %d (%s): path is empty", i, b.Platform))
		}
	}
	if len(errs) > 0 {
		name := s.Name
		if name == "" {
			name = "image"
		}
		return fmt.Errorf("ociimage: %s: %w", name, errors.Join(errs...))
	}
	return nil
}

// BuildIndex returns the OCI image index of spec: one OCI image per binary, each a single
// layer with BaseFiles and the binary (mode 0755), configured to run the binary as
// 65532:65532 from /, with only PATH in the environment.
func BuildIndex(spec Spec) (v1.ImageIndex, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	labels := spec.Labels()
	var idx v1.ImageIndex = empty.Index
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	for _, b := range spec.Binaries {
		platform, _ := ParsePlatform(b.Platform) // validated
		img, err := buildImage(spec, platform, b, labels)
		if err != nil {
			return nil, fmt.Errorf("ociimage: %s: %s: %w", spec.Name, b.Platform, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &platform},
		})
	}
	idx, ok := mutate.Annotations(idx, labels).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("ociimage: %s: annotating the index: not an index", spec.Name)
	}
	// Compute it now, so a failure is reported here rather than when it is written.
	if _, err := idx.Digest(); err != nil {
		return nil, fmt.Errorf("ociimage: %s: index digest: %w", spec.Name, err)
	}
	return idx, nil
}

func buildImage(spec Spec, platform v1.Platform, b Binary, labels map[string]string) (v1.Image, error) {
	binaryPath := b.Path
	binary, err := os.ReadFile(binaryPath)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	if len(binary) == 0 {
		return nil, fmt.Errorf("binary %s: empty file", binaryPath)
	}
	files := append(BaseFiles(), File{Name: BinaryPath(spec.Name), Mode: 0o755, Data: binary})
	files = append(files, b.Files...)
	createdBy := "hack/images: " + BinaryPath(spec.Name) + ", /etc/passwd, /etc/group, /tmp"
	for _, f := range b.Files {
		if !f.Mode.IsDir() {
			createdBy += ", /" + strings.TrimPrefix(f.Name, "/")
		}
	}
	layer, err := NewLayer(files, spec.Epoch)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: spec.Epoch.UTC().Truncate(time.Second)}
	cfg := &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Variant:      platform.Variant,
		Created:      created,
		Config: v1.Config{
			User:       User,
			Entrypoint: []string{BinaryPath(spec.Name)},
			WorkingDir: "/",
			Env:        []string{"PATH=" + PATH},
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: createdBy,
			Comment:   "assembled by internal/ociimage, no base image",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	img, ok := mutate.Annotations(img, labels).(v1.Image)
	if !ok {
		return nil, errors.New("annotating the manifest: not an image")
	}
	return img, nil
}
