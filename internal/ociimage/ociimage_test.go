package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var epoch = time.Unix(1700000000, 0).UTC()

// tinyBinary compiles a small linux/amd64 program once per test process.
var tinyBinary = func() func(t *testing.T) string {
	var path string
	var err error
	done := false
	return func(t *testing.T) string {
		t.Helper()
		if !done {
			done = true
			path, err = compileTiny()
		}
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
}()

var tinyDir string

func compileTiny() (string, error) {
	dir, err := os.MkdirTemp("", "ociimage-tiny-")
	if err != nil {
		return "", err
	}
	tinyDir = dir
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module tiny\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	src := "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"tiny\\n\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "tiny")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("compiling the tiny binary: " + err.Error() + "\n" + string(b))
	}
	return out, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyDir != "" {
		_ = os.RemoveAll(tinyDir)
	}
	os.Exit(code)
}

// fixedFile writes a small file standing for the arm64 binary: only its bytes matter here.
func fixedFile(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func testSpec(t *testing.T) Spec {
	return Spec{
		Name:        "tiny",
		Description: "a tiny test program",
		Version:     "v1.2.3-4-gabcdef0",
		Revision:    "abcdef0123456789abcdef0123456789abcdef01",
		Epoch:       epoch,
		Binaries: []Binary{
			{Platform: "linux/amd64", Path: tinyBinary(t)},
			{Platform: "linux/arm64", Path: fixedFile(t, "not really an arm64 binary\n")},
		},
	}
}

// archive builds spec and returns its archive bytes and index digest.
func archive(t *testing.T, spec Spec) ([]byte, v1.Hash) {
	t.Helper()
	idx, err := BuildIndex(spec)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteArchive(&buf, idx, spec.Version, spec.Epoch); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), d
}

func TestReproducible(t *testing.T) {
	spec := testSpec(t)
	a1, d1 := archive(t, spec)
	a2, d2 := archive(t, spec)
	if d1 != d2 {
		t.Fatalf("same input, different digests: %s, %s", d1, d2)
	}
	if !bytes.Equal(a1, a2) {
		t.Fatalf("same input, different archives (%d and %d bytes)", len(a1), len(a2))
	}

	// One byte of the binary changed.
	bin, err := os.ReadFile(spec.Binaries[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	bin[len(bin)-1] ^= 0xff
	changed := spec
	changed.Binaries = []Binary{{Platform: "linux/amd64", Path: fixedFile(t, string(bin))}, spec.Binaries[1]}
	a3, d3 := archive(t, changed)
	if d3 == d1 || bytes.Equal(a3, a1) {
		t.Fatalf("one byte of the binary changed, same digest %s", d1)
	}

	// Other inputs: the epoch and the version.
	later := spec
	later.Epoch = epoch.Add(time.Second)
	if _, d := archive(t, later); d == d1 {
		t.Fatal("epoch changed, same digest")
	}
	v := spec
	v.Version = "v1.2.4"
	if _, d := archive(t, v); d == d1 {
		t.Fatal("version changed, same digest")
	}
}

// untar extracts an archive into a new directory.
func untar(t *testing.T, data []byte) (string, []*tar.Header) {
	t.Helper()
	dir := t.TempDir()
	var hdrs []*tar.Header
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, hdr)
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unexpected type %c", hdr.Name, hdr.Typeflag)
		}
	}
	return dir, hdrs
}

