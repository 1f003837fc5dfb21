package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("collector gone") }

func TestTeeCopiesTheChainAndAFailingCopyNeverFailsAnAppend(t *testing.T) {
	dir := t.TempDir()
	file, err := OpenFileSink(dir, FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	var reported []error
	sink := Tee(file, func(err error) { reported = append(reported, err) }, NewWriterSink(&stdout), NewWriterSink(brokenWriter{}))
	l := NewLog(sink, testSigner(t), file.State(), LogOptions{CheckpointEvery: 3})
	for i := range 5 {
		if _, err := l.Append(context.Background(), testRecord(i)); err != nil {
			t.Fatalf("append %d failed because a copy failed: %v", i, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no trail files: %v", err)
	}
	var held []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b...)
	}
	if !bytes.Equal(held, stdout.Bytes()) {
		t.Fatalf("the copy differs from the trail:\ncopy:  %q\ntrail: %q", stdout.Bytes(), held)
	}
	if len(reported) == 0 {
		t.Fatal("the broken copy's failures were not reported")
	}
}

// stalled is a reader that never reads: every Write blocks until the test ends.
type stalled struct{ release chan struct{} }

func (s stalled) Write(p []byte) (int, error) { <-s.release; return len(p), nil }

func TestAStalledCopyNeverBlocksTheTrail(t *testing.T) {
	teeCloseWait = 100 * time.Millisecond
	t.Cleanup(func() { teeCloseWait = 5 * time.Second })
	release := make(chan struct{})
	defer close(release)
	file, err := OpenFileSink(t.TempDir(), FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var reported int
	var mu sync.Mutex
	sink := Tee(file, func(error) { mu.Lock(); reported++; mu.Unlock() }, NewWriterSink(stalled{release}))
	l := NewLog(sink, testSigner(t), file.State(), LogOptions{CheckpointEvery: 100})
	done := make(chan error, 1)
	go func() {
		for i := range 3 * teeQueue {
			if _, err := l.Append(context.Background(), testRecord(i)); err != nil {
				done <- err
				return
			}
		}
		done <- l.Close()
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "did not finish writing") {
			t.Fatalf("Close: %v; want the stalled copy reported", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("appends blocked on a stalled copy")
	}
	mu.Lock()
	defer mu.Unlock()
	if reported == 0 {
		t.Fatal("the dropped batches were not reported")
	}
}
