package audit

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// Every character class round-trips, the line is JSON any tool reads the same way, and the
// encoding of one instant does not depend on its zone.
func TestCanonicalEncodingRoundTrips(t *testing.T) {
	var all strings.Builder
	for c := range 0x20 {
		all.WriteByte(byte(c))
	}
	all.WriteString("\"\\/<>&\u007f\u2028é☃😀")
	r := testRecord(1)
	r.Message = all.String()
	r.Subject.Generation = -9223372036854775808
	r.Details = nil
	e := newEntry(3, Hash{1}, &r, nil)
	got, err := ParseLine(e.Line())
	if err != nil {
		t.Fatal(err)
	}
	if got.Record.Message != r.Message || got.Record.Subject.Generation != r.Subject.Generation || got.Hash != e.Hash {
		t.Fatalf("round trip changed the record: %+v", got.Record)
	}
	var generic struct {
		Record struct {
			Message string `json:"message"`
		} `json:"record"`
	}
	if err := json.Unmarshal(e.Line(), &generic); err != nil || generic.Record.Message != r.Message {
		t.Fatalf("encoding/json reads %q, %v", generic.Record.Message, err)
	}

	zoned := r
	zoned.Time = r.Time.In(time.FixedZone("X", -7*3600))
	if z := newEntry(3, Hash{1}, &zoned, nil); z.Hash != e.Hash {
		t.Error("the same instant in another zone encodes differently")
	}

	invalid := r
	invalid.Message = "a\xffb"
	line := newEntry(0, Hash{}, &invalid, nil).Line()
	if got, err := ParseLine(line); err != nil || got.Record.Message != "a\uFFFDb" {
		t.Errorf("invalid UTF-8: %q, %v", got.Record.Message, err)
	}
}

func TestCheckpointIntervalSignsIdleTail(t *testing.T) {
	dir := t.TempDir()
	sink, err := OpenFileSink(dir, FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog(sink, testSigner(t), sink.State(), LogOptions{CheckpointInterval: 20 * time.Millisecond})
	defer func() { _ = l.Close() }()
	if _, err := l.Append(t.Context(), testRecord(0)); err != nil {
		t.Fatal(err)
	}
	files, _ := ChainFiles(dir)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		data, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(string(data), "\n") == 2 && strings.Contains(string(data), `"checkpoint":{"size":1,`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after the interval:\n%s", data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
