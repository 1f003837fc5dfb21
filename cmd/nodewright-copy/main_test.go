//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"lukechampine.com/blake3"

	"github.com/spectrocloud/nodewright/internal/blockcopy"
)

// invocation is one run of the command line with its outputs.
type invocation struct {
	code           int
	stdout, stderr string
}

func invoke(ctx context.Context, args ...string) invocation {
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return invocation{code, stdout.String(), stderr.String()}
}

func (inv invocation) result(t *testing.T) blockcopy.Result {
	t.Helper()
	var r blockcopy.Result
	if err := json.Unmarshal([]byte(inv.stdout), &r); err != nil {
		t.Fatalf("stdout is not one JSON result: %v\n%s", err, inv.stdout)
	}
	if strings.Count(strings.TrimSpace(inv.stdout), "\n") != 0 {
		t.Fatalf("stdout holds more than one line:\n%s", inv.stdout)
	}
	return r
}

func sourceFile(t *testing.T, size int) (path string, content []byte) {
	t.Helper()
	content = make([]byte, size)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "source.img")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content
}

func TestCopyJSONAndTerminationLog(t *testing.T) {
	src, content := sourceFile(t, 300000)
	dst := filepath.Join(t.TempDir(), "target.img")
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	inv := invoke(context.Background(), "copy", "--src", src, "--dst", dst, "--json", "--termination-log", termLog, "--chunk-size", "65536")
	if inv.code != 0 {
		t.Fatalf("exit %d, want 0; stderr: %s", inv.code, inv.stderr)
	}
	r := inv.result(t)
	sum := blake3.Sum256(content)
	want := "blake3:" + hex.EncodeToString(sum[:])
	if r.Status != "ok" || r.Command != "copy" || r.Algorithm != "blake3" || r.SourceDigest != want || r.TargetDigest != want ||
		r.BytesTotal != int64(len(content)) || r.BytesWritten != int64(len(content)) || r.Incomplete {
		t.Fatalf("unexpected result: %+v (want digest %s)", r, want)
	}
	copied, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(copied, content) {
		t.Fatalf("target does not hold the source's bytes (err %v)", err)
	}
	logged, err := os.ReadFile(termLog)
	if err != nil || string(logged) != inv.stdout {
		t.Fatalf("termination log %q (err %v), want the JSON result %q", logged, err, inv.stdout)
	}
}

func TestHumanOutputAndSHA256(t *testing.T) {
	src, _ := sourceFile(t, 70000)
	dst := filepath.Join(t.TempDir(), "target.img")
	absentLog := filepath.Join(t.TempDir(), "absent")
	inv := invoke(context.Background(), "copy", "--src", src, "--dst", dst, "--hash", "sha256", "--termination-log", absentLog)
	if inv.code != 0 || !strings.Contains(inv.stdout, "skipped as holes or zeros") || !strings.Contains(inv.stdout, "source sha256:") {
		t.Fatalf("exit %d, stdout %q, want a human summary with sha256 digests", inv.code, inv.stdout)
	}
	if _, err := os.Stat(absentLog); err == nil {
		t.Fatal("a termination log was created where none existed")
	}
}

