package drbd

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParseStatus: no input makes ParseStatus panic; every refusal is a *StatusError naming a
// path; and whatever it accepts encodes back into an answer it reads as the same resources.
func FuzzParseStatus(f *testing.F) {
	samples, err := filepath.Glob(filepath.Join("testdata", "status", "*.json"))
	if err != nil || len(samples) == 0 {
		f.Fatalf("no samples in testdata/status (%v)", err)
	}
	for _, sample := range samples {
		data, err := os.ReadFile(sample)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{"", "[]", "[\n]\n", "null", "[{}]", `[{"name":-nan}]`, `"nan"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		resources, err := ParseStatus(data)
		if err != nil {
			var statusErr *StatusError
			if !errors.As(err, &statusErr) || statusErr.Path == "" || statusErr.Reason == "" {
				t.Fatalf("refusal %v is not a *StatusError with a path and a reason", err)
			}
			return
		}
		if len(resources) > MaxStatusResources {
			t.Fatalf("accepted %d resources, more than %d", len(resources), MaxStatusResources)
		}
		encoded, err := json.Marshal(resources)
		if err != nil {
			t.Fatalf("encoding what was parsed: %v", err)
		}
		// Invalid UTF-8 in a name is read as U+FFFD, three bytes for one: an answer near the
		// size bound may encode beyond it, and that one may be refused.
		if len(encoded) > MaxStatusBytes {
			return
		}
		again, err := ParseStatus(encoded)
		if err != nil {
			t.Fatalf("the encoding of what was parsed is refused: %v\n%s", err, encoded)
		}
		if !reflect.DeepEqual(again, resources) {
			t.Fatalf("parsed again differently:\n first %s\nsecond %s", encoded, mustJSON(t, again))
		}
		// The helpers answer for any accepted input.
		_ = Problems(resources)
		_ = TotalOutOfSyncKiB(resources)
	})
}
