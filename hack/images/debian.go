package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spectrocloud/nodewright/internal/ociimage"
)

// The agent runs drbdadm, which runs drbdsetup and drbdmeta: C programs, linked against the C
// library. Its image carries Debian's build of them, and the C library's loader and libc.so.6
// from Debian's libc6 of the same release, taken from the packages' .deb files, each pinned by
// version and by the SHA-256 of each architecture's file. Debian keeps only a release's current
// versions: when a point release replaces a pinned one, `make images` says so, and the pin is
// moved here (a new digest, as any other input change).

// debianRelease is the Debian release the packages come from.
const debianRelease = "bookworm"

// debPackage is one pinned Debian package.
type debPackage struct {
	name, version string
	// sha256 of the .deb, by Debian architecture.
	sha256 map[string]string
}

var (
	drbdUtils = debPackage{name: "drbd-utils", version: "9.22.0-1", sha256: map[string]string{
		"amd64": "c0071c7c31f5ce1a0a966460a434d43f8db875aeaa260cf9767ee11da825b10b",
		"arm64": "9f1a08c3cdd963509f0ebecae07296a8ac1747115bbd8e0c3e3be60e5d300adb",
	}}
	libc6 = debPackage{name: "libc6", version: "2.36-9+deb12u14", sha256: map[string]string{
		"amd64": "ba4f88f73dbc3ae9055f3c20f4523bfdbaf1ad13ff95e258924f77d20b4fbedf",
		"arm64": "01f4330719fd4f65580e16ea5a0527f372fca750e8f588d26deaf09f2d3b1cf4",
	}}
)

// drbdPrograms are the drbd-utils programs the agent image carries, where the package puts
// them: drbdadm, and the two it runs. DRBD 9 only (not the 8.3 and 8.4 helpers in /lib/drbd).
var drbdPrograms = []string{"sbin/drbdadm", "sbin/drbdsetup", "sbin/drbdmeta"}

// drbdLicenses is the licenses label of the agent's image: the agent's, drbd-utils' and the C
// library's.
const drbdLicenses = "Apache-2.0 AND GPL-2.0-or-later AND LGPL-2.1-or-later"

// debArch is Debian's name of a Go architecture.
func debArch(goarch string) (string, error) {
	switch goarch {
	case "amd64", "arm64":
		return goarch, nil
	}
	return "", fmt.Errorf("no pinned Debian packages for architecture %s", goarch)
}

// debFile is the file name apt-get download gives p for arch (an epoch's ':' becomes %3a).
func (p debPackage) debFile(arch string) string {
	return fmt.Sprintf("%s_%s_%s.deb", p.name, strings.ReplaceAll(p.version, ":", "%3a"), arch)
}

// debianFiles returns the files of the agent's image for platform: the drbd-utils programs,
// the loader and libraries they are linked against, found in libc6 (each checked against the
// programs' ELF headers), and both packages' copyright files. cache keeps the downloaded
// .deb files.
func debianFiles(ctx context.Context, cache, platform string) ([]ociimage.File, error) {
	pl, err := ociimage.ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	arch, err := debArch(pl.Architecture)
	if err != nil {
		return nil, err
	}
	utils, err := debContents(ctx, cache, drbdUtils, arch)
	if err != nil {
		return nil, err
	}
	libc, err := debContents(ctx, cache, libc6, arch)
	if err != nil {
		return nil, err
	}
	var files []ociimage.File
	needed := map[string]bool{} // the loader's path, and the libraries' names
	for _, prog := range drbdPrograms {
		f, ok := utils.files[prog]
		if !ok {
			return nil, fmt.Errorf("%s: no %s", drbdUtils.debFile(arch), prog)
		}
		interp, libs, err := elfNeeds(f.data, pl.Architecture)
		if err != nil {
			return nil, fmt.Errorf("%s in %s: %w", prog, drbdUtils.debFile(arch), err)
		}
		needed[interp] = true
		for _, l := range libs {
			needed[l] = true
		}
		files = append(files, ociimage.File{Name: prog, Mode: 0o755, Data: f.data})
	}
	names := make([]string, 0, len(needed))
	for n := range needed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var where string
		if strings.HasPrefix(n, "/") {
			where = strings.TrimPrefix(n, "/") // the loader, at the path the programs name
		} else {
			where = path.Join("lib", libc.triplet(), n) // a library, where the loader looks
		}
		data, err := libc.resolve(where)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", libc6.debFile(arch), err)
		}
		files = append(files, ociimage.File{Name: where, Mode: 0o755, Data: data})
	}
	for _, c := range []struct {
		pkg debPackage
		deb *debTree
	}{{drbdUtils, utils}, {libc6, libc}} {
		name := "usr/share/doc/" + c.pkg.name + "/copyright"
		data, err := c.deb.resolve(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.pkg.debFile(arch), err)
		}
		files = append(files, ociimage.File{Name: name, Mode: 0o644, Data: data})
	}
	return files, nil
}

