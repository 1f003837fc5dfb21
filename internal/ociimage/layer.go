package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// CompressionLevel is the gzip level of every layer. It is fixed: the level is part of
// what makes a layer's bytes, hence its digest.
const CompressionLevel = gzip.BestCompression

// File is one entry of a layer.
type File struct {
	// Name is the path in the image, such as "etc/passwd" or "/etc/passwd"; a leading
	// slash is ignored. Required.
	Name string
	// Mode is the permission bits, plus fs.ModeDir for a directory and fs.ModeSticky,
	// fs.ModeSetuid or fs.ModeSetgid when wanted. Anything else is an error.
	Mode fs.FileMode
	// Data is a regular file's contents; a directory has none.
	Data []byte
}

// NewLayer returns a gzip-compressed OCI layer (types.OCILayer) holding files, built so the
// same input always gives the same bytes:
//   - the entries are sorted by path, and the parent directories the list leaves out are
//     added (mode 0755);
//   - every header has ModTime mtime (truncated to the second, in UTC), uid and gid 0,
//     uname and gname "root", and no access or change time;
//   - the gzip stream has no name, no modification time, and is compressed at
//     CompressionLevel.
//
// It fails, naming the file, on an empty, unclean or duplicate path, on a path that is
// both a file and a parent directory, and on a mode it cannot represent.
func NewLayer(files []File, mtime time.Time) (v1.Layer, error) {
	entries, err := normalize(files)
	if err != nil {
		return nil, err
	}
	mtime = mtime.UTC().Truncate(time.Second)

	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name,
			Mode:    tarMode(e.mode),
			Uid:     0,
			Gid:     0,
			Uname:   "root",
			Gname:   "root",
			ModTime: mtime,
		}
		if e.mode.IsDir() {
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("ociimage: layer: tar header of %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("ociimage: layer: tar contents of %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: layer: closing the tar stream: %w", err)
	}

	var gzBuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gzBuf, CompressionLevel)
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: gzip writer: %w", err)
	}
	// The zero Header: no file name, no comment, MTIME 0 (the format's "no time").
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return nil, fmt.Errorf("ociimage: layer: compressing: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: layer: closing the gzip stream: %w", err)
	}
	return newStaticLayer(tarBuf.Bytes(), gzBuf.Bytes())
}

type entry struct {
	name string
	mode fs.FileMode
	data []byte
}

// normalize checks the files, adds the missing parent directories and sorts them.
func normalize(files []File) ([]entry, error) {
	byName := make(map[string]entry, len(files))
	names := make([]string, 0, len(files))
	for i, f := range files {
		name := strings.TrimPrefix(f.Name, "/")
		switch {
		case name == "":
			return nil, fmt.Errorf("ociimage: layer: file %d: empty name", i)
		case path.Clean(name) != name || name == "." || name == ".." || strings.HasPrefix(name, "../") || strings.HasPrefix(name, "/"):
			return nil, fmt.Errorf("ociimage: layer: file %q: name is not a clean relative path", f.Name)
		}
		if f.Mode&^(fs.ModePerm|fs.ModeDir|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid) != 0 {
			return nil, fmt.Errorf("ociimage: layer: file %q: mode %v: only permissions, directory, sticky, setuid and setgid are supported", f.Name, f.Mode)
		}
		if f.Mode.IsDir() && len(f.Data) > 0 {
			return nil, fmt.Errorf("ociimage: layer: file %q: a directory has no data", f.Name)
		}
		if _, dup := byName[name]; dup {
			return nil, fmt.Errorf("ociimage: layer: file %q: listed twice", f.Name)
		}
		byName[name] = entry{name: name, mode: f.Mode, data: f.Data}
		names = append(names, name)
	}
	for _, name := range names {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			parent, ok := byName[dir]
			if !ok {
				byName[dir] = entry{name: dir, mode: fs.ModeDir | 0o755}
				continue
			}
			if !parent.mode.IsDir() {
				return nil, fmt.Errorf("ociimage: layer: file %q: its parent %q is not a directory", name, dir)
			}
		}
	}
	entries := make([]entry, 0, len(byName))
	for _, e := range byName {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, nil
}

// tarMode is the tar header mode (the c_IS* bits) of m.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// staticLayer is a layer whose compressed and uncompressed bytes are both in memory. It is
// written here, rather than taken from pkg/v1/tarball, so nothing (such as tarball's
// GGCR_EXPERIMENT_ESTARGZ environment variable) can change the bytes behind our back.
type staticLayer struct {
	uncompressed, compressed []byte
	diffID, digest           v1.Hash
}

func newStaticLayer(uncompressed, compressed []byte) (*staticLayer, error) {
	diffID, _, err := v1.SHA256(bytes.NewReader(uncompressed))
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: hashing the tar stream: %w", err)
	}
	digest, _, err := v1.SHA256(bytes.NewReader(compressed))
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: hashing the gzip stream: %w", err)
	}
	return &staticLayer{uncompressed: uncompressed, compressed: compressed, diffID: diffID, digest: digest}, nil
}

func (l *staticLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *staticLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *staticLayer) Size() (int64, error)     { return int64(len(l.compressed)), nil }
func (l *staticLayer) MediaType() (types.MediaType, error) {
	return types.OCILayer, nil
}
func (l *staticLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.compressed)), nil
}
func (l *staticLayer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.uncompressed)), nil
}
