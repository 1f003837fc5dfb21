package drbdplay

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// followed reads a played events2 stream into drbd.Events2 in the background.
type followed struct {
	mu    sync.Mutex
	state drbd.Events2
	lines []string
	err   error
	done  bool
}

func follow(t *testing.T, k *Kernel, argv ...string) *followed {
	t.Helper()
	s, err := k.Stream(context.Background(), append([]string{"drbdsetup", "events2"}, argv...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	f := &followed{}
	pr, pw := io.Pipe()
	go func() {
		// Keep the lines too, to check the format line by line.
		_, err := io.Copy(io.MultiWriter(pw, writerFunc(func(p []byte) {
			f.mu.Lock()
			f.lines = append(f.lines, strings.Split(strings.TrimSuffix(string(p), "\n"), "\n")...)
			f.mu.Unlock()
		})), s)
		_ = pw.CloseWithError(err)
	}()
	go func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.err = f.state.Read(lockedReader{pr, &f.mu}, nil)
		f.done = true
	}()
	return f
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }

// lockedReader holds mu while Events2 applies what it read: the test looks at the state
// between reads.
type lockedReader struct {
	r  io.Reader
	mu *sync.Mutex
}

func (l lockedReader) Read(p []byte) (int, error) {
	l.mu.Unlock()
	defer l.mu.Lock()
	return l.r.Read(p)
}

func (f *followed) resources() ([]drbd.Resource, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.Resources(), f.state.Dumped(), f.err
}

// status is what `drbdsetup status --json` says now, as the stream's parser keeps it.
func status(t *testing.T, k *Kernel) []drbd.Resource {
	t.Helper()
	k.mu.Lock()
	var out []drbd.Resource
	for _, name := range sortedNames(k) {
		r, _ := k.resourceState(name, k.resources[name], false)
		r.NodeID = -1
		out = append(out, r)
	}
	k.mu.Unlock()
	if out == nil {
		out = []drbd.Resource{}
	}
	return out
}

func sortedNames(k *Kernel) []string {
	var names []string
	for n := range k.resources {
		names = append(names, n)
	}
	for i := range names {
		for j := i + 1; j < len(names); j++ {
			if names[j] < names[i] {
				names[i], names[j] = names[j], names[i]
			}
		}
	}
	return names
}

// TestTheKernelStreamsEvents2: the played kernel answers drbdsetup events2 --statistics with the
// dump of its state, "exists -", then each change: a connection lost (the fault hook), a pause
// flag, a verification and its end, a resource placed and removed; and the state the stream
// gives is, at each step, the one drbdsetup status gives.
func TestTheKernelStreamsEvents2(t *testing.T) {
	dir := t.TempDir()
	k := &Kernel{Self: "edge-1", FaultDir: dir, VerifySteps: 2}
	k.AddResource("pvc-a", "edge-2", "edge-3")
	f := follow(t, k, "--statistics")
	same := func(what string) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, func() string {
			got, dumped, err := f.resources()
			if err != nil {
				return "the stream failed: " + err.Error()
			}
			// The device's counters are statistics the played status leaves out.
			for i := range got {
				for j := range got[i].Devices {
					got[i].Devices[j].ReadKiB, got[i].Devices[j].WrittenKiB = nil, nil
				}
			}
			if want := status(t, k); !dumped || !reflect.DeepEqual(got, want) {
				return what + ": the stream says " + mustJSON(got) + "; status says " + mustJSON(want)
			}
			return ""
		})
	}
	same("the dump")

	must(t, os.WriteFile(filepath.Join(dir, StandAloneFile), []byte("edge-2\n"), 0o644))
	same("edge-2 StandAlone")
	must(t, os.Remove(filepath.Join(dir, StandAloneFile)))
	same("edge-2 back")

	k.setPaused("pvc-a", "edge-3", true)
	k.wake()
	testenv.Eventually(t, 2*time.Minute, func() string {
		f.mu.Lock()
		defer f.mu.Unlock()
		if got := f.state.ResyncSuspended("pvc-a", "edge-3", 0); got != "user" {
			return "the pause flag towards edge-3 is " + got
		}
		return ""
	})

	k.Mismatch("pvc-a", 64)
	k.startVerify("pvc-a")
	k.wake()
	same("verifying")
	for i := 0; i < 2; i++ {
		if _, err := k.statusAll(); err != nil {
			t.Fatal(err)
		}
		k.wake()
	}
	same("the verification's end")
	if got, _, _ := f.resources(); drbd.TotalOutOfSyncKiB(got) != 128 {
		t.Errorf("out of sync after the verification: %d KiB; want 64 towards each of two peers", drbd.TotalOutOfSyncKiB(got))
	}

	k.AddResource("pvc-b", "edge-2")
	same("pvc-b placed")

	f.mu.Lock()
	lines := append([]string(nil), f.lines...)
	f.mu.Unlock()
	for _, want := range []string{
		"exists resource name:pvc-a role:Secondary suspended:no force-io-failures:no write-ordering:flush may_promote:no promotion_score:0",
		"exists connection name:pvc-a peer-node-id:1 conn-name:edge-2 connection:Connected role:Secondary congested:no ap-in-flight:0 rs-in-flight:0",
		"exists device name:pvc-a volume:0 minor:1000 backing_dev:/dev/null disk:UpToDate client:no quorum:yes read:0 written:0",
		"exists peer-device name:pvc-a peer-node-id:1 conn-name:edge-2 volume:0 replication:Established peer-disk:UpToDate peer-client:no resync-suspended:no received:0 sent:0",
		"exists -",
		"change connection name:pvc-a peer-node-id:1 conn-name:edge-2 connection:StandAlone role:Unknown",
		"change peer-device name:pvc-a peer-node-id:1 conn-name:edge-2 volume:0 replication:Off peer-disk:DUnknown peer-client:no",
		"change peer-device name:pvc-a peer-node-id:2 conn-name:edge-3 volume:0 resync-suspended:user",
		"change peer-device name:pvc-a peer-node-id:1 conn-name:edge-2 volume:0 replication:VerifyS done:0.00 received:0 sent:0",
		"change peer-device name:pvc-a peer-node-id:1 conn-name:edge-2 volume:0 replication:Established received:0 sent:0 out-of-sync:64",
		"create resource name:pvc-b role:Secondary suspended:no force-io-failures:no write-ordering:flush may_promote:no promotion_score:0",
	} {
		if !contains(lines, want) {
			t.Errorf("the stream has no line %q:\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

func mustJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(raw)
}

func contains(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// With --now the stream is the dump alone, as drbdsetup's --now ("Terminate after reporting
// the current state").
func TestTheKernelStreamsTheDumpAloneWithNow(t *testing.T) {
	k := &Kernel{Self: "edge-1"}
	k.AddResource("pvc-a", "edge-2")
	s, err := k.Stream(context.Background(), []string{"drbdsetup", "events2", "--now", "--statistics"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	out, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	var state drbd.Events2
	if err := state.Read(strings.NewReader(string(out)), nil); err != nil || !state.Dumped() || len(state.Resources()) != 1 {
		t.Fatalf("%v; read %d resources from\n%s", err, len(state.Resources()), out)
	}
	if _, err := k.Stream(context.Background(), []string{"drbdsetup", "events2", "--color"}); err == nil {
		t.Error("the played events2 took --color")
	}
}