// elfNeeds reads a program's loader (PT_INTERP) and the libraries it needs (DT_NEEDED), and
// checks that it is built for goarch.
func elfNeeds(data []byte, goarch string) (interp string, libs []string, err error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return "", nil, err
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
	if f.Machine != want {
		return "", nil, fmt.Errorf("built for %s, not %s", f.Machine, goarch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return "", nil, err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return "", nil, errors.New("no program interpreter (PT_INTERP)")
	}
	libs, err = f.ImportedLibraries()
	return interp, libs, err
}

// debTree is what a .deb holds: its regular files and its symbolic links, by clean relative
// path.
type debTree struct {
	files map[string]debEntry
	links map[string]string // path -> target
}

type debEntry struct{ data []byte }

// triplet is the multiarch folder of the package's C library, such as x86_64-linux-gnu.
func (d *debTree) triplet() string {
	for name := range d.files {
		if dir, file := path.Split(name); file == "libc.so.6" && strings.HasPrefix(dir, "lib/") {
			return strings.TrimSuffix(strings.TrimPrefix(dir, "lib/"), "/")
		}
	}
	return ""
}

// resolve returns the contents of name, following symbolic links (at most 8).
func (d *debTree) resolve(name string) ([]byte, error) {
	for range 8 {
		if f, ok := d.files[name]; ok {
			return f.data, nil
		}
		target, ok := d.links[name]
		if !ok {
			return nil, fmt.Errorf("no /%s", name)
		}
		if strings.HasPrefix(target, "/") {
			name = strings.TrimPrefix(path.Clean(target), "/")
		} else {
			name = path.Join(path.Dir(name), target)
		}
	}
	return nil, fmt.Errorf("/%s: too many symbolic links", name)
}

// debContents downloads p's .deb for arch into cache unless it is there, checks its SHA-256,
// and reads its files with dpkg-deb.
func debContents(ctx context.Context, cache string, p debPackage, arch string) (*debTree, error) {
	want, ok := p.sha256[arch]
	if !ok {
		return nil, fmt.Errorf("%s %s: no pinned checksum for %s", p.name, p.version, arch)
	}
	file := filepath.Join(cache, p.debFile(arch))
	if _, err := os.Stat(file); err != nil {
		if err := aptDownload(ctx, cache, p, arch); err != nil {
			return nil, err
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		return nil, fmt.Errorf("%s: SHA-256 %s, but %s %s for %s is pinned at %s (delete the file to download it again)", file, got, p.name, p.version, arch, want)
	}
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w\n%s", file, err, stderr.Bytes())
	}
	tree := &debTree{files: map[string]debEntry{}, links: map[string]string{}}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tree, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", file, name, err)
			}
			tree.files[name] = debEntry{data: b}
		case tar.TypeSymlink:
			tree.links[name] = h.Linkname
		}
	}
}

// aptDownload fetches p's .deb for arch into cache with apt-get download, through an apt state
// of its own in cache (the machine's sources, both architectures' indexes), so that neither
// the machine's dpkg architectures nor its package lists change. apt checks the file against
// the release's signed index; debContents checks the pinned SHA-256.
func aptDownload(ctx context.Context, cache string, p debPackage, arch string) error {
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the agent's image takes drbd-utils from Debian's packages, which needs %s (a Debian machine): %w", tool, err)
		}
	}
	state := filepath.Join(cache, "apt")
	for _, d := range []string{filepath.Join(state, "lists", "partial"), filepath.Join(state, "archives", "partial")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := []string{"-q", "-o", "Dir::State=" + state, "-o", "Dir::Cache=" + state, "-o", "Dir::State::status=/dev/null",
		"-o", "APT::Architectures::=amd64", "-o", "APT::Architectures::=arm64", "-o", "Debug::NoLocking=1",
		// Downloads into a folder the _apt user may not write are made as root, quietly.
		"-o", "APT::Sandbox::User=root"}
	pkg := fmt.Sprintf("%s:%s=%s", p.name, arch, p.version)
	download := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", append(opts, "download", pkg)...)
		cmd.Dir = cache
		return cmd.CombinedOutput()
	}
	out, err := download()
	if err != nil {
		// The indexes are missing or older than the pin: read them, then try once more.
		update := exec.CommandContext(ctx, "apt-get", append(opts, "update")...)
		if uout, uerr := update.CombinedOutput(); uerr != nil {
			return fmt.Errorf("apt-get update (for %s): %w\n%s", pkg, uerr, uout)
		}
		if out, err = download(); err != nil {
			return fmt.Errorf("apt-get download %s: %w\n%s\n(Debian %s may no longer have this version: pin the current one in hack/images/debian.go)", pkg, err, out, debianRelease)
		}
	}
	if _, err := os.Stat(filepath.Join(cache, p.debFile(arch))); err != nil {
		return fmt.Errorf("apt-get download %s wrote no %s:\n%s", pkg, p.debFile(arch), out)
	}
	return nil
}
