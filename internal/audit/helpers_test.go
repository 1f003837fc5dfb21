package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"
)

// testSigner is a fixed key, so that failures reproduce.
func testSigner(t testing.TB) *Signer {
	t.Helper()
	s, err := LoadSigner(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testRecord(i int) Record {
	subject := Subject{APIVersion: "nodewright.spectrocloud.com/v1alpha1", Kind: "VMVolumeMigration",
		Namespace: "vms", Name: fmt.Sprintf("m-%d", i%17), UID: "uid-1", Generation: int64(i % 5)}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * 1500 * time.Millisecond)
	return Transition(subject, "system:serviceaccount:nodewright-system:operator", "Step", "Copy", "Repoint",
		"StepSucceeded", "copy verified \"identical\"\n", fmt.Sprint(i), at,
		Detail{Name: "digest", Value: "blake3:0123abcd"}, Detail{Name: "pvc", Value: "data-é-☃"})
}

// buildChain writes n records through a log, checkpointing every `every` entries, and returns
// the stream's lines (the log's Close adds a final checkpoint).
func buildChain(t testing.TB, n int, every uint64) [][]byte {
	t.Helper()
	var buf bytes.Buffer
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	l := NewLog(NewWriterSink(&buf), testSigner(t), ChainState{}, LogOptions{CheckpointEvery: every,
		Now: func() time.Time { return clock }})
	for i := range n {
		if _, err := l.Append(context.Background(), testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return splitLines(buf.Bytes())
}

func splitLines(b []byte) [][]byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func join(lines [][]byte) []byte { return bytes.Join(lines, nil) }

func verifyBytes(t testing.TB, data []byte, opts VerifyOptions) *Report {
	t.Helper()
	if opts.PublicKeys == nil {
		opts.PublicKeys = append(opts.PublicKeys, testSigner(t).PublicKey())
	}
	r, err := Verify(opts, Input{Name: "audit.jsonl", Reader: bytes.NewReader(data)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rehash recomputes a line's hash after an edit, as a forger who knows the format would.
func rehash(line []byte) []byte {
	nl := bytes.HasSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\n"))
	body := append(bytes.Clone(line[:len(line)-hashSuffixLen]), '}')
	sum := sha256.Sum256(body)
	out := append(body[:len(body)-1], `,"hash":"`...)
	out = hex.AppendEncode(out, sum[:])
	out = append(out, `"}`...)
	if nl {
		out = append(out, '\n')
	}
	return out
}

func cloneLines(lines [][]byte) [][]byte {
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = bytes.Clone(l)
	}
	return out
}
