package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// testTrail writes a real, signed audit trail into a folder, as the operator does, in small
// files so that it rotates.
type testTrail struct {
	t        *testing.T
	dir, key string
	sink     *audit.FileSink
	log      *audit.Log
	n        int
}

func newTestTrail(t *testing.T) *testTrail {
	t.Helper()
	dir := t.TempDir()
	priv, pub, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.LoadSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "audit.pub")
	if err := os.WriteFile(key, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	tt := &testTrail{t: t, dir: filepath.Join(dir, "audit"), key: key}
	tt.open(signer)
	t.Cleanup(tt.close)
	return tt
}

func (tt *testTrail) open(signer *audit.Signer) {
	sink, err := audit.OpenFileSink(tt.dir, audit.FileSinkOptions{MaxFileBytes: 4 << 10})
	if err != nil {
		tt.t.Fatal(err)
	}
	tt.sink = sink
	tt.log = audit.NewLog(sink, signer, sink.State(), audit.LogOptions{CheckpointEvery: 7})
}

func (tt *testTrail) close() {
	if tt.log != nil {
		_ = tt.log.Close()
		_ = tt.sink.Close()
		tt.log = nil
	}
}

// add appends n records in one write.
func (tt *testTrail) add(n int) {
	tt.t.Helper()
	records := make([]audit.Record, 0, n)
	for range n {
		tt.n++
		subject := audit.Subject{APIVersion: "nodewright.spectrocloud.com/v1alpha1", Kind: "VMVolumeMigration", Namespace: "apps",
			Name: fmt.Sprintf("m-%d", tt.n), UID: types.UID(fmt.Sprintf("uid-%d", tt.n))}
		records = append(records, audit.Transition(subject, "ada@example.com", "MigrationTransition", "Pending", "Running", "Started",
			fmt.Sprintf("record %05d", tt.n), "", time.Date(2026, 11, 1, 10, 0, tt.n, 0, time.UTC)))
	}
	if _, err := tt.log.Append(context.Background(), records...); err != nil {
		tt.t.Fatal(err)
	}
}

// served is what /api/trail answers.
func served(t *testing.T, s *server) ([]byte, trailView) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.trailRecords(rec, httptest.NewRequest(http.MethodGet, "/api/trail", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/api/trail: %d %s", rec.Code, rec.Body)
	}
	var v trailView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return rec.Body.Bytes(), v
}

// The trail is read and verified once per change of its files, however many pages ask for it:
// the cost of a write does not grow with the number of open pages.
func TestTrailIsReadOncePerChange(t *testing.T) {
	tt := newTestTrail(t)
	tt.add(25)
	tr, err := newTrail(tt.dir, []string{tt.key})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{trail: tr}
	const pages = 20

	check := func(records int) {
		t.Helper()
		first, _ := served(t, s)
		for range pages - 1 {
			body, v := served(t, s)
			if !bytes.Equal(body, first) {
				t.Fatal("pages got different views of one state of the trail")
			}
			if v.Total != records || len(v.Records) != records || v.Verification == nil || v.Verification.Status != "verified" {
				t.Fatalf("view: %d of %d records, verification %+v, error %q; want %d, verified", len(v.Records), v.Total, v.Verification, v.Error, records)
			}
		}
	}
	check(25)
	if got := tr.computations.Load(); got != 1 {
		t.Fatalf("%d pages asked for the trail: computed %d times, want once", pages, got)
	}

	// Appends, while the folder is watched: each change is computed once, before the pages
	// are told, whatever they ask.
	var changes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		tr.watch(ctx, func() { changes.Add(1) }, func(msg string) {
			if msg != "" {
				t.Errorf("the trail's folder: %s", msg)
			}
		})
	}()
	for round := range 3 {
		told := changes.Load()
		tt.add(5)
		// A write can reach the watch as several file events, spread over more than the
		// settling delay on a busy machine: wait for the view that holds it all.
		waitUntil(t, fmt.Sprintf("round %d: the pages told of a view of %d records", round, tt.n), func() bool {
			var v trailView
			return changes.Load() > told && json.Unmarshal(tr.viewJSON(), &v) == nil && v.Total == tt.n
		})
		check(tt.n)
	}
	cancel()
	<-watching
	// The first page's request computed the view; since, only changes have.
	if got, want := tr.computations.Load(), 1+changes.Load(); got != want {
		t.Fatalf("computed %d times for %d change(s), with %d page requests after each: want %d, once per change and once for the first page", got, changes.Load(), pages, want)
	}
	t.Logf("%d records, %d changes, %d pages each time: computed %d times", tt.n, changes.Load(), pages, tr.computations.Load())
}