func TestExitCodes(t *testing.T) {
	src, _ := sourceFile(t, 200000)
	dir := t.TempDir()
	small := filepath.Join(dir, "small.img")
	if err := os.WriteFile(small, make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name       string
		ctx        context.Context
		args       []string
		wantCode   int
		wantStatus string // checked when --json is among args
		wantStderr string
	}{
		{"no command", context.Background(), nil, 2, "", "missing command"},
		{"unknown command", context.Background(), []string{"move"}, 2, "", "unknown command \"move\""},
		{"unknown flag", context.Background(), []string{"copy", "--bogus"}, 2, "", "flag provided but not defined"},
		{"stray argument", context.Background(), []string{"verify", "--src", src, "extra"}, 2, "", "unexpected argument"},
		{"missing --dst", context.Background(), []string{"copy", "--src", src, "--json"}, 2, "bad-input", "--dst is required"},
		{"unknown hash", context.Background(), []string{"copy", "--src", src, "--dst", filepath.Join(dir, "x"), "--hash", "md5", "--json"}, 2, "bad-input", "--hash \"md5\""},
		{"target too small", context.Background(), []string{"copy", "--src", src, "--dst", small, "--json"}, 2, "bad-input", "--dst " + small},
		{"same file", context.Background(), []string{"copy", "--src", src, "--dst", src, "--json"}, 2, "bad-input", "same file"},
		{"cancelled", cancelled, []string{"copy", "--src", src, "--dst", filepath.Join(dir, "c"), "--json"}, 4, "cancelled", "cancelled"},
		{"help", context.Background(), []string{"copy", "-h"}, 0, "", "-target-zeroed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if len(args) > 0 && (args[0] == "copy" || args[0] == "verify") {
				// Never touch a real /dev/termination-log when tests run in a pod.
				args = append([]string{args[0], "--termination-log="}, args[1:]...)
			}
			inv := invoke(tt.ctx, args...)
			if inv.code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr: %s", inv.code, tt.wantCode, inv.stderr)
			}
			if !strings.Contains(inv.stderr, tt.wantStderr) {
				t.Fatalf("stderr %q does not say %q", inv.stderr, tt.wantStderr)
			}
			if tt.wantStatus != "" && strings.Contains(strings.Join(tt.args, " "), "--json") {
				r := inv.result(t)
				if r.Status != tt.wantStatus || r.ExitCode != tt.wantCode || r.Error == "" {
					t.Fatalf("JSON status %q exit %d error %q, want %q and %d with a reason", r.Status, r.ExitCode, r.Error, tt.wantStatus, tt.wantCode)
				}
				if tt.wantStatus == "cancelled" && !r.Incomplete {
					t.Fatal("cancelled copy not reported incomplete")
				}
			}
		})
	}
}

func TestVerifyMismatchOffset(t *testing.T) {
	src, content := sourceFile(t, 400000)
	dst := filepath.Join(t.TempDir(), "target.img")
	tampered := append([]byte{}, content...)
	const off = 3*65536 + 1234
	tampered[off] ^= 0x80
	if err := os.WriteFile(dst, tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	inv := invoke(context.Background(), "verify", "--src", src, "--dst", dst, "--json", "--chunk-size", "65536", "--termination-log", "")
	r := inv.result(t)
	if inv.code != 1 || r.Status != "mismatch" || r.MismatchChunkOffset == nil || *r.MismatchChunkOffset != 3*65536 || *r.MismatchByteOffset != off {
		t.Fatalf("exit %d result %+v, want a mismatch at chunk %d byte %d", inv.code, r, 3*65536, off)
	}
	if !strings.Contains(inv.stderr, "offset "+strconv.Itoa(3*65536)) {
		t.Fatalf("stderr %q does not name the chunk offset", inv.stderr)
	}

	if err := os.WriteFile(dst, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if inv := invoke(context.Background(), "verify", "--src", src, "--dst", dst, "--termination-log", ""); inv.code != 0 {
		t.Fatalf("verify of identical files: exit %d, stderr %s", inv.code, inv.stderr)
	}
}

func TestProgressLines(t *testing.T) {
	src, content := sourceFile(t, 1<<20)
	dst := filepath.Join(t.TempDir(), "target.img")
	// With an interval longer than the test, exactly the end-of-phase lines
	// appear: the copy's when the read-back begins, and the final one.
	inv := invoke(context.Background(), "copy", "--src", src, "--dst", dst, "--progress", "--progress-interval", "1h", "--chunk-size", "65536", "--termination-log", "")
	if inv.code != 0 {
		t.Fatalf("exit %d, stderr %s", inv.code, inv.stderr)
	}
	var phases []string
	lines := bufio.NewScanner(strings.NewReader(inv.stderr))
	for lines.Scan() {
		var r blockcopy.ProgressReport
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			t.Fatalf("progress line %q is not JSON: %v", lines.Text(), err)
		}
		if r.BytesDone != r.BytesTotal || r.BytesTotal != int64(len(content)) || r.EtaSeconds != 0 {
			t.Fatalf("progress line %q does not describe a finished phase of %d bytes", lines.Text(), len(content))
		}
		phases = append(phases, r.Phase)
	}
	if strings.Join(phases, ",") != "copy,verify" {
		t.Fatalf("progress phases %v, want copy then verify", phases)
	}
}
