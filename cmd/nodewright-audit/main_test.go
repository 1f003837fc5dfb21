package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// writeTrail generates a key pair with keygen and writes a signed trail of n records.
func writeTrail(t *testing.T, n int) (dir, pubFile string) {
	t.Helper()
	dir = t.TempDir()
	privFile, pubFile := filepath.Join(dir, "key.pem"), filepath.Join(dir, "key.pub")
	var out, errOut bytes.Buffer
	if code := run([]string{"keygen", "--private-key", privFile, "--public-key", pubFile}, &out, &errOut); code != exitOK {
		t.Fatalf("keygen: %d %s", code, errOut.String())
	}
	if code := run([]string{"keygen", "--private-key", privFile, "--public-key", pubFile}, &out, &errOut); code != exitBadInput {
		t.Fatalf("keygen overwrote a key: %d", code)
	}
	priv, err := os.ReadFile(privFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.LoadSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	trail := filepath.Join(dir, "trail")
	sink, err := audit.OpenFileSink(trail, audit.FileSinkOptions{MaxFileBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	l := audit.NewLog(sink, signer, sink.State(), audit.LogOptions{CheckpointEvery: 10})
	for i := range n {
		r := audit.Transition(audit.Subject{Kind: "VMVolumeMigration", Name: "m", UID: "u"}, "operator", "Step", "Copy", "Repoint", "StepSucceeded", "", strconv.Itoa(i), time.Now())
		if _, err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return trail, pubFile
}

func TestVerifyExitCodesAndOutput(t *testing.T) {
	trail, pub := writeTrail(t, 60)
	var out, errOut bytes.Buffer
	if code := run([]string{"verify", "--public-key", pub, trail}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "OK: ") {
		t.Fatalf("intact trail: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	files, _ := audit.ChainFiles(trail)
	if len(files) < 2 {
		t.Fatalf("want a rotated trail, got %d files", len(files))
	}
	// The last line of the trail, kept aside, becomes a trusted checkpoint.
	last := lastLine(t, files[len(files)-1])
	trusted := filepath.Join(t.TempDir(), "checkpoint")
	if err := os.WriteFile(trusted, last, 0o600); err != nil {
		t.Fatal(err)
	}
	// Cut the newest file off entirely: only the trusted checkpoint can tell.
	out.Reset()
	code := run(append([]string{"verify", "--json", "--public-key", pub, "--trusted-checkpoint", trusted}, files[:len(files)-1]...), &out, &errOut)
	var report audit.Report
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if code != exitTampered || report.OK || report.Problems[0].Kind != audit.ProblemTruncated {
		t.Fatalf("truncation: exit %d, %+v", code, report)
	}
	// An edited byte is named with its file, line and seq.
	data, _ := os.ReadFile(files[0])
	if err := os.WriteFile(files[0], bytes.Replace(data, []byte("StepSucceeded"), []byte("StepSucceedeD"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, trail}, &out, &errOut); code != exitTampered ||
		!strings.Contains(out.String(), "FAIL "+files[0]+":1 seq 0: hash-mismatch") {
		t.Fatalf("edit: exit %d\n%s", code, out.String())
	}
	for _, bad := range [][]string{
		{"verify", trail},
		{"verify", "--public-key", pub},
		{"verify", "--public-key", filepath.Join(trail, "missing"), trail},
		{"verify", "--public-key", pub, filepath.Join(trail, "missing")},
		{"verify", "--public-key", files[0], trail},
		{"frobnicate"},
		{},
	} {
		if code := run(bad, &out, &errOut); code != exitBadInput {
			t.Errorf("%q: exit %d, want %d", bad, code, exitBadInput)
		}
	}
}

func lastLine(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	return lines[len(lines)-1]
}
