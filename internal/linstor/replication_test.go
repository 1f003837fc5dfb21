package linstor_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

func pct(v float64) *float64 { return &v }

// The cases are shaped by LINSTOR's OpenAPI document (VolumeState.replication_states,
// ReplicationStates, ReplicationState); the document has no example of them. Every case the
// document accepts is checked against it, so the table cannot drift from the document either.
func TestDecodeReplicationStates(t *testing.T) {
	cases := []struct {
		name    string
		json    string
		want    map[string]linstor.ReplicationState
		docOK   bool   // the document's schema accepts it
		refused string // the path DecodeReplicationStates names, when it refuses
	}{
		{name: "absent", json: ``, want: map[string]linstor.ReplicationState{}},
		{name: "null", json: `null`, want: map[string]linstor.ReplicationState{}},
		{name: "no peer", json: `{}`, want: map[string]linstor.ReplicationState{}, docOK: true},
		{name: "a target mid-sync", json: `{"n1":{"replication_state":"SyncTarget","done_percentage":42.5}}`, docOK: true,
			want: map[string]linstor.ReplicationState{"n1": {State: "SyncTarget", DonePercent: pct(42.5)}}},
		{name: "a source and an established peer", json: `{"n2":{"replication_state":"SyncSource","done_percentage":0},"n3":{"replication_state":"Established"}}`, docOK: true,
			want: map[string]linstor.ReplicationState{"n2": {State: "SyncSource", DonePercent: pct(0)}, "n3": {State: "Established"}}},
		{name: "done", json: `{"n1":{"replication_state":"Established","done_percentage":100}}`, docOK: true,
			want: map[string]linstor.ReplicationState{"n1": {State: "Established", DonePercent: pct(100)}}},
		{name: "an integer percentage", json: `{"n1":{"replication_state":"PausedSyncT","done_percentage":7}}`, docOK: true,
			want: map[string]linstor.ReplicationState{"n1": {State: "PausedSyncT", DonePercent: pct(7)}}},
		{name: "an empty state", json: `{"n1":{}}`, docOK: true, want: map[string]linstor.ReplicationState{"n1": {}}},
		{name: "a null percentage", json: `{"n1":{"replication_state":"Off","done_percentage":null}}`,
			want: map[string]linstor.ReplicationState{"n1": {State: "Off"}}},
		{name: "a field from a later API", json: `{"n1":{"replication_state":"Established","peer_disk_state":"UpToDate"}}`, docOK: true,
			want: map[string]linstor.ReplicationState{"n1": {State: "Established"}}},

		{name: "a list", json: `[{"replication_state":"Established"}]`, refused: "replication_states"},
		{name: "a state as a number", json: `{"n1":{"replication_state":3}}`, refused: `replication_states["n1"].replication_state`},
		{name: "a percentage as a string", json: `{"n1":{"done_percentage":"42"}}`, refused: `replication_states["n1"].done_percentage`},
		{name: "a peer as a string", json: `{"n1":"SyncTarget"}`, refused: `replication_states["n1"]`},
		{name: "above 100", json: `{"n1":{"done_percentage":100.5}}`, docOK: true, refused: `replication_states["n1"].done_percentage`},
		{name: "below 0", json: `{"n1":{"done_percentage":-1}}`, docOK: true, refused: `replication_states["n1"].done_percentage`},
		{name: "an empty peer name", json: `{"":{"replication_state":"Established"}}`, docOK: true, refused: `replication_states[""]`},
		{name: "a peer twice", json: `{"n1":{},"n1":{"replication_state":"Off"}}`, docOK: true, refused: "replication_states"},
		{name: "not JSON", json: `{"n1":`, refused: "replication_states"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.json != "" {
				if err := linstorsim.ValidateJSON("ReplicationStates", []byte(c.json)); (err == nil) != c.docOK && json.Valid([]byte(c.json)) {
					t.Fatalf("the document's schema: %v, want accepted %v", err, c.docOK)
				}
			}
			got, err := linstor.DecodeReplicationStates(json.RawMessage(c.json))
			if c.refused != "" {
				var re *linstor.ReplicationError
				if !errors.As(err, &re) || re.Path != c.refused || re.Reason == "" {
					t.Fatalf("got %+v, %v; want a refusal at %s", got, err, c.refused)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// A refusal reads as the value's path and what is wrong with it. (The document bounds no
// done_percentage: a controller could send 1000 and still match it.)
func TestAReplicationErrorNamesTheValue(t *testing.T) {
	_, err := linstor.DecodeReplicationStates(json.RawMessage(`{"n2":{"replication_state":"SyncTarget","done_percentage":1e3}}`))
	if err == nil || !strings.Contains(err.Error(), `replication_states["n2"].done_percentage: 1000 is outside 0 to 100`) {
		t.Fatalf("got %v", err)
	}
}

// FuzzDecodeReplicationStates: no input panics the decoder; every refusal names a path and a
// reason; whatever it accepts has peers with names, percentages within 0 to 100, and encodes
// back into JSON it decodes the same.
func FuzzDecodeReplicationStates(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `"x"`, `1`,
		`{"n1":{"replication_state":"SyncTarget","done_percentage":42.5}}`,
		`{"n2":{"replication_state":"SyncSource","done_percentage":0},"n3":{"replication_state":"Established"}}`,
		`{"n1":{"replication_state":"Off","done_percentage":null}}`,
		`{"n1":{},"n1":{}}`, `{"":{}}`, `{"n1":{"done_percentage":1e400}}`, `{"n1":{"done_percentage":-0}}`,
		`{"n1":{"replication_state":"\u0000"}}`, `{"n1":{}} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := linstor.DecodeReplicationStates(data)
		if err != nil {
			var re *linstor.ReplicationError
			if !errors.As(err, &re) || re.Path == "" || re.Reason == "" {
				t.Fatalf("refusal %v is not a *ReplicationError with a path and a reason", err)
			}
			return
		}
		for peer, rs := range got {
			if peer == "" {
				t.Fatal("accepted an empty peer name")
			}
			if p := rs.DonePercent; p != nil && (math.IsNaN(*p) || *p < 0 || *p > 100) {
				t.Fatalf("accepted done_percentage %v", *p)
			}
		}
		encoded, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("encoding what was decoded: %v", err)
		}
		again, err := linstor.DecodeReplicationStates(encoded)
		if err != nil {
			t.Fatalf("the encoding of what was decoded is refused: %v\n%s", err, encoded)
		}
		if !reflect.DeepEqual(again, got) {
			t.Fatalf("decoded again differently:\n%s", encoded)
		}
	})
}
