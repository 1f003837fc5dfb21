package drbd

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readEvents(t *testing.T, name string) (*Events2, []Effect) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "events2", name))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	s := &Events2{}
	var effects []Effect
	if err := s.Read(f, func(e Effect) { effects = append(effects, e) }); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s, effects
}

func significant(effects []Effect) int {
	n := 0
	for _, e := range effects {
		if e.Significant {
			n++
		}
	}
	return n
}

// Every sample of drbd-utils' own tests reads without error into the state it ends in.
func TestEvents2ReadsDrbdUtilsSamples(t *testing.T) {
	type want struct {
		resources int
		// check, when set, looks at the state the sample ends in.
		check func(t *testing.T, rs []Resource)
		// significant is how many lines changed something a report shows (the dump's end
		// counts once).
		significant int
	}
	oneResource := func(role, disk, conn, repl, peerDisk string) func(*testing.T, []Resource) {
		return func(t *testing.T, rs []Resource) {
			r := rs[0]
			if r.Name != "some-resource" || r.Role != role || r.NodeID != -1 || r.Suspended {
				t.Errorf("resource %+v", r)
			}
			if disk != "" && (len(r.Devices) != 1 || r.Devices[0].DiskState != disk || r.Devices[0].Minor != 1000 || !r.Devices[0].Quorum) {
				t.Errorf("devices %+v; want one, %s", r.Devices, disk)
			}
			if conn == "" {
				return
			}
			if len(r.Connections) != 1 || r.Connections[0].Name != "some-peer" || r.Connections[0].PeerNodeID != 1 || r.Connections[0].ConnectionState != conn {
				t.Fatalf("connections %+v; want some-peer %s", r.Connections, conn)
			}
			if pd := r.Connections[0].PeerDevices; len(pd) != 1 || pd[0].ReplicationState != repl || pd[0].PeerDiskState != peerDisk {
				t.Errorf("peer devices %+v; want %s %s", pd, repl, peerDisk)
			}
		}
	}
	for name, w := range map[string]want{
		"events2-all-create-change.txt": {1, oneResource("Primary", "UpToDate", "Connected", "Established", "UpToDate"), 9},
		"events2-all-create-change-statistics.txt": {1, func(t *testing.T, rs []Resource) {
			oneResource("Primary", "UpToDate", "Connected", "Established", "UpToDate")(t, rs)
			d := rs[0].Devices[0]
			if d.SizeKiB == nil || *d.SizeKiB != 5 || d.ReadKiB == nil || *d.ReadKiB != 10 || d.WrittenKiB == nil || *d.WrittenKiB != 15 {
				t.Errorf("device statistics %+v", d)
			}
		}, 9},
		"events2-all-create-destroy.txt":    {0, nil, 9},
		"events2-all-create-helper.txt":     {1, oneResource("Secondary", "Diskless", "StandAlone", "Off", "DUnknown"), 5},
		"events2-change-before-exists.txt":  {1, oneResource("Primary", "UpToDate", "", "", ""), 5},
		"events2-create-before-exists.txt":  {1, oneResource("Secondary", "Diskless", "", "", ""), 3},
		"events2-destroy-before-exists.txt": {0, nil, 1},
		"events2-device-create-destroy.txt": {0, nil, 19},
		"events2-exists-before-create.txt":  {1, nil, 3},
		"events2-may-promote-peer-data.txt": {1, nil, -1},
		"events2-may-promote-peer-role.txt": {1, nil, -1},
		"events2-may-promote-quorum.txt": {1, func(t *testing.T, rs []Resource) {
			if d := rs[0].Devices[0]; d.Quorum || d.DiskState != "UpToDate" {
				t.Errorf("device %+v; want UpToDate without quorum", d)
			}
		}, 5},
		"events2-no-resources.txt":                 {0, nil, 1},
		"events2-promotion-score-devices.txt":      {1, nil, -1},
		"events2-promotion-score-inconsistent.txt": {1, nil, -1},
		"events2-resource-create-destroy.txt":      {0, nil, 3},
		"events2-sync.txt": {1, func(t *testing.T, rs []Resource) {
			oneResource("Secondary", "UpToDate", "Connected", "SyncSource", "Inconsistent")(t, rs)
			if p := rs[0].Connections[0].PeerDevices[0]; p.ResyncDonePercent == nil || *p.ResyncDonePercent != 37.5 {
				t.Errorf("done %v; want 37.50", p.ResyncDonePercent)
			}
		}, 8},
		"events2-sync-statistics.txt": {1, func(t *testing.T, rs []Resource) {
			if p := rs[0].Connections[0].PeerDevices[0]; p.OutOfSyncKiB != 2500 || p.ResyncDonePercent == nil || *p.ResyncDonePercent != 37.5 {
				t.Errorf("peer device %+v; want 2500 KiB out of sync, 37.50 done", p)
			}
		}, 8},
	} {
		t.Run(name, func(t *testing.T) {
			s, effects := readEvents(t, name)
			rs := s.Resources()
			if len(rs) != w.resources {
				t.Fatalf("%d resources; want %d: %+v", len(rs), w.resources, rs)
			}
			if name != "events2-resource-exists.txt" && !s.Dumped() {
				t.Error("the dump's end was not seen")
			}
			if w.check != nil {
				w.check(t, rs)
			}
			if w.significant >= 0 && significant(effects) != w.significant {
				t.Errorf("%d significant lines; want %d", significant(effects), w.significant)
			}
		})
	}
	samples, _ := filepath.Glob(filepath.Join("testdata", "events2", "*.txt"))
	if len(samples) < 19 {
		t.Errorf("%d samples; the table expects every one of drbd-utils' tests", len(samples))
	}
}

