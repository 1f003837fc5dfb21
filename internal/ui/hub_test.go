package ui

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// newTestHub is a hub over a fake cluster, with the idle stop shortened to d.
func newTestHub(t *testing.T, d time.Duration) *hub {
	t.Helper()
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	old := idleStop
	idleStop = d
	t.Cleanup(func() { idleStop = old })
	tr, err := newTrail("", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHub(fake.NewClientBuilder().WithScheme(scheme).Build(), "", tr, nil)
	t.Cleanup(h.close)
	return h
}

// waitStopped waits for the hub's watches to stop, as they must once no page is left.
func waitStopped(t *testing.T, h *hub, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		h.mu.Lock()
		running := h.run != nil
		h.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watches still run %s after the last page left (idle stop %s)", within, idleStop)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A page that lags so far behind that the hub drops it is the last page gone: the watches
// stop after the idle delay, whether or not its stream's deferred unsubscribe comes later.
func TestWatchesStopAfterTheLaggingLastPageIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name        string
		unsubscribe bool
	}{{"dropped, its stream still open", false}, {"dropped, then its stream ends", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHub(t, 50*time.Millisecond)
			sub, _ := h.subscribe()
			if sub == nil {
				t.Fatal("no subscription")
			}
			h.mu.Lock()
			run := h.run
			for range subscriberBuffer + 1 {
				h.broadcastLocked(newEvent("trail", struct{}{}))
			}
			h.mu.Unlock()
			select {
			case <-sub.gone:
			default:
				t.Fatal("the lagging page was not dropped")
			}
			if tc.unsubscribe {
				h.unsubscribe(sub)
			}
			waitStopped(t, h, 2*time.Minute)
			if run.ctx.Err() == nil {
				t.Error("the run's watches were not cancelled")
			}
		})
	}
}

// The ordinary case: the last page leaves, the watches stop after the delay; a page that
// comes back in time keeps them.
func TestWatchesStopAfterTheLastPageLeaves(t *testing.T) {
	h := newTestHub(t, 100*time.Millisecond)
	a, _ := h.subscribe()
	h.unsubscribe(a)
	h.unsubscribe(a) // a second unsubscribe (a dropped page's stream ending) changes nothing
	b, _ := h.subscribe()
	time.Sleep(250 * time.Millisecond)
	h.mu.Lock()
	running := h.run != nil
	h.mu.Unlock()
	if !running {
		t.Fatal("the watches stopped while a page was connected")
	}
	h.unsubscribe(b)
	waitStopped(t, h, 2*time.Minute)
}
