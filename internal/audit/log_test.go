package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

func openTestLog(t *testing.T, dir string, opts FileSinkOptions, every uint64) (*Log, *FileSink) {
	t.Helper()
	sink, err := OpenFileSink(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return NewLog(sink, testSigner(t), sink.State(), LogOptions{CheckpointEvery: every}), sink
}

func verifyDir(t *testing.T, dir string) *Report {
	t.Helper()
	files, err := ChainFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := VerifyFiles(VerifyOptions{PublicKeys: []ed25519.PublicKey{testSigner(t).PublicKey()}}, files...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAppendIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	l, _ := openTestLog(t, dir, FileSinkOptions{}, 100)
	ctx := context.Background()
	first, err := l.Append(ctx, testRecord(0), testRecord(1))
	if err != nil {
		t.Fatal(err)
	}
	// Re-sent alone, re-sent in a batch with a new one, and twice within one batch.
	again, err := l.Append(ctx, testRecord(1), testRecord(2), testRecord(2))
	if err != nil {
		t.Fatal(err)
	}
	want := []Appended{{Seq: 1, Duplicate: true}, {Seq: 2}, {Seq: 2, Duplicate: true}}
	if first[1].Seq != 1 || len(again) != 3 || again[0] != want[0] || again[1] != want[1] || again[2] != want[2] {
		t.Fatalf("first %v, again %v, want %v", first, again, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// After a restart the chain's IDs are recovered from the files.
	l, _ = openTestLog(t, dir, FileSinkOptions{}, 100)
	res, err := l.Append(ctx, testRecord(0), testRecord(3))
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != (Appended{Seq: 0, Duplicate: true}) || res[1].Duplicate || res[1].Seq != 4 {
		t.Fatalf("after reopening: %v (seq 3 is the first close's checkpoint)", res)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if r := verifyDir(t, dir); !r.OK || r.Records != 4 || r.Unsigned != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestAppendWithoutIDIsRefused(t *testing.T) {
	l, _ := openTestLog(t, t.TempDir(), FileSinkOptions{}, 100)
	defer func() { _ = l.Close() }()
	if _, err := l.Append(context.Background(), testRecord(0), Record{Action: "x"}); !errors.Is(err, errNoID) {
		t.Fatalf("err %v", err)
	}
}

func TestConcurrentAppendsFormOneChain(t *testing.T) {
	dir := t.TempDir()
	l, _ := openTestLog(t, dir, FileSinkOptions{MaxFileBytes: 64 << 10}, 50)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if _, err := l.Append(context.Background(), testRecord(w*1000+i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Checkpoint(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), testRecord(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	r := verifyDir(t, dir)
	if !r.OK || r.Records != 800 || r.Unsigned != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestRotationKeepsOneChain(t *testing.T) {
	dir := t.TempDir()
	l, _ := openTestLog(t, dir, FileSinkOptions{MaxFileBytes: 16 << 10}, 40)
	for i := range 300 {
		if _, err := l.Append(context.Background(), testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := ChainFiles(dir)
	if len(files) < 4 {
		t.Fatalf("%d files, want several", len(files))
	}
	for _, f := range files {
		if info, _ := os.Stat(f); info.Size() > 16<<10 {
			t.Errorf("%s has %d bytes, over the limit", f, info.Size())
		}
	}
	if r := verifyDir(t, dir); !r.OK || r.Records != 300 {
		t.Fatalf("%+v", r)
	}
	// A missing middle file is a gap at the start of the next one.
	middle := files[len(files)/2]
	if err := os.Remove(middle); err != nil {
		t.Fatal(err)
	}
	r := verifyDir(t, dir)
	if r.OK || len(r.Problems) != 1 || r.Problems[0].Kind != ProblemGap || r.Problems[0].Line != 1 || r.Problems[0].File != files[len(files)/2+1] {
		t.Fatalf("missing %s: %v", middle, r.Problems)
	}
	// A log refuses to append to a broken chain.
	if _, err := OpenFileSink(dir, FileSinkOptions{}); err == nil {
		t.Fatal("opened a broken chain for appending")
	}
}

func TestTornTailIsCutOnOpen(t *testing.T) {
	dir := t.TempDir()
	l, _ := openTestLog(t, dir, FileSinkOptions{}, 1000)
	if _, err := l.Append(context.Background(), testRecord(0), testRecord(1)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := ChainFiles(dir)
	f, err := os.OpenFile(files[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"v":1,"seq":3,"prev":"ab`); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if r := verifyDir(t, dir); r.OK || r.Problems[0].Kind != ProblemTornLine {
		t.Fatalf("torn line not reported: %+v", r)
	}
	l, sink := openTestLog(t, dir, FileSinkOptions{}, 1000)
	if sink.Repaired() != 25 || sink.State().Next != 3 {
		t.Fatalf("repaired %d bytes, next seq %d", sink.Repaired(), sink.State().Next)
	}
	if _, err := l.Append(context.Background(), testRecord(2)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if r := verifyDir(t, dir); !r.OK || r.Records != 3 {
		t.Fatalf("%+v", r)
	}
}

// failingSink fails every append, as a full disk would.
type failingSink struct{}

func (failingSink) Append(context.Context, []Entry) error { return errors.New("disk full") }
func (failingSink) Close() error                          { return nil }

func TestSinkFailureStopsTheLog(t *testing.T) {
	l := NewLog(failingSink{}, testSigner(t), ChainState{}, LogOptions{})
	if _, err := l.Append(context.Background(), testRecord(0)); err == nil {
		t.Fatal("a failed write was reported durable")
	}
	if _, err := l.Append(context.Background(), testRecord(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("the log went on after a sink failure: %v", err)
	}
	if err := l.Close(); err == nil {
		t.Fatal("Close hid the sink failure")
	}
}

// TestOnCheckpointPublishesEachCheckpointLine: the hook receives every checkpoint's line once
// it is durable, and the newest one serves as a trusted checkpoint for the files.
func TestOnCheckpointPublishesEachCheckpointLine(t *testing.T) {
	priv, pubPEM, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := LoadSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sink, err := OpenFileSink(dir, FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	log := NewLog(sink, signer, sink.State(), LogOptions{CheckpointEvery: 3, OnCheckpoint: func(line []byte) { lines = append(lines, line) }})
	subject := Subject{Kind: "VMVolumeMigration", Name: "m", UID: "u"}
	for i := range 7 {
		if _, err := log.Append(context.Background(), Transition(subject, "a", "Step", "x", "y", "r", "", strconv.Itoa(i), time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	// Seven records: checkpoints after the third and the sixth entry, and one on Close.
	if len(lines) != 3 {
		t.Fatalf("%d checkpoint lines, want 3", len(lines))
	}
	e, err := ParseLine(lines[2])
	if err != nil || e.Checkpoint == nil {
		t.Fatalf("the newest line is no checkpoint: %v", err)
	}
	files, err := ChainFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	report, err := VerifyFiles(VerifyOptions{PublicKeys: []ed25519.PublicKey{pub}, Trusted: e.Checkpoint}, files...)
	if err != nil || !report.OK {
		t.Fatalf("verifying against the published checkpoint: %v %+v", err, report)
	}
}
