package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
)

// streams is a Streamer over the played kernel that fails the first failFirst starts and lets
// the test end the stream running (the death of drbdsetup events2).
type streams struct {
	kernel    *drbdplay.Kernel
	mu        sync.Mutex
	failFirst int
	calls     int
	current   io.Closer
}

func (s *streams) Stream(ctx context.Context, argv []string) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls <= s.failFirst {
		return nil, &drbd.CommandError{Argv: argv, ExitCode: 20, Err: errors.New("exit status 20")}
	}
	rc, err := s.kernel.Stream(ctx, argv)
	s.current = rc
	return rc, err
}

func (s *streams) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != nil {
		_ = s.current.Close()
	}
}

// peerState is the connection state of peer in the node's reported status.
func peerState(t *testing.T, node, resource, peer string) string {
	t.Helper()
	as := &nwv1.NodewrightAgentStatus{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, as); err != nil || as.Status.Storage == nil {
		return "unreported"
	}
	for _, r := range as.Status.Storage.ResourceStatuses {
		if r.Name != resource {
			continue
		}
		for _, p := range r.Peers {
			if p.Name == peer {
				return p.ConnectionState
			}
		}
	}
	return "absent"
}

// followedNode runs a reporter whose interval is an hour, so that only the events can make it
// report a change within the test, beside the follower of the played kernel's stream.
func followedNode(t *testing.T, node string, s *streams) (*agent.DRBDEvents, string) {
	t.Helper()
	faults := t.TempDir()
	s.kernel.FaultDir = faults
	s.kernel.AddResource("pvc-a", "edge-2", "edge-3")
	proc := loadedDRBD(t)
	r := &agent.Reporter{Client: env.LiteClient(t), Node: node, Interval: time.Hour,
		Observer: &agent.HostObserver{DRBD: s.kernel, ProcDRBD: proc}}
	events := &agent.DRBDEvents{Streamer: s, ProcDRBD: proc, Changed: r.Trigger, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	run(t, r.Run)
	run(t, events.Run)
	return events, faults
}

func waitPeer(t *testing.T, node, peer, want string) {
	t.Helper()
	testenv.Eventually(t, patience, func() string {
		if got := peerState(t, node, "pvc-a", peer); got != want {
			return "the connection to " + peer + " is reported " + got + "; want " + want
		}
		return ""
	})
}

// TestTheAgentReportsADRBDChangeAsItHappens: a connection lost and found again in the played
// kernel is reported from its events2 stream, though the reporter's interval is an hour.
func TestTheAgentReportsADRBDChangeAsItHappens(t *testing.T) {
	const node = "events-edge-1"
	s := &streams{kernel: &drbdplay.Kernel{Self: node}}
	events, faults := followedNode(t, node, s)
	waitPeer(t, node, "edge-2", "Connected")
	// The reporter's own first report can say Connected before the stream dumped the state and
	// asked for its report: a loss made before then would be in the dump, or merged into its
	// report by the debounce, not a report of its own.
	testenv.Eventually(t, patience, func() string {
		if st := events.Stats(); st.Dumped < 1 || st.Reports < 1 {
			return fmt.Sprintf("%+v; want the stream's dump, and its report asked for", st)
		}
		return ""
	})

	writeFile(t, filepath.Join(faults, drbdplay.StandAloneFile), "edge-2\n")
	waitPeer(t, node, "edge-2", "StandAlone")
	if err := os.Remove(filepath.Join(faults, drbdplay.StandAloneFile)); err != nil {
		t.Fatal(err)
	}
	waitPeer(t, node, "edge-2", "Connected")
	// The dump's report was asked for before the loss; the return was reported by another
	// (a slow report of the dump may have shown the loss itself, and the debounce may merge the
	// loss's report with the return's).
	if st := events.Stats(); st.Starts != 1 || st.Dumped != 1 || st.Reports < 2 {
		t.Errorf("%+v; want one stream, its dump, a report for the dump and at least one for the changes", st)
	}
}

// TestTheAgentStartsTheStreamAgain: a stream that cannot start, then one that dies, is started
// again, and the changes after it are still reported as they happen.
func TestTheAgentStartsTheStreamAgain(t *testing.T) {
	const node = "events-edge-2"
	s := &streams{kernel: &drbdplay.Kernel{Self: node}, failFirst: 2}
	events, faults := followedNode(t, node, s)
	waitPeer(t, node, "edge-3", "Connected")
	testenv.Eventually(t, patience, func() string {
		if st := events.Stats(); st.Dumped != 1 || st.Starts != 3 {
			return "not yet following after two failed starts"
		}
		return ""
	})

	s.kill()
	testenv.Eventually(t, patience, func() string {
		if st := events.Stats(); st.Dumped < 2 {
			return "the stream was not started again after it died"
		}
		return ""
	})
	writeFile(t, filepath.Join(faults, drbdplay.StandAloneFile), "edge-3\n")
	waitPeer(t, node, "edge-3", "StandAlone")
}

// TestTheAgentBoundsItsReports: a stream that announces a significant change every
// millisecond asks for no more reports than one per MinGap, though each change alone would
// ask for one within MaxDelay.
func TestTheAgentBoundsItsReports(t *testing.T) {
	var mu sync.Mutex
	reports := 0
	const changes, minGap = 300, 50 * time.Millisecond
	events := &agent.DRBDEvents{Streamer: dripping{changes}, ProcDRBD: loadedDRBD(t), Quiet: 2 * time.Millisecond, MaxDelay: 5 * time.Millisecond,
		MinGap: minGap, Backoff: time.Hour, Changed: func() { mu.Lock(); reports++; mu.Unlock() }}
	start := time.Now()
	stop := run(t, events.Run)
	testenv.Eventually(t, patience, func() string {
		if st := events.Stats(); st.Starts != 1 || st.Dumped != 1 {
			return "the stream has not started"
		}
		mu.Lock()
		defer mu.Unlock()
		if reports < 2 {
			return "fewer than two reports asked for"
		}
		return ""
	})
	// The stream ends after its changes; Run then waits its hour of backoff.
	testenv.Eventually(t, patience, func() string {
		if time.Since(start) < changes*time.Millisecond {
			return "the stream is still dripping"
		}
		return ""
	})
	stop()
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if most := 2 + int(elapsed/minGap); reports > most {
		t.Errorf("%d reports in %s; want at most %d, one per %s", reports, elapsed, most, minGap)
	}
}

// dripping streams a resource's dump, then n changes of its role, one a millisecond, then ends.
type dripping struct{ n int }

func (d dripping) Stream(ctx context.Context, _ []string) (io.ReadCloser, error) {
	r, w := io.Pipe()
	go func() {
		_, _ = io.WriteString(w, "exists resource name:r role:Secondary suspended:no\nexists -\n")
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := range d.n {
			select {
			case <-ctx.Done():
				_ = w.CloseWithError(ctx.Err())
				return
			case <-tick.C:
			}
			role := "Primary"
			if i%2 == 1 {
				role = "Secondary"
			}
			if _, err := io.WriteString(w, "change resource name:r role:"+role+"\n"); err != nil {
				return
			}
		}
		_ = w.Close()
	}()
	return r, nil
}
