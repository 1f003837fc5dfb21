package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
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
