package drbd

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
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

// FuzzEvents2: no input makes Events2 panic or hang; every refusal of a line is an
// *EventError naming a line, a field and a reason; whatever it accepts stays within the bounds
// and reads as resources the agent can report.
func FuzzEvents2(f *testing.F) {
	samples, err := filepath.Glob(filepath.Join("testdata", "events2", "*.txt"))
	if err != nil || len(samples) == 0 {
		f.Fatalf("no samples in testdata/events2 (%v)", err)
	}
	for _, sample := range samples {
		data, err := os.ReadFile(sample)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{"", "\n", "exists -", "exists -\nexists -\n", "change resource name:x role:Primary\n",
		"create resource name:r\ncreate connection name:r peer-node-id:1 conn-name:p\ncreate peer-device name:r peer-node-id:1 conn-name:p volume:0 done:1e3\n",
		"create resource name:r\nrename resource name:r new_name:r\n", "destroy resource name:r\n", "call helper name:r helper:x status:1\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &Events2{}
		lines := 0
		err := s.Read(bytes.NewReader(data), func(Effect) { lines++ })
		if err != nil {
			var evErr *EventError
			if !errors.As(err, &evErr) || evErr.Line <= 0 || evErr.Field == "" || evErr.Reason == "" {
				t.Fatalf("refusal %v is not an *EventError with a line, a field and a reason", err)
			}
		}
		resources := s.Resources()
		if len(resources) > MaxStatusResources {
			t.Fatalf("kept %d resources, more than %d", len(resources), MaxStatusResources)
		}
		objects := 0
		for _, r := range resources {
			objects += len(r.Devices) + len(r.Connections)
			if len(r.Connections) > MaxEventConnections || len(r.Devices) > MaxEventVolumes {
				t.Fatalf("resource %q: %d connections, %d devices", r.Name, len(r.Connections), len(r.Devices))
			}
			for _, c := range r.Connections {
				objects += len(c.PeerDevices)
				for _, p := range c.PeerDevices {
					if p.ResyncDonePercent != nil && (math.IsNaN(*p.ResyncDonePercent) || math.IsInf(*p.ResyncDonePercent, 0)) {
						t.Fatalf("done %v kept", *p.ResyncDonePercent)
					}
				}
			}
		}
		if objects > MaxEventObjects || objects != s.objects {
			t.Fatalf("%d objects kept, counted %d (bound %d)", objects, s.objects, MaxEventObjects)
		}
		// The resources encode as ParseStatus reads them, and the helpers answer.
		if encoded, err := json.Marshal(resources); err != nil {
			t.Fatal(err)
		} else if _, err := ParseStatus(encoded); err != nil && len(encoded) <= MaxStatusBytes {
			t.Fatalf("the state read encodes as a status ParseStatus refuses: %v", err)
		}
		_ = Problems(resources)
		_ = TotalOutOfSyncKiB(resources)
	})
}