func TestArchiveReadBack(t *testing.T) {
	spec := testSpec(t)
	data, digest := archive(t, spec)
	dir, hdrs := untar(t, data)

	// The archive's own tar: sorted, fixed times and owners.
	var names []string
	for _, h := range hdrs {
		names = append(names, h.Name)
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("archive entry %s: mtime %s uid %d gid %d, want %s 0 0", h.Name, h.ModTime, h.Uid, h.Gid, epoch)
		}
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("archive entries not sorted: %q", names)
	}
	for _, want := range []string{"oci-layout", "index.json", "blobs/sha256/" + digest.Hex} {
		if !contains(names, want) {
			t.Errorf("archive has no %s: %q", want, names)
		}
	}

	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	topManifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topManifest.Manifests) != 1 {
		t.Fatalf("index.json: %d descriptors, want 1", len(topManifest.Manifests))
	}
	d := topManifest.Manifests[0]
	if d.MediaType != types.OCIImageIndex || d.Digest != digest || d.Annotations[AnnotationRefName] != spec.Version {
		t.Fatalf("index.json descriptor: %+v, want an OCI index %s named %s", d, digest, spec.Version)
	}

	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	idx, err = idx.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	checkLabels(t, "index annotations", im.Annotations, spec)
	// go-containerregistry's own check: every digest, size, diffID and media type agrees.
	if err := validate.Index(idx); err != nil {
		t.Errorf("validate.Index: %v", err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index: %d manifests, want 2", len(im.Manifests))
	}

	for i, b := range spec.Binaries {
		desc := im.Manifests[i]
		want, _ := ParsePlatform(b.Platform)
		if desc.Platform == nil || desc.Platform.OS != want.OS || desc.Platform.Architecture != want.Architecture {
			t.Errorf("manifest %d: platform %+v, want %s", i, desc.Platform, b.Platform)
		}
		if desc.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %d: media type %s", i, desc.MediaType)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, b, img, spec)
	}
}

func checkImage(t *testing.T, b Binary, img v1.Image, spec Spec) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("%s: manifest %s, config %s", b.Platform, m.MediaType, m.Config.MediaType)
	}
	checkLabels(t, b.Platform+" manifest annotations", m.Annotations, spec)
	if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Fatalf("%s: layers %+v, want one %s", b.Platform, m.Layers, types.OCILayer)
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ParsePlatform(b.Platform)
	if cfg.OS != want.OS || cfg.Architecture != want.Architecture {
		t.Errorf("%s: config os/arch %s/%s", b.Platform, cfg.OS, cfg.Architecture)
	}
	c := cfg.Config
	if c.User != "65532:65532" || c.WorkingDir != "/" ||
		len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/usr/local/bin/tiny" || len(c.Cmd) != 0 ||
		len(c.Env) != 1 || !strings.HasPrefix(c.Env[0], "PATH=") || !strings.Contains(c.Env[0], "/usr/local/bin") {
		t.Errorf("%s: config %+v", b.Platform, c)
	}
	if !cfg.Created.Equal(epoch) {
		t.Errorf("%s: created %s, want %s", b.Platform, cfg.Created.Time, epoch)
	}
	for _, h := range cfg.History {
		if !h.Created.Equal(epoch) {
			t.Errorf("%s: history created %s, want %s", b.Platform, h.Created.Time, epoch)
		}
	}
	checkLabels(t, b.Platform+" config labels", c.Labels, spec)

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	// A deterministic gzip header: no flags (no name), MTIME 0.
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 8)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	_ = rc.Close()
	if !bytes.Equal(head, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}) {
		t.Errorf("%s: gzip header % x, want no name and MTIME 0", b.Platform, head)
	}

	binary, err := os.ReadFile(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	rc, err = layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	type got struct {
		mode int64
		data []byte
	}
	files := map[string]got{}
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "root" || h.Gname != "root" ||
			!h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: layer entry %s: mtime %s, owner %d:%d %s:%s", b.Platform, h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = got{mode: h.Mode, data: data}
		names = append(names, h.Name)
	}
	wantNames := []string{"etc/", "etc/group", "etc/passwd", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/tiny"}
	if strings.Join(names, " ") != strings.Join(wantNames, " ") {
		t.Errorf("%s: layer entries %q, want %q", b.Platform, names, wantNames)
	}
	if f := files["usr/local/bin/tiny"]; !bytes.Equal(f.data, binary) || f.mode != 0o755 {
		t.Errorf("%s: binary mode %o, %d bytes; want 0755 and the %d bytes of %s", b.Platform, f.mode, len(f.data), len(binary), b.Path)
	}
	if f := files["etc/passwd"]; !strings.Contains(string(f.data), "\nnonroot:x:65532:65532:nonroot:/home/nonroot:") || f.mode != 0o644 {
		t.Errorf("%s: /etc/passwd (mode %o):\n%s", b.Platform, f.mode, f.data)
	}
	if f := files["etc/group"]; !strings.Contains(string(f.data), "\nnonroot:x:65532:") {
		t.Errorf("%s: /etc/group:\n%s", b.Platform, f.data)
	}
	if f := files["tmp/"]; f.mode != 0o1777 || len(f.data) != 0 {
		t.Errorf("%s: /tmp mode %o, want 1777", b.Platform, f.mode)
	}
}

