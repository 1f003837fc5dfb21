package drbd

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readSample(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "status", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func kib(n uint64) *uint64 { return &n }

func percent(x float64) *float64 { return &x }

// The real samples (testdata/README.md says where each comes from), read whole: every field
// ParseStatus keeps, and what the helpers conclude from them.
func TestParseStatusReadsRealSamples(t *testing.T) {
	const pvc = "pvc-4f6d0c1e-2b7a-4c3e-9d1a-7e5b8c2f0a11"
	haConnection := Connection{PeerNodeID: 1, Name: "SLE15-sp1-gm-drbd1145296-node1", ConnectionState: "Connected", PeerRole: "Primary",
		PeerDevices: []PeerDevice{{Volume: 0, ReplicationState: "Established", PeerDiskState: "UpToDate"}}}
	cases := []struct {
		sample       string
		want         []Resource
		problems     []string
		outOfSyncKiB uint64
	}{
		{
			sample: "salt-shaptools-connected.json",
			want: []Resource{{
				Name: "beijing", NodeID: 1, Role: "Primary",
				Devices: []Device{{Volume: 0, Minor: 5, DiskState: "UpToDate", Quorum: true, SizeKiB: kib(307152), ReadKiB: kib(0), WrittenKiB: kib(0)}},
				Connections: []Connection{{PeerNodeID: 2, Name: "salt-node3", ConnectionState: "Connected", PeerRole: "Secondary",
					PeerDevices: []PeerDevice{{Volume: 0, ReplicationState: "Established", PeerDiskState: "UpToDate"}}}},
			}},
		},
		{
			sample: "salt-shaptools-syncsource-nan.json",
			want: []Resource{{
				Name: "shanghai", NodeID: 1, Role: "Primary",
				Devices: []Device{{Volume: 0, Minor: 2, DiskState: "UpToDate", Quorum: true, SizeKiB: kib(409600), ReadKiB: kib(0), WrittenKiB: kib(0)}},
				Connections: []Connection{{PeerNodeID: 2, Name: "SLE12-sp4-node2", ConnectionState: "Connected", PeerRole: "Secondary",
					PeerDevices: []PeerDevice{{Volume: 0, ReplicationState: "SyncSource", PeerDiskState: "Inconsistent", OutOfSyncKiB: 409600, ResyncDonePercent: percent(0)}}}},
			}},
			problems: []string{
				"shanghai volume 0: replication with SLE12-sp4-node2 is SyncSource",
				"shanghai volume 0: the disk on SLE12-sp4-node2 is Inconsistent",
			},
			outOfSyncKiB: 409600,
		},
		{
			sample: "ha-cluster-exporter-two-resources.json",
			want: []Resource{
				{
					Name: "1-single-0", NodeID: 2, Role: "Secondary",
					Devices:     []Device{{Volume: 0, Minor: 2, DiskState: "UpToDate", Quorum: true, SizeKiB: kib(409600), ReadKiB: kib(654321), WrittenKiB: kib(123456)}},
					Connections: []Connection{haConnection},
				},
				{
					Name: "1-single-1", NodeID: 2, Role: "Secondary",
					Devices:     []Device{{Volume: 0, Minor: 3, DiskState: "UpToDate", Quorum: false, SizeKiB: kib(10200), ReadKiB: kib(654321), WrittenKiB: kib(123456)}},
					Connections: []Connection{haConnection},
				},
			},
		},
		{
			sample: "adapted-linstor-disconnected-tiebreaker.json",
			want: []Resource{{
				Name: pvc, NodeID: 0, Role: "Primary",
				Devices: []Device{{Volume: 0, Minor: 1000, DiskState: "UpToDate", Quorum: true, SizeKiB: kib(307152), ReadKiB: kib(0), WrittenKiB: kib(0)}},
				Connections: []Connection{
					{PeerNodeID: 1, Name: "node-b", ConnectionState: "Connecting", PeerRole: "Unknown",
						PeerDevices: []PeerDevice{{Volume: 0, ReplicationState: "Off", PeerDiskState: "DUnknown", OutOfSyncKiB: 2048}}},
					{PeerNodeID: 2, Name: "node-c", ConnectionState: "Connected", PeerRole: "Secondary",
						PeerDevices: []PeerDevice{{Volume: 0, ReplicationState: "Established", PeerDiskState: "Diskless", PeerClient: true}}},
				},
			}},
			// The tiebreaker, diskless on purpose, is no problem; the unreachable peer is.
			problems:     []string{pvc + ": the connection to node-b is Connecting"},
			outOfSyncKiB: 2048,
		},
	}
	for _, tc := range cases {
		t.Run(tc.sample, func(t *testing.T) {
			got, err := ParseStatus(readSample(t, tc.sample))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseStatus:\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, tc.want))
			}
			if problems := Problems(got); !reflect.DeepEqual(problems, tc.problems) {
				t.Errorf("Problems = %q, want %q", problems, tc.problems)
			}
			if all := AllConnectedAndUpToDate(got); all != (len(tc.problems) == 0) {
				t.Errorf("AllConnectedAndUpToDate = %v with problems %q", all, tc.problems)
			}
			if total := TotalOutOfSyncKiB(got); total != tc.outOfSyncKiB {
				t.Errorf("TotalOutOfSyncKiB = %d, want %d", total, tc.outOfSyncKiB)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// What newer drbdsetup versions print beyond the fields ParseStatus keeps (the suspension
// reasons, "open", "tls", "paths": user/v9/drbdsetup.c at drbd-utils 009712ee), and anything a
// later one may add, changes nothing.
func TestParseStatusIgnoresFieldsItDoesNotKeep(t *testing.T) {
	sample := readSample(t, "adapted-linstor-disconnected-tiebreaker.json")
	want, err := ParseStatus(sample)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseStatus(editSample(t, sample, func(resources []any) {
		resource := resources[0].(map[string]any)
		resource["suspended-quorum"] = false
		resource["force-io-failures"] = false
		resource["a-field-of-drbd-10"] = map[string]any{"nested": []any{1, "two", nil}}
		resource["devices"].([]any)[0].(map[string]any)["open"] = "unknown"
		connection := resource["connections"].([]any)[1].(map[string]any)
		connection["tls"] = false
		connection["paths"] = []any{map[string]any{"established": true, "this_host": map[string]any{"address": "10.10.0.11", "port": 7000, "family": "ipv4"}}}
		connection["peer_devices"].([]any)[0].(map[string]any)["rs-total"] = 819200
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}
}

// editSample decodes a sample, lets edit change it, and encodes it again.
func editSample(t *testing.T, sample []byte, edit func(resources []any)) []byte {
	t.Helper()
	var resources []any
	if err := json.Unmarshal(nullNonFiniteNumbers(sample), &resources); err != nil {
		t.Fatal(err)
	}
	edit(resources)
	return []byte(mustJSON(t, resources))
}

func TestParseStatusNamesWhatIsWrongAndWhere(t *testing.T) {
	twoResources := readSample(t, "ha-cluster-exporter-two-resources.json")
	field := func(resources []any, path ...any) map[string]any {
		var v any = resources
		for _, step := range path {
			switch s := step.(type) {
			case int:
				v = v.([]any)[s]
			case string:
				v = v.(map[string]any)[s]
			}
		}
		return v.(map[string]any)
	}
	cases := []struct {
		name string
		edit func([]any)
		want string
	}{
		{"a required field missing", func(r []any) {
			delete(field(r, 1, "connections", 0), "connection-state")
		}, "resources[1].connections[0].connection-state: missing"},
		{"a string where a number belongs", func(r []any) {
			field(r, 0, "devices", 0)["minor"] = "2"
		}, "resources[0].devices[0].minor: want a number, got a string"},
		{"null where a string belongs", func(r []any) {
			field(r, 1)["name"] = nil
		}, "resources[1].name: want a string, got null"},
		{"a fraction where an integer belongs", func(r []any) {
			field(r, 0, "connections", 0, "peer_devices", 0)["volume"] = 1.5
		}, "resources[0].connections[0].peer_devices[0].volume: want an integer from 0 to 2147483647, got 1.5"},
		{"a negative count", func(r []any) {
			field(r, 1, "connections", 0, "peer_devices", 0)["out-of-sync"] = -1
		}, "resources[1].connections[0].peer_devices[0].out-of-sync: want a non-negative integer, got -1"},
		{"a node-id below -1", func(r []any) {
			field(r, 0)["node-id"] = -2
		}, "resources[0].node-id: want an integer from -1 to 2147483647, got -2"},
		{"a minor beyond an int32", func(r []any) {
			field(r, 0, "devices", 0)["minor"] = 1 << 40
		}, "resources[0].devices[0].minor: want an integer from 0 to 2147483647, got 1099511627776"},
		{"an optional statistic of the wrong type", func(r []any) {
			field(r, 0, "devices", 0)["size"] = "big"
		}, "resources[0].devices[0].size: want a number, got a string"},
		{"a boolean that is a string", func(r []any) {
			field(r, 1, "devices", 0)["quorum"] = "yes"
		}, "resources[1].devices[0].quorum: want a boolean, got a string"},
		{"peer devices missing", func(r []any) {
			delete(field(r, 0, "connections", 0), "peer_devices")
		}, "resources[0].connections[0].peer_devices: missing"},
		{"devices not an array", func(r []any) {
			field(r, 0)["devices"] = map[string]any{}
		}, "resources[0].devices: want an array, got an object"},
		{"a connection that is not an object", func(r []any) {
			field(r, 1)["connections"] = []any{"node-b"}
		}, "resources[1].connections[0]: want an object, got a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseStatus(editSample(t, twoResources, tc.edit))
			assertStatusError(t, err, tc.want)
		})
	}
}

func assertStatusError(t *testing.T, err error, want string) {
	t.Helper()
	var statusErr *StatusError
	if !errors.As(err, &statusErr) {
		t.Fatalf("err = %v, want a *StatusError", err)
	}
	if got := statusErr.Path + ": " + statusErr.Reason; got != want {
		t.Fatalf("error %q, want %q", got, want)
	}
	if !strings.HasPrefix(err.Error(), "drbdsetup status --json: ") {
		t.Fatalf("error %q does not name the command whose output it is", err)
	}
}

func TestParseStatusRefusesWhatIsNotAStatusAnswer(t *testing.T) {
	oneResource := `{"name":"r0","node-id":0,"role":"Secondary","suspended":false,"devices":[],"connections":[]}`
	tooMany := "[" + strings.Repeat(oneResource+",", MaxStatusResources) + oneResource + "]"
	nanOutOfSync := strings.Replace(oneResource, `"connections":[]`, `"connections":[{"peer-node-id":1,"name":"b",`+
		`"connection-state":"Connected","peer-role":"Secondary","peer_devices":[{"volume":0,"replication-state":"Established",`+
		`"peer-disk-state":"UpToDate","peer-client":false,"out-of-sync":nan}]}]`, 1)
	cases := []struct {
		name  string
		input string
		want  string
	}{
		{"nothing", "", "resources: not valid JSON: unexpected end of JSON input (at byte 0)"},
		{"an error message", "Could not connect to 'drbd' generic netlink family", "resources: not valid JSON: invalid character 'C' looking for beginning of value (at byte 1)"},
		{"a truncated answer", `[{"name":`, "resources: not valid JSON: unexpected end of JSON input (at byte 9)"},
		{"text after the answer", "[] []", "resources: not valid JSON: invalid character '[' after top-level value (at byte 4)"},
		{"an object", `{"name":"r0"}`, "resources: want an array, got an object"},
		{"a resource that is a number", "[1]", "resources[0]: want an object, got a number"},
		{"a nan where a count belongs", "[" + nanOutOfSync + "]", "resources[0].connections[0].peer_devices[0].out-of-sync: want a number, got null"},
		{"too many resources", tooMany, "resources: 1001 resources, more than the 1000 this parser accepts"},
		{"too many bytes", "[" + strings.Repeat(" ", MaxStatusBytes) + "]", "resources: the answer is 8388610 bytes, more than the 8388608 this parser reads"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseStatus([]byte(tc.input))
			assertStatusError(t, err, tc.want)
		})
	}
}

func TestParseStatusOfNoResourcesIsEmpty(t *testing.T) {
	// What drbdsetup prints when no resource is configured.
	got, err := ParseStatus([]byte("[\n]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || len(got) != 0 {
		t.Fatalf("got %#v, want an empty, non-nil list", got)
	}
	if !AllConnectedAndUpToDate(got) || TotalOutOfSyncKiB(got) != 0 {
		t.Fatal("no resources are all replicated, with nothing out of sync")
	}
}

func TestStatisticsAbsentOrNullAreNil(t *testing.T) {
	sample := readSample(t, "salt-shaptools-syncsource-nan.json")
	got, err := ParseStatus(editSample(t, sample, func(resources []any) {
		device := resources[0].(map[string]any)["devices"].([]any)[0].(map[string]any)
		delete(device, "size")
		delete(device, "read")
		device["written"] = nil
		peerDevice := resources[0].(map[string]any)["connections"].([]any)[0].(map[string]any)["peer_devices"].([]any)[0].(map[string]any)
		peerDevice["percent-resync-done"] = nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	device := got[0].Devices[0]
	if device.SizeKiB != nil || device.ReadKiB != nil || device.WrittenKiB != nil {
		t.Errorf("device statistics %v %v %v, want all nil", device.SizeKiB, device.ReadKiB, device.WrittenKiB)
	}
	if done := got[0].Connections[0].PeerDevices[0].ResyncDonePercent; done != nil {
		t.Errorf("ResyncDonePercent = %v, want nil", *done)
	}
}

func TestNullNonFiniteNumbers(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"eta": nan, "x": 1}`, `{"eta": null, "x": 1}`},
		{`[nan,-nan,inf,-inf]`, `[null,null,null,null]`},
		{`{"a":-nan}`, `{"a":null}`},
		{`{"name": "nan", "peer": "inf-1", "s": "a \" nan"}`, `{"name": "nan", "peer": "inf-1", "s": "a \" nan"}`},
		{`{"x": null, "y": nanny, "z": infinity}`, `{"x": null, "y": nanny, "z": infinity}`},
		{`nan`, `null`},
		{`"\\" nan`, `"\\" null`},
	}
	for _, tc := range cases {
		if got := string(nullNonFiniteNumbers([]byte(tc.in))); got != tc.want {
			t.Errorf("nullNonFiniteNumbers(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