// comparable drops what events2 does not print, the node-id of this node and the device's
// statistics without --verbose, from resources ParseStatus read.
func comparable(rs []Resource) []Resource {
	for i := range rs {
		rs[i].NodeID = -1
		for j := range rs[i].Devices {
			rs[i].Devices[j].SizeKiB = nil
		}
	}
	return rs
}

// The dump of a state reads as the same resources as `drbdsetup status --json` of that state.
func TestEvents2DumpIsTheStatusParseStatusReads(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "status", "adapted-linstor-disconnected-tiebreaker.json"))
	if err != nil {
		t.Fatal(err)
	}
	fromStatus, err := ParseStatus(raw)
	if err != nil {
		t.Fatal(err)
	}
	s, effects := readEvents(t, "adapted-linstor-disconnected-tiebreaker.txt")
	if got, want := s.Resources(), comparable(fromStatus); !reflect.DeepEqual(got, want) {
		t.Fatalf("events2 gives\n%s\nstatus --json gives\n%s", mustJSON(t, got), mustJSON(t, want))
	}
	if last := effects[len(effects)-1]; !last.DumpDone || !s.Dumped() {
		t.Error("exists - did not end the dump")
	}
}

// Each change a report shows is significant, statistics alone are not, and the pause flag is
// kept though ParseStatus's Resource has no field for it.
func TestEvents2FollowsReconnectResyncPauseAndVerify(t *testing.T) {
	const res = "pvc-4f6d0c1e-2b7a-4c3e-9d1a-7e5b8c2f0a11"
	s, effects := readEvents(t, "adapted-linstor-disconnected-tiebreaker.txt")
	base := len(effects)
	f, err := os.ReadFile(filepath.Join("testdata", "events2", "adapted-linstor-reconnect-resync-verify.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(f)), "\n")[base:]
	type step struct {
		significant bool
		repl        string
		oos         uint64
		done        float64 // -1: none
		paused      string
	}
	for i, want := range []step{
		{false, "Off", 2048, -1, "no"},         // path established
		{true, "Off", 2048, -1, "no"},          // Connected
		{true, "SyncSource", 2048, 0, "no"},    // resync starts
		{true, "PausedSyncS", 2048, 0, "user"}, // paused
		{true, "SyncSource", 1024, 50, "no"},   // resumed
		{true, "Established", 0, -1, "no"},     // resync ends
		{true, "VerifyS", 0, 0, "no"},          // verify starts
		{true, "Established", 64, -1, "no"},    // verify ends
	} {
		e, err := s.Apply(lines[i])
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		p := s.Resources()[0].Connections[0].PeerDevices[0]
		done := -1.0
		if p.ResyncDonePercent != nil {
			done = *p.ResyncDonePercent
		}
		if e.Significant != want.significant || p.ReplicationState != want.repl || p.OutOfSyncKiB != want.oos || done != want.done ||
			s.ResyncSuspended(res, "node-b", 0) != want.paused {
			t.Errorf("after %q: significant %v, %s, %d KiB, done %v, paused %q; want %+v", lines[i], e.Significant, p.ReplicationState,
				p.OutOfSyncKiB, done, s.ResyncSuspended(res, "node-b", 0), want)
		}
	}
	// A statistics-only line is not significant.
	e, err := s.Apply("change peer-device name:" + res + " peer-node-id:1 conn-name:node-b volume:0 received:10 sent:4096 out-of-sync:128")
	if err != nil || e.Significant {
		t.Errorf("statistics only: %+v, %v; want not significant", e, err)
	}
	if got := TotalOutOfSyncKiB(s.Resources()); got != 128 {
		t.Errorf("out of sync %d KiB; want 128", got)
	}
}

// Bad lines are refused with the field and the reason; the state is not changed by them.
func TestEvents2RefusesBadLines(t *testing.T) {
	const dump = "exists resource name:r0 role:Secondary suspended:no\n" +
		"exists connection name:r0 peer-node-id:1 conn-name:peer connection:Connected role:Secondary\n" +
		"exists device name:r0 volume:0 minor:1000 disk:UpToDate client:no quorum:yes\n" +
		"exists peer-device name:r0 peer-node-id:1 conn-name:peer volume:0 replication:Established peer-disk:UpToDate peer-client:no resync-suspended:no\n" +
		"exists -\n"
	for _, tc := range []struct{ line, field, reason string }{
		{"nonsense", "object", "missing"},
		{"exists", "object", "missing"},
		{"explode resource name:r0", "action", "not one of"},
		{"exists - extra:1", "object", "whole line"},
		{"change -", "object", "whole line"},
		{"change resource name:r0 role", "role", "not key:value"},
		{"change resource name:r0 role:", "role", "empty value"},
		{"change resource name:r0 :Primary", ":Primary", "not key:value"},
		{"change resource name:r0 role:Primary role:Secondary", "role", "given twice"},
		{"change resource name:r0  role:Primary", "line", "empty field"},
		{"change resource name:r0 role:Primary ", "line", "empty field"},
		{"change resource role:Primary", "name", "missing"},
		{"change resource name:r1 role:Primary", "name", "did not announce"},
		{"create resource name:r0 role:Primary", "name", "already announced"},
		{"change device name:r0 volume:1 disk:Failed", "volume", "did not announce"},
		{"change device name:r0 volume:-1 disk:Failed", "volume", "integer from 0 to 65535"},
		{"change device name:r0 volume:65536 disk:Failed", "volume", "integer from 0 to 65535"},
		{"change device name:r0 volume:0 minor:x", "minor", "integer"},
		{"change device name:r0 volume:0 quorum:maybe", "quorum", "yes or no"},
		{"change device name:r0 volume:0 read:-5", "read", "non-negative"},
		{"change connection name:r0 peer-node-id:1 connection:Connecting", "conn-name", "missing"},
		{"change connection name:r0 peer-node-id:99 conn-name:peer connection:Connecting", "peer-node-id", "integer from 0 to 31"},
		{"change connection name:r0 peer-node-id:1 conn-name:other connection:Connecting", "conn-name", "did not announce"},
		{"change peer-device name:r0 peer-node-id:1 conn-name:peer volume:0 out-of-sync:18446744073709551616", "out-of-sync", "non-negative"},
		{"change peer-device name:r0 peer-node-id:1 conn-name:peer volume:0 done:nan", "done", "finite"},
		{"change peer-device name:r0 peer-node-id:1 conn-name:peer volume:0 done:1e999", "done", "finite"},
		{"change peer-device name:r0 peer-node-id:1 conn-name:peer volume:0 peer-client:1", "peer-client", "yes or no"},
		{"change peer-device name:r0 peer-node-id:1 conn-name:peer volume:7 replication:Off", "volume", "did not announce"},
		{"rename device name:r0 volume:0", "action", "rename of a device"},
		{"rename resource name:r0", "new_name", "missing"},
		{"change resource name:r0 role:\x1b[1;36mPrimary\x1b[0m", "line", "control character"},
		{"change resource name:r0 role:\xff", "line", "UTF-8"},
		{"change resource name:r0 " + strings.Repeat("k:v ", 70) + "x:y", "line", "fields"},
		{"change resource name:r0 role:" + strings.Repeat("P", MaxEventLineBytes), "line", "more than the 4096"},
	} {
		s := &Events2{}
		if err := s.Read(strings.NewReader(dump), nil); err != nil {
			t.Fatal(err)
		}
		before := s.Resources()
		_, err := s.Apply(tc.line)
		var evErr *EventError
		if !errors.As(err, &evErr) || evErr.Field != tc.field || !strings.Contains(evErr.Reason, tc.reason) || evErr.Line != 6 {
			t.Errorf("%.60q: %v; want line 6, field %q, a reason saying %q", tc.line, err, tc.field, tc.reason)
			continue
		}
		if after := s.Resources(); !reflect.DeepEqual(before, after) {
			t.Errorf("%.60q changed the state though refused", tc.line)
		}
	}
}

// Read refuses a line longer than the bound without reading it whole, and stops there.
func TestEvents2ReadBoundsTheLine(t *testing.T) {
	s := &Events2{}
	input := "exists -\n" + strings.Repeat("x", 10*MaxEventLineBytes) + "\nexists -\n"
	err := s.Read(strings.NewReader(input), nil)
	var evErr *EventError
	if !errors.As(err, &evErr) || evErr.Line != 2 || evErr.Field != "line" || !strings.Contains(evErr.Reason, "longer than") {
		t.Fatalf("%v; want line 2 refused as too long", err)
	}
}

// The counts are bounded: no more resources than ParseStatus accepts, nor connections than
// DRBD has.
func TestEvents2BoundsTheCounts(t *testing.T) {
	s := &Events2{}
	var b strings.Builder
	for i := 0; i <= MaxStatusResources; i++ {
		b.WriteString("create resource name:r" + itoa(i) + " role:Secondary\n")
	}
	err := s.Read(strings.NewReader(b.String()), nil)
	var evErr *EventError
	if !errors.As(err, &evErr) || !strings.Contains(evErr.Reason, "more than the 1000") || len(s.Resources()) != MaxStatusResources {
		t.Fatalf("%v with %d resources; want the 1001st refused", err, len(s.Resources()))
	}
	s = &Events2{}
	b.Reset()
	b.WriteString("create resource name:r role:Secondary\n")
	for i := 0; i <= MaxEventConnections; i++ {
		b.WriteString("create connection name:r peer-node-id:1 conn-name:p" + itoa(i) + " connection:Connecting role:Unknown\n")
	}
	if err := s.Read(strings.NewReader(b.String()), nil); !errors.As(err, &evErr) || evErr.Field != "conn-name" || !strings.Contains(evErr.Reason, "more than the 31") {
		t.Fatalf("%v; want the 32nd connection refused", err)
	}
	// Devices, connections and peer devices, all resources together.
	s = &Events2{}
	b.Reset()
	for i := 0; i < MaxStatusResources; i++ {
		r := "r" + itoa(i)
		b.WriteString("create resource name:" + r + " role:Secondary\n")
		for v := 0; v < 30; v++ {
			b.WriteString("create device name:" + r + " volume:" + itoa(v) + " minor:" + itoa(v) + " disk:UpToDate client:no quorum:yes\n")
		}
	}
	err = s.Read(strings.NewReader(b.String()), nil)
	if !errors.As(err, &evErr) || !strings.Contains(evErr.Reason, "more than the 20000") || s.objects != MaxEventObjects {
		t.Fatalf("%v with %d objects; want the 20001st refused", err, s.objects)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// A device line that names no quorum (a DRBD without quorum support) counts as having it; a
// later quorum:no takes it away, and quorum:yes gives it back.
func TestEvents2QuorumIsHeldUntilALineSaysNo(t *testing.T) {
	s := &Events2{}
	for _, line := range []string{
		"exists resource name:r0 role:Secondary suspended:no",
		"exists device name:r0 volume:0 minor:1000 disk:UpToDate client:no",
	} {
		if _, err := s.Apply(line); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	quorum := func() bool { return s.Resources()[0].Devices[0].Quorum }
	if !quorum() {
		t.Fatal("a device whose line names no quorum has lost it")
	}
	for _, step := range []struct {
		line string
		want bool
	}{{"change device name:r0 volume:0 quorum:no", false}, {"change device name:r0 volume:0 disk:UpToDate", false}, {"change device name:r0 volume:0 quorum:yes", true}} {
		if _, err := s.Apply(step.line); err != nil {
			t.Fatalf("%s: %v", step.line, err)
		}
		if quorum() != step.want {
			t.Errorf("after %q quorum %t, want %t", step.line, quorum(), step.want)
		}
	}
}