// waitUntil polls cond until it holds, failing after a limit that only a stuck test reaches.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	const limit = 2 * time.Minute
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: no %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The view read incrementally, change after change, is the view a fresh read of the same files
// gives: through appends, rotations, more records than the page gets, a line still being
// written, a record edited in place and put back, and a file removed.
func TestTrailReadIncrementallyMatchesAFullRead(t *testing.T) {
	tt := newTestTrail(t)
	tr, err := newTrail(tt.dir, []string{tt.key})
	if err != nil {
		t.Fatal(err)
	}
	same := func(step string, wantStatus string, wantTotal int) trailView {
		t.Helper()
		tr.refresh()
		got := tr.viewJSON()
		fresh, err := newTrail(tt.dir, []string{tt.key})
		if err != nil {
			t.Fatal(err)
		}
		want := fresh.viewJSON()
		var v trailView
		if err := json.Unmarshal(got, &v); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the incremental view differs from a full read:\n got %.600s\nwant %.600s", step, got, want)
		}
		if v.Verification == nil || v.Verification.Status != wantStatus || v.Total != wantTotal {
			t.Fatalf("%s: status %+v, %d records; want %s, %d", step, v.Verification, v.Total, wantStatus, wantTotal)
		}
		return v
	}
	tt.add(10)
	same("ten records", "verified", 10)
	tt.add(50)
	v := same("rotated into more files", "verified", 60)
	if len(v.Files) < 3 {
		t.Fatalf("%d files; the test wants rotation", len(v.Files))
	}
	tt.add(1100)
	v = same("more records than the page gets", "verified", 1160)
	if len(v.Records) != maxTrailRecords || v.Records[0].Message != "record 01160" || v.Records[maxTrailRecords-1].Message != "record 00161" {
		t.Fatalf("%d records shown, newest %q, oldest %q", len(v.Records), v.Records[0].Message, v.Records[len(v.Records)-1].Message)
	}

	// A line being written: left for the next read; gone again, the trail is as it was.
	last := v.Files[len(v.Files)-1]
	info, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, last, []byte(`{"v":1,"seq":`))
	same("a torn last line", "verified", 1160)
	if err := os.Truncate(last, info.Size()); err != nil {
		t.Fatal(err)
	}
	tt.add(3)
	same("appended after the torn line went", "verified", 1163)

	// A record edited in place, the file's end untouched: the verification fails, and the
	// record, which no longer hashes to what its line says, is not shown; put back, the
	// trail verifies again.
	first := v.Files[0]
	orig, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(orig, []byte("record 00002"), []byte("record 0000X"), 1)
	if bytes.Equal(edited, orig) {
		t.Fatal("record 00002 is not in the first file")
	}
	writeInPlace(t, first, edited)
	v = same("a record edited in place", "failed", 1162)
	if len(v.Verification.Problems) == 0 || !strings.Contains(v.Verification.Problems[0], "hash-mismatch") {
		t.Fatalf("problems %q", v.Verification.Problems)
	}
	writeInPlace(t, first, orig)
	same("the record put back", "verified", 1163)
	tt.add(2)
	same("appended after", "verified", 1165)

	// A file removed: the chain no longer starts at its beginning.
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	same("the first file removed", "failed", 1165-countLines(orig))
}

func appendTo(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeInPlace overwrites the file's bytes without replacing the file.
func writeInPlace(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// countLines counts the records (not the checkpoints) in a trail file's contents.
func countLines(data []byte) int {
	n := 0
	for line := range bytes.Lines(data) {
		if e, err := audit.ParseLine(bytes.TrimSuffix(line, []byte("\n"))); err == nil && e.Record != nil {
			n++
		}
	}
	return n
}

// The trail's folder may not exist yet, or go away and come back: watch says so each time, and
// follows it again once it is there.
func TestTrailWatchFollowsTheFolderComingAndGoing(t *testing.T) {
	old := trailRetry
	trailRetry = 20 * time.Millisecond
	t.Cleanup(func() { trailRetry = old })
	dir := filepath.Join(t.TempDir(), "audit")
	tr, err := newTrail(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	problems := make(chan string, 1000)
	changes := make(chan struct{}, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.watch(ctx, func() { changes <- struct{}{} }, func(msg string) { problems <- msg })
	}()
	defer func() { cancel(); <-done }()
	expect := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case msg := <-problems:
				if ok(msg) {
					return
				}
			case <-deadline:
				t.Fatalf("no report of %s", what)
			}
		}
	}
	missing := func(msg string) bool {
		return strings.Contains(msg, dir+" does not exist") && strings.Contains(msg, "once it does")
	}
	expect("the missing folder", missing)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	expect("the folder watched", func(msg string) bool { return msg == "" })
	if err := os.WriteFile(filepath.Join(dir, "audit-00000001.jsonl"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(2 * time.Minute):
		t.Fatal("no change reported")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	expect("the folder gone", missing)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	expect("the folder back", func(msg string) bool { return msg == "" })
}
