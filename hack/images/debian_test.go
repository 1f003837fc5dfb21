package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/ociimage"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// debCache is the repository's bin/debian, where make images keeps the packages, so that the
// tests download them at most once.
func debCache(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "bin", "debian")
}

// TestDebianFilesRunInTheImage takes the agent image's Debian files for both architectures
// (downloading the pinned packages with apt-get when bin/debian lacks them), checks what they
// are, and, as root, runs this machine's architecture's drbdadm and drbdsetup in a chroot of
// nothing but those files: the loader and libc.so.6 are where the programs look.
func TestDebianFilesRunInTheImage(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads Debian packages")
	}
	ctx := context.Background()
	for _, platform := range []string{"linux/amd64", "linux/arm64"} {
		files, err := debianFiles(ctx, debCache(t), platform)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, f := range files {
			names[f.Name] = true
		}
		loader := map[string]string{"linux/amd64": "lib64/ld-linux-x86-64.so.2", "linux/arm64": "lib/ld-linux-aarch64.so.1"}[platform]
		libc := map[string]string{"linux/amd64": "lib/x86_64-linux-gnu/libc.so.6", "linux/arm64": "lib/aarch64-linux-gnu/libc.so.6"}[platform]
		for _, want := range append([]string{loader, libc, "usr/share/doc/drbd-utils/copyright", "usr/share/doc/libc6/copyright"}, drbdPrograms...) {
			if !names[want] {
				t.Errorf("%s: no /%s among %v", platform, want, names)
			}
		}
		// Nothing else but what the programs' ELF headers name (on arm64 they also name the
		// loader as a library: it is in libc's folder too).
		for name := range names {
			if !strings.HasPrefix(name, "sbin/drbd") && !strings.HasPrefix(name, "usr/share/doc/") &&
				!strings.HasPrefix(name, "lib/"+map[string]string{"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[platform]+"-linux-gnu/") && name != loader {
				t.Errorf("%s: /%s is neither a program, the loader, a library nor a copyright file", platform, name)
			}
		}
		if platform != "linux/"+goarch() {
			continue
		}
		if os.Geteuid() != 0 {
			t.Logf("not root: the programs are not run in a chroot")
			continue
		}
		root := unpack(t, files)
		// Each program starts (drbdmeta without arguments prints its usage, exit 20).
		for _, run := range []struct {
			argv []string
			want string
		}{
			{[]string{"/sbin/drbdadm", "--version"}, "DRBDADM_VERSION=9.22.0"},
			{[]string{"/sbin/drbdsetup", "help"}, "USAGE: drbdsetup command"},
			{[]string{"/sbin/drbdmeta"}, "USAGE: drbdmeta"},
		} {
			out, _ := exec.Command("chroot", append([]string{root}, run.argv...)...).CombinedOutput()
			if !strings.Contains(string(out), run.want) {
				t.Errorf("%s in a chroot of the image's files says no %q:\n%s", strings.Join(run.argv, " "), run.want, out)
			}
		}
		// drbdadm reads a resource file and plans its drbdsetup command (a dry run: no kernel
		// module is needed).
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		conf := "resource r0 {\n  device /dev/drbd1; disk /dev/vg/r0; meta-disk internal;\n  on edge-1 { address 10.0.0.1:7789; node-id 0; }\n  on edge-2 { address 10.0.0.2:7789; node-id 1; }\n}\n"
		if err := os.WriteFile(filepath.Join(root, "etc", "drbd.conf"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("chroot", root, "/sbin/drbdadm", "-d", "pause-sync", "r0:edge-2")
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "DRBD_DRIVER_VERSION_OVERRIDE=9.2.0", "__DRBD_NODE__=edge-1"}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "drbdsetup pause-sync r0 1") {
			t.Errorf("drbdadm -d pause-sync in a chroot of the image's files: %v\n%s", err, out)
		}
	}
}

func goarch() string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// unpack writes files into a new folder through a real layer, as a container runtime would.
func unpack(t *testing.T, files []ociimage.File) string {
	t.Helper()
	layer, err := ociimage.NewLayer(files, time.Unix(1700000000, 0).UTC())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	root := t.TempDir()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, os.FileMode(h.Mode)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, tr); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
}
