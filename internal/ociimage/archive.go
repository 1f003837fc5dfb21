package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// WriteLayout writes idx as an OCI image layout in dir (which must not hold one already):
// oci-layout, blobs/sha256/..., and an index.json with a single descriptor, of idx, named
// refName (the org.opencontainers.image.ref.name annotation; none when empty).
func WriteLayout(dir string, idx v1.ImageIndex, refName string) error {
	var anns map[string]string
	if refName != "" {
		anns = map[string]string{AnnotationRefName: refName}
	}
	top := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add:        idx,
		Descriptor: v1.Descriptor{Annotations: anns},
	})
	if _, err := layout.Write(dir, top); err != nil {
		return fmt.Errorf("ociimage: writing the OCI layout in %s: %w", dir, err)
	}
	return nil
}

// WriteArchive writes idx to w as a tar of an OCI image layout (see WriteLayout), the form
// `skopeo copy oci-archive:...` reads. The tar is deterministic: entries sorted by path,
// every mtime mtime (to the second, UTC), uid and gid 0, directories 0755 and files 0644.
func WriteArchive(w io.Writer, idx v1.ImageIndex, refName string, mtime time.Time) error {
	dir, err := os.MkdirTemp("", "ociimage-layout-")
	if err != nil {
		return fmt.Errorf("ociimage: archive: temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := WriteLayout(dir, idx, refName); err != nil {
		return err
	}
	return tarDir(w, dir, mtime)
}

// tarDir writes the tree under dir to w, deterministically.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	type item struct {
		name string
		dir  bool
		path string
	}
	var items []item
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			items = append(items, item{name: filepath.ToSlash(rel) + "/", dir: true, path: p})
		case d.Type().IsRegular():
			items = append(items, item{name: filepath.ToSlash(rel), path: p})
		default:
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ociimage: archive: listing the layout: %w", err)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })

	mtime = mtime.UTC().Truncate(time.Second)
	tw := tar.NewWriter(w)
	for _, it := range items {
		hdr := &tar.Header{Name: it.name, Uname: "root", Gname: "root", ModTime: mtime}
		if it.dir {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("ociimage: archive: tar header of %s: %w", it.name, err)
			}
			continue
		}
		if err := writeTarFile(tw, hdr, it.path); err != nil {
			return fmt.Errorf("ociimage: archive: %s: %w", it.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("ociimage: archive: closing the tar stream: %w", err)
	}
	return nil
}

func writeTarFile(tw *tar.Writer, hdr *tar.Header, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