func checkLabels(t *testing.T, what string, got map[string]string, spec Spec) {
	t.Helper()
	want := map[string]string{
		"org.opencontainers.image.title":       spec.Name,
		"org.opencontainers.image.description": spec.Description,
		"org.opencontainers.image.source":      "https://github.com/spectrocloud/nodewright",
		"org.opencontainers.image.version":     spec.Version,
		"org.opencontainers.image.revision":    spec.Revision,
		"org.opencontainers.image.created":     "2023-11-14T22:13:20Z",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.vendor":      "Spectro Cloud",
		"org.opencontainers.image.base.name":   "scratch",
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d: %v", what, len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestBadInput(t *testing.T) {
	good := Spec{Name: "tiny", Version: "v1", Revision: "r", Epoch: epoch,
		Binaries: []Binary{{Platform: "linux/amd64", Path: fixedFile(t, "x")}}}
	missing := filepath.Join(t.TempDir(), "no-such-binary")
	for _, tc := range []struct {
		name   string
		modify func(*Spec)
		want   []string
	}{
		{"empty name", func(s *Spec) { s.Name = "" }, []string{"name is empty"}},
		{"name with a slash", func(s *Spec) { s.Name = "a/b" }, []string{`name "a/b"`}},
		{"empty version", func(s *Spec) { s.Version = "" }, []string{"version is empty"}},
		{"empty revision", func(s *Spec) { s.Revision = "" }, []string{"revision is empty"}},
		{"no binaries", func(s *Spec) { s.Binaries = nil }, []string{"no binaries"}},
		{"platform without arch", func(s *Spec) { s.Binaries[0].Platform = "linux" }, []string{`platform "linux"`, "os/arch"}},
		{"platform with too many parts", func(s *Spec) { s.Binaries[0].Platform = "linux/arm/v7/x" }, []string{`platform "linux/arm/v7/x"`}},
		{"platform twice", func(s *Spec) { s.Binaries = append(s.Binaries, s.Binaries[0]) }, []string{"linux/amd64 listed twice"}},
		{"missing binary file", func(s *Spec) { s.Binaries[0].Path = missing }, []string{"tiny", "linux/amd64", "binary", missing, "no such file"}},
		{"empty binary path", func(s *Spec) { s.Binaries[0].Path = "" }, []string{"path is empty"}},
		{"empty binary file", func(s *Spec) { s.Binaries[0].Path = fixedFile(t, "") }, []string{"empty file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			s.Binaries = append([]Binary(nil), good.Binaries...)
			tc.modify(&s)
			_, err := BuildIndex(s)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if _, err := BuildIndex(good); err != nil {
		t.Fatalf("the good spec: %v", err)
	}
}

func TestNewLayerBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []File
		want  string
	}{
		{"empty name", []File{{Name: "", Mode: 0o644}}, "file 0: empty name"},
		{"dot dot", []File{{Name: "../etc/passwd", Mode: 0o644}}, `"../etc/passwd": name is not a clean relative path`},
		{"unclean", []File{{Name: "etc//passwd", Mode: 0o644}}, `"etc//passwd": name is not a clean`},
		{"two leading slashes", []File{{Name: "//etc/passwd", Mode: 0o644}}, `"//etc/passwd": name is not a clean`},
		{"twice", []File{{Name: "a", Mode: 0o644}, {Name: "/a", Mode: 0o644}}, `"/a": listed twice`},
		{"parent is a file", []File{{Name: "a", Mode: 0o644}, {Name: "a/b", Mode: 0o644}}, `"a/b": its parent "a" is not a directory`},
		{"symlink mode", []File{{Name: "a", Mode: fs.ModeSymlink | 0o777}}, `"a": mode`},
		{"directory with data", []File{{Name: "d", Mode: fs.ModeDir | 0o755, Data: []byte("x")}}, `"d": a directory has no data`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewLayer(tc.files, epoch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestParsePlatform(t *testing.T) {
	p, err := ParsePlatform("linux/arm64/v8")
	if err != nil || p.OS != "linux" || p.Architecture != "arm64" || p.Variant != "v8" {
		t.Fatalf("linux/arm64/v8: %+v, %v", p, err)
	}
	for _, bad := range []string{"", "linux", "linux/", "/amd64", "a/b/c/d"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestBinaryFiles: a platform's extra files land in its image's one layer beside the binary,
// with their modes and parent directories; another platform's image has only its own; the
// licenses label names what the image carries; a file that clashes is refused.
func TestBinaryFiles(t *testing.T) {
	spec := testSpec(t)
	spec.Licenses = "Apache-2.0 AND GPL-2.0-or-later"
	spec.Binaries[0].Files = []File{
		{Name: "/sbin/tool", Mode: 0o755, Data: []byte("a tool")},
		{Name: "lib/x86_64-linux-gnu/libc.so.6", Mode: 0o755, Data: []byte("a library")},
		{Name: "usr/share/doc/tool/copyright", Mode: 0o644, Data: []byte("GPL-2+")},
	}
	idx, err := BuildIndex(spec)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.Annotations[LabelLicenses] != spec.Licenses {
		t.Errorf("licenses annotation %q, want %q", im.Annotations[LabelLicenses], spec.Licenses)
	}
	for i, want := range []map[string]int64{
		{"sbin/": 0o755, "sbin/tool": 0o755, "lib/": 0o755, "lib/x86_64-linux-gnu/libc.so.6": 0o755, "usr/share/doc/tool/copyright": 0o644, "usr/local/bin/tiny": 0o755},
		{"usr/local/bin/tiny": 0o755},
	} {
		img, err := idx.Image(im.Manifests[i].Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Config.Labels[LabelLicenses] != spec.Licenses {
			t.Errorf("%s: licenses label %q", spec.Binaries[i].Platform, cfg.Config.Labels[LabelLicenses])
		}
		got := layerModes(t, img)
		for name, mode := range want {
			if m, ok := got[name]; !ok || m != mode {
				t.Errorf("%s: layer entry %s: mode %o (present %v), want %o", spec.Binaries[i].Platform, name, m, ok, mode)
			}
		}
		if _, ok := got["sbin/tool"]; i == 1 && ok {
			t.Errorf("%s: has the other platform's files", spec.Binaries[i].Platform)
		}
		if i == 0 && !strings.Contains(cfg.History[0].CreatedBy, "/sbin/tool") {
			t.Errorf("history %q does not name the extra files", cfg.History[0].CreatedBy)
		}
	}
	spec.Binaries[0].Files = []File{{Name: "usr/local/bin/tiny", Mode: 0o755, Data: []byte("x")}}
	if _, err := BuildIndex(spec); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("a file over the binary: error %v, want it refused as listed twice", err)
	}
}

func layerModes(t *testing.T, img v1.Image) map[string]int64 {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v (%d)", err, len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	modes := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return modes
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
	}
}
