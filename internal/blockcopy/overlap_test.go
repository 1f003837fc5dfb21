//go:build linux

package blockcopy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func requireRefused(t *testing.T, r Result, why string) {
	t.Helper()
	if r.ExitCode != ExitBadInput || !strings.Contains(r.Error, why) {
		t.Fatalf("exit %d, error %q; want a refusal saying %q", r.ExitCode, r.Error, why)
	}
}

// TestLoopDeviceOverTheSourceIsRefused: a loop device and the file behind it are one volume,
// though their device and inode numbers differ.
func TestLoopDeviceOverTheSourceIsRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "disk.img")
	content := randomBytes(t, 8*testChunk)
	writeDense(t, file, content)
	loop := attachLoop(t, file)
	other := attachLoop(t, file)

	requireRefused(t, RunCopy(context.Background(), Request{Source: file, Target: loop, Options: testOptions}),
		"is a loop device over the source file")
	requireRefused(t, RunCopy(context.Background(), Request{Source: loop, Target: file, Options: testOptions}),
		"is the file behind the source loop device")
	requireRefused(t, RunCopy(context.Background(), Request{Source: loop, Target: other, Options: testOptions}),
		"is a loop device over the same file as the source")
	requireSameContent(t, content, file)
}

// TestPartitionsOfOneDiskAreRefused runs the check on real device nodes described by a sysfs
// tree laid out as the kernel lays it out (partitions inside their disk's folder), since
// loop devices here cannot be partitioned.
func TestPartitionsOfOneDiskAreRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating device nodes needs root")
	}
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys")
	disk := filepath.Join(sys, "devices", "virtual", "block", "vdz")
	writeSysfs(t, filepath.Join(disk, "dev"), "250:0")
	for _, p := range []struct{ name, dev, start, size string }{
		{"vdz1", "250:1", "2048", "2048"}, {"vdz2", "250:2", "4096", "2048"}, {"vdz3", "250:3", "5000", "100"},
	} {
		part := filepath.Join(disk, p.name)
		writeSysfs(t, filepath.Join(part, "dev"), p.dev)
		writeSysfs(t, filepath.Join(part, "partition"), "1")
		writeSysfs(t, filepath.Join(part, "start"), p.start)
		writeSysfs(t, filepath.Join(part, "size"), p.size)
	}
	links := filepath.Join(sys, "dev", "block")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	for dev, target := range map[string]string{"250:0": "vdz", "250:1": "vdz/vdz1", "250:2": "vdz/vdz2", "250:3": "vdz/vdz3"} {
		if err := os.Symlink(filepath.Join("..", "..", "devices", "virtual", "block", target), filepath.Join(links, dev)); err != nil {
			t.Fatal(err)
		}
	}
	node := func(name string, minor uint32) os.FileInfo {
		path := filepath.Join(dir, name)
		if err := unix.Mknod(path, unix.S_IFBLK|0o600, int(unix.Mkdev(250, minor))); err != nil {
			t.Skipf("mknod: %v", err)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	whole, first, second, third := node("vdz", 0), node("vdz1", 1), node("vdz2", 2), node("vdz3", 3)
	saved := sysfsRoot
	sysfsRoot = sys
	t.Cleanup(func() { sysfsRoot = saved })

	cases := []struct {
		name     string
		src, dst os.FileInfo
		why      string
	}{
		{"disk onto its partition", whole, first, "a disk and one of its partitions"},
		{"partition onto its disk", second, whole, "a disk and one of its partitions"},
		{"overlapping partitions", second, third, "partitions sharing sectors"},
		{"separate partitions", first, second, ""},
		{"a partition and a plain file", first, mustStat(t, sys), ""},
	}
	for _, tc := range cases {
		if got := overlap(tc.src, tc.dst); (tc.why == "") != (got == "") || !strings.Contains(got, tc.why) {
			t.Errorf("%s: overlap = %q, want %q", tc.name, got, tc.why)
		}
	}
}

func writeSysfs(t *testing.T, path, value string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustStat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
