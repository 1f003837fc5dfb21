//go:build linux

package blockcopy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// attachLoop attaches a loop device to a backing file, or skips the test
// where that is impossible (not root, no loop driver, a container).
func attachLoop(t *testing.T, backing string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	out, err := exec.Command("losetup", "--find", "--show", backing).CombinedOutput()
	if err != nil {
		t.Skipf("losetup failed: %v: %s", err, out)
	}
	device := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", device).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v: %s", device, err, out)
		}
	})
	return device
}

func TestLoopDevices(t *testing.T) {
	dir := t.TempDir()
	srcFile := filepath.Join(dir, "source.img")
	size := int64(16*testChunk + 8192) // loop devices are sized in 512-byte sectors
	content := writeSparse(t, srcFile, size, []Extent{{0, 3 * testChunk}, {10 * testChunk, 5000}})
	targetBacking := filepath.Join(dir, "target-backing.img")
	writeDense(t, targetBacking, bytes.Repeat([]byte{0xaa}, int(size)+testChunk))
	targetDevice := attachLoop(t, targetBacking)

	// A used device is not assumed zeroed: every byte must be written.
	r := RunCopy(context.Background(), Request{Source: srcFile, Target: targetDevice, Options: testOptions})
	requireOK(t, r)
	if r.TargetZeroed || r.BytesWritten != size {
		t.Fatalf("targetZeroed %t written %d, want all %d bytes written to a device not vouched zeroed", r.TargetZeroed, r.BytesWritten, size)
	}
	if r.SourceDigest != blake3Digest(content) {
		t.Fatalf("digest %s, want %s", r.SourceDigest, blake3Digest(content))
	}
	requireSameContent(t, content, targetDevice)

	// Device to file, and the device compared with itself through a symlink.
	copied := filepath.Join(dir, "copied.img")
	requireOK(t, RunCopy(context.Background(), Request{Source: targetDevice, Target: copied, Options: testOptions}))
	requireSameContent(t, readFile(t, targetDevice), copied)

	link := filepath.Join(dir, "device-link")
	if err := os.Symlink(targetDevice, link); err != nil {
		t.Fatal(err)
	}
	same := RunCopy(context.Background(), Request{Source: targetDevice, Target: link, Options: testOptions})
	if same.ExitCode != ExitBadInput || !strings.Contains(same.Error, "same file or device") {
		t.Fatalf("copy of a device onto itself: exit %d error %q, want it refused", same.ExitCode, same.Error)
	}

	flipByte(t, targetDevice, 10*testChunk+4999)
	v := RunVerify(context.Background(), Request{Source: srcFile, Target: targetDevice, Options: testOptions})
	if v.ExitCode != ExitMismatch || *v.MismatchByteOffset != 10*testChunk+4999 || *v.MismatchChunkOffset != 10*testChunk {
		t.Fatalf("verify after flipping a byte on the device: exit %d at %v, want a mismatch in chunk %d", v.ExitCode, v.MismatchByteOffset, 10*testChunk)
	}
}

func TestLoopDeviceTooSmall(t *testing.T) {
	dir := t.TempDir()
	srcFile := filepath.Join(dir, "source.img")
	writeDense(t, srcFile, randomBytes(t, 2*testChunk+512))
	backing := filepath.Join(dir, "small-backing.img")
	writeDense(t, backing, make([]byte, 2*testChunk))
	device := attachLoop(t, backing)
	r := RunCopy(context.Background(), Request{Source: srcFile, Target: device, Options: testOptions})
	if r.ExitCode != ExitBadInput || !strings.Contains(r.Error, "smaller than the source") {
		t.Fatalf("exit %d error %q, want a too-small device refused", r.ExitCode, r.Error)
	}
}

// A copy whose read-back differs must fail. A device vouched zeroed that is
// not gets only the source's data written; the read-back then reads the old
// bytes where the source has holes and must not hash them as cached zeros.
func TestLoopDeviceWronglyClaimedZeroed(t *testing.T) {
	dir := t.TempDir()
	srcFile := filepath.Join(dir, "source.img")
	size := int64(16 * testChunk)
	writeSparse(t, srcFile, size, []Extent{{0, 100}, {9 * testChunk, 5000}})
	backing := filepath.Join(dir, "used-backing.img")
	used := make([]byte, size)
	// Old data only in one 4 KiB block of a chunk that is a hole in the
	// source, between cached zero subtrees.
	copy(used[5*testChunk+8192:], bytes.Repeat([]byte{0x5a}, 4096))
	writeDense(t, backing, used)
	device := attachLoop(t, backing)

	r := RunCopy(context.Background(), Request{Source: srcFile, Target: device, TargetZeroed: true, Options: testOptions})
	if r.ExitCode != ExitMismatch || r.Status != StatusMismatch || r.Incomplete || !r.TargetZeroed ||
		r.SourceDigest == "" || r.TargetDigest == "" || r.SourceDigest == r.TargetDigest {
		t.Fatalf("exit %d status %s incomplete %t zeroed %t digests %s / %s, want a complete copy that fails verification",
			r.ExitCode, r.Status, r.Incomplete, r.TargetZeroed, r.SourceDigest, r.TargetDigest)
	}
	v := RunVerify(context.Background(), Request{Source: srcFile, Target: device, Options: testOptions})
	if v.ExitCode != ExitMismatch || v.MismatchByteOffset == nil || *v.MismatchByteOffset != 5*testChunk+8192 {
		t.Fatalf("verify: exit %d at %v, want a mismatch at byte %d", v.ExitCode, v.MismatchByteOffset, 5*testChunk+8192)
	}
}
