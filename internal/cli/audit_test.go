package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"sigs.k8s.io/yaml"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// trail writes n records through the operator's audit log into a FileSink folder (closed with
// a final checkpoint) and returns the folder and the public key's file.
func trail(t *testing.T, n int, opts audit.FileSinkOptions) (dir, keyFile string) {
	t.Helper()
	dir = t.TempDir()
	signer := testSigner(t)
	appendRecords(t, dir, signer, 0, n, opts)
	pub, err := audit.MarshalPublicKey(signer.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	keyFile = filepath.Join(t.TempDir(), "audit.pub")
	if err := os.WriteFile(keyFile, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, keyFile
}

func testSigner(t *testing.T) *audit.Signer {
	t.Helper()
	s, err := audit.LoadSigner(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// appendRecords appends records from..to-1 to the trail in dir, reopening it as a restarted
// operator would.
func appendRecords(t *testing.T, dir string, signer *audit.Signer, from, to int, opts audit.FileSinkOptions) {
	t.Helper()
	sink, err := audit.OpenFileSink(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	l := audit.NewLog(sink, signer, sink.State(), audit.LogOptions{CheckpointEvery: 4})
	for i := from; i < to; i++ {
		if _, err := l.Append(context.Background(), auditRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func auditRecord(i int) audit.Record {
	subject := audit.Subject{APIVersion: "nodewright.spectrocloud.com/v1alpha1", Kind: "VMVolumeMigration", Namespace: "apps",
		Name: "move-web", UID: "uid-1", Generation: 1}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * 1500 * time.Millisecond)
	return audit.Transition(subject, "alice", "Step", fmt.Sprintf("s%d", i), fmt.Sprintf("s%d", i+1), "StepSucceeded",
		fmt.Sprintf("record %d\nof the trail", i), "", at, audit.Detail{Name: "pvc", Value: "web-root"})
}

func TestAuditVerify(t *testing.T) {
	dir, key := trail(t, 10, audit.FileSinkOptions{})

	r := plugin(t, runOpts{}, "audit", "verify", "--public-key", key, dir)
	r.wantCode(t, ExitOK)
	if !regexp.MustCompile(`(?m)^OK: 13 entries \(10 records, 3 checkpoints\), seq 0\.\.12, 1 files$`).MatchString(r.stdout) {
		t.Errorf("a good trail:\n%s", r.stdout)
	}

	// Keep the last checkpoint outside the trail, as the operator publishes it.
	files, _ := audit.ChainFiles(dir)
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines = lines[:len(lines)-1] // the empty string after the last newline
	trusted := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := os.WriteFile(trusted, lines[len(lines)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	plugin(t, runOpts{}, "audit", "verify", "--public-key", key, "--trusted-checkpoint", trusted, files[0]).wantCode(t, ExitOK)

	// An edited record: hash-mismatch, exit code 1.
	tampered := bytes.Clone(data)
	copy(tampered[bytes.Index(tampered, []byte("record 3")):], "record X")
	bad := filepath.Join(t.TempDir(), "audit-00000001.jsonl")
	if err := os.WriteFile(bad, tampered, 0o644); err != nil {
		t.Fatal(err)
	}
	r = plugin(t, runOpts{}, "audit", "verify", "--public-key", key, bad)
	r.wantCode(t, ExitFailed)
	if !regexp.MustCompile(`(?m)^FAIL .*audit-00000001\.jsonl:4 seq 3: hash-mismatch: `).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^TAMPERED OR DAMAGED \(\d+ problems\): `).MatchString(r.stdout) || r.stderr != "" {
		t.Errorf("a tampered trail:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	r = plugin(t, runOpts{}, "audit", "verify", "--public-key", key, "-o", "json", bad)
	r.wantCode(t, ExitFailed)
	var report audit.Report
	if err := json.Unmarshal([]byte(r.stdout), &report); err != nil || report.OK || len(report.Problems) == 0 || report.Problems[0].Kind != audit.ProblemHashMismatch {
		t.Errorf("-o json: %v\n%s", err, r.stdout)
	}

	// The end cut off, final checkpoint and all: the rest is a valid chain, but it no longer
	// reaches the trusted checkpoint.
	cut := filepath.Join(t.TempDir(), "audit-00000001.jsonl")
	if err := os.WriteFile(cut, bytes.Join(lines[:len(lines)-3], nil), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin(t, runOpts{}, "audit", "verify", "--public-key", key, cut).wantCode(t, ExitOK)
	r = plugin(t, runOpts{}, "audit", "verify", "--public-key", key, "--trusted-checkpoint", trusted, cut)
	r.wantCode(t, ExitFailed)
	if !regexp.MustCompile(`(?m)^FAIL \S+/audit-00000001\.jsonl:11 seq 10: truncated: the trusted checkpoint covers seq 0\.\.11 but the trail ends at seq 9: entries 10\.\.11 deleted from the end$`).MatchString(r.stdout) {
		t.Errorf("a truncated trail against the trusted checkpoint:\n%s", r.stdout)
	}

	// Bad input: exit code 2.
	for _, args := range [][]string{
		{"audit", "verify", dir},                                                        // no key
		{"audit", "verify", "--public-key", key},                                        // no files
		{"audit", "verify", "--public-key", key, dir + "/missing"},                      // unreadable
		{"audit", "verify", "--public-key", files[0], dir},                              // not a key
		{"audit", "verify", "--public-key", key, "--trusted-checkpoint", files[0], dir}, // not one line
		{"audit", "verify", "--public-key", key, "-o", "xml", dir},
	} {
		r := plugin(t, runOpts{}, args...)
		r.wantCode(t, ExitUsage)
		if !strings.HasPrefix(r.stderr, "Error: ") {
			t.Errorf("%v: stderr %q", args, r.stderr)
		}
	}
}

func TestAuditTail(t *testing.T) {
	dir, _ := trail(t, 12, audit.FileSinkOptions{})

	r := plugin(t, runOpts{}, "audit", "tail", dir, "--tail", "3")
	r.wantCode(t, ExitOK)
	want := `2026-11-21T10:00:13.5Z  seq 11  alice  VMVolumeMigration apps/move-web  Step s9 → s10  StepSucceeded: record 9 of the trail  [pvc=web-root]
2026-11-21T10:00:15Z  seq 12  alice  VMVolumeMigration apps/move-web  Step s10 → s11  StepSucceeded: record 10 of the trail  [pvc=web-root]
2026-11-21T10:00:16.5Z  seq 13  alice  VMVolumeMigration apps/move-web  Step s11 → s12  StepSucceeded: record 11 of the trail  [pvc=web-root]
`
	if r.stdout != want {
		t.Errorf("tail --tail 3:\n%s\nwant:\n%s", r.stdout, want)
	}

	// Ten by default; checkpoints only when asked for; -o json gives the lines as stored.
	r = plugin(t, runOpts{}, "audit", "tail", dir)
	if n := strings.Count(r.stdout, "\n"); n != 10 || strings.Contains(r.stdout, "checkpoint") {
		t.Errorf("tail: %d lines\n%s", n, r.stdout)
	}
	r = plugin(t, runOpts{}, "audit", "tail", dir, "--tail", "2", "--checkpoints", "-o", "json")
	files, _ := audit.ChainFiles(dir)
	data, _ := os.ReadFile(files[0])
	lines := bytes.SplitAfter(data, []byte("\n"))
	if wantJSON := string(bytes.Join(lines[len(lines)-3:], nil)); r.stdout != wantJSON || !strings.Contains(r.stdout, `"checkpoint":{`) {
		t.Errorf("tail -o json --checkpoints:\n%s\nwant:\n%s", r.stdout, wantJSON)
	}
	r = plugin(t, runOpts{}, "audit", "tail", dir, "--tail", "-1")
	if n := strings.Count(r.stdout, "\n"); n != 12 {
		t.Errorf("tail --tail -1: %d lines, want all 12 records", n)
	}

	// -o table is the lines for people, as without -o (text is another name for it); -o yaml
	// is each entry as a YAML document, with what the trail stores.
	for _, format := range []string{"table", "text"} {
		r = plugin(t, runOpts{}, "audit", "tail", dir, "--tail", "3", "-o", format)
		r.wantCode(t, ExitOK)
		if r.stdout != want {
			t.Errorf("tail -o %s:\n%s\nwant:\n%s", format, r.stdout, want)
		}
	}
	r = plugin(t, runOpts{}, "audit", "tail", dir, "--tail", "2", "--checkpoints", "-o", "yaml")
	r.wantCode(t, ExitOK)
	docs := strings.Split(strings.TrimPrefix(r.stdout, "---\n"), "---\n")
	if len(docs) != 2 {
		t.Fatalf("tail -o yaml: %d documents, want 2:\n%s", len(docs), r.stdout)
	}
	for i, doc := range docs {
		var got, stored any
		data, err := yaml.YAMLToJSON([]byte(doc))
		if err == nil {
			err = json.Unmarshal(data, &got)
		}
		if err == nil {
			err = json.Unmarshal(lines[len(lines)-3+i], &stored)
		}
		if err != nil || !reflect.DeepEqual(got, stored) {
			t.Errorf("tail -o yaml, document %d: %v\n%s\nwant the entry\n%s", i+1, err, doc, lines[len(lines)-3+i])
		}
	}

	// A folder that cannot be read (missing, or not a folder) is the command failing, as its
	// help says: 1, not a usage error.
	for _, bad := range []string{filepath.Join(dir, "missing"), files[0]} {
		r = plugin(t, runOpts{}, "audit", "tail", bad)
		r.wantCode(t, ExitFailed)
		if !strings.HasPrefix(r.stderr, "Error: ") || strings.Contains(r.stderr, "--help") {
			t.Errorf("audit tail %s: stderr %q", bad, r.stderr)
		}
	}
	plugin(t, runOpts{}, "audit", "tail", dir, dir).wantCode(t, ExitUsage)
}

// tail -f follows the trail as records are appended, across the files it rotates into.
func TestAuditTailFollows(t *testing.T) {
	small := audit.FileSinkOptions{MaxFileBytes: 4096}
	dir, _ := trail(t, 3, small)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.SyncBuffer{}
	done := make(chan invocation, 1)
	go func() { done <- plugin(t, runOpts{ctx: ctx, stdout: out}, "audit", "tail", "-f", dir) }()
	waitForOutput(out, "record 2 of the trail")

	appendRecords(t, dir, testSigner(t), 3, 40, small)
	waitForOutput(out, "record 39 of the trail")
	cancel()
	r := <-done
	r.wantCode(t, ExitOK)
	if files, _ := audit.ChainFiles(dir); len(files) < 3 {
		t.Fatalf("the trail did not rotate (%d files): the test does not test following across files", len(files))
	}
	for i := range 40 {
		if n := strings.Count(r.stdout, fmt.Sprintf(": record %d of the trail", i)); n != 1 {
			t.Errorf("record %d printed %d times", i, n)
		}
	}
	if r.stderr != "" {
		t.Errorf("stderr %q", r.stderr)
	}
}

// tail -f reads on when the folder's watch says something changed, and does not poll: a line
// appended through a hard link outside the folder (which the folder's watch is not told about)
// is printed only once something happens in the folder.
func TestAuditTailFollowsNotifications(t *testing.T) {
	defer func(d time.Duration) { tailPoll = d }(tailPoll)
	tailPoll = 10 * time.Millisecond
	dir, _ := trail(t, 3, audit.FileSinkOptions{})
	files, _ := audit.ChainFiles(dir)
	link := filepath.Join(t.TempDir(), "elsewhere.jsonl")
	if err := os.Link(files[len(files)-1], link); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	data, _ := os.ReadFile(link)
	var unseen []byte
	for _, l := range bytes.SplitAfter(data, []byte("\n")) {
		if bytes.Contains(l, []byte("record 2\\nof")) {
			unseen = bytes.Replace(l, []byte("record 2\\nof"), []byte("record X\\nof"), 1)
		}
	}
	if unseen == nil {
		t.Fatalf("no record 2 in\n%s", data)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.SyncBuffer{}
	done := make(chan invocation, 1)
	go func() { done <- plugin(t, runOpts{ctx: ctx, stdout: out}, "audit", "tail", "-f", dir) }()
	waitForOutput(out, "record 2 of the trail")

	appendTo(t, link, unseen)
	time.Sleep(30 * tailPoll)
	if strings.Contains(out.String(), "record X") {
		t.Fatalf("a change the folder's watch was not told about was printed: tail -f polls\n%s", out.String())
	}
	// Something happens in the folder: the watch tells, tail reads on.
	if err := os.WriteFile(filepath.Join(dir, "unrelated"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitForOutput(out, "record X of the trail")
	cancel()
	r := <-done
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "record X of the trail") {
		t.Errorf("a change in the folder did not wake tail -f:\n%s", r.stdout)
	}
}

// Where the folder cannot be watched, tail -f polls it.
func TestAuditTailPollsWithoutNotifications(t *testing.T) {
	defer func(d time.Duration) { tailPoll = d }(tailPoll)
	tailPoll = 10 * time.Millisecond
	defer func(w func(string) (*fsnotify.Watcher, error)) { watchFolder = w }(watchFolder)
	watchFolder = func(string) (*fsnotify.Watcher, error) { return nil, errors.New("no inotify here") }

	dir, _ := trail(t, 3, audit.FileSinkOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.SyncBuffer{}
	done := make(chan invocation, 1)
	go func() { done <- plugin(t, runOpts{ctx: ctx, stdout: out}, "audit", "tail", "-f", dir) }()
	waitForOutput(out, "record 2 of the trail")
	appendRecords(t, dir, testSigner(t), 3, 6, audit.FileSinkOptions{})
	waitForOutput(out, "record 5 of the trail")
	cancel()
	r := <-done
	r.wantCode(t, ExitOK)
	for i := range 6 {
		if n := strings.Count(r.stdout, fmt.Sprintf(": record %d of the trail", i)); n != 1 {
			t.Errorf("record %d printed %d times", i, n)
		}
	}
}

func appendTo(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}
