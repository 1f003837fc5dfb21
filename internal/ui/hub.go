package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// idleStop is how long the watches outlive the last page, so that a reload does not restart
// them. A variable for the tests.
var idleStop = 15 * time.Second

// subscriberBuffer is how many events a slow page may lag behind before it is dropped; its
// EventSource reconnects and starts again from a fresh snapshot.
const subscriberBuffer = 4096

// event is one server-sent event.
type event struct {
	name string
	data []byte
}

func newEvent(name string, v any) event {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return event{name: name, data: data}
}

type subscriber struct {
	ch   chan event
	gone chan struct{}
}

// hub keeps what the watches observed and relays every change to the connected pages. Its own
// copy of the objects, changed and broadcast under one lock, is what a page that connects
// later gets as its snapshot, so a page never misses a change between the two.
type hub struct {
	client    client.WithWatch
	namespace string
	// fleet: the API server is a fleet hub, and only its member summaries are watched.
	fleet bool
	// viewNamespace is the namespace view's namespace: its VMs, requests and snapshots are
	// watched there; "" watches none.
	viewNamespace string
	trail         *trail
	log           io.Writer
	// progress reads the running copies' logs, with the user's credentials; nil: it is not
	// shown.
	progress kubernetes.Interface

	mu        sync.Mutex
	subs      map[*subscriber]struct{}
	objects   map[string]map[string]json.RawMessage // kind -> key -> object
	problems  map[string]string                     // kind -> why it cannot be watched
	synced    map[string]bool
	timeline  timeline
	run       *run
	runs      uint64
	stopTimer *time.Timer
	// idleTimers counts the idle timers started, so that a late one is told apart.
	idleTimers uint64
	closed     bool
}

// run is one start of the watches, from the first page to the last page leaving. Events of
// an older run that arrive late are ignored.
type run struct {
	gen    uint64
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// progress samples the running copies' progress.
	progress copyProgressSampler
	// legacy is the legacy ConfigMap (namespace/name) whose watches run under legacyCancel.
	legacy       string
	legacyCancel context.CancelFunc
}

func newHub(c client.WithWatch, namespace string, tr *trail, log io.Writer) *hub {
	if log == nil {
		log = io.Discard
	}
	return &hub{
		client: c, namespace: namespace, trail: tr, log: log,
		subs:     map[*subscriber]struct{}{},
		objects:  map[string]map[string]json.RawMessage{},
		problems: map[string]string{}, synced: map[string]bool{},
	}
}

// subscribe registers a page and returns the snapshot it starts from; nil once the hub is
// closed.
func (h *hub) subscribe() (*subscriber, []event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil
	}
	if h.stopTimer != nil {
		h.stopTimer.Stop()
		h.stopTimer = nil
	}
	if h.run == nil {
		h.startLocked()
	}
	var snap []event
	for kind, objs := range h.objects {
		for key, obj := range objs {
			snap = append(snap, newEvent("upsert", change{Kind: kind, Key: key, Object: obj}))
		}
	}
	for kind, msg := range h.problems {
		snap = append(snap, newEvent("problem", problem{Kind: kind, Message: msg}))
	}
	for kind := range h.synced {
		snap = append(snap, newEvent("synced", change{Kind: kind}))
	}
	snap = append(snap, newEvent("timeline", h.timeline.entries))
	sub := &subscriber{ch: make(chan event, subscriberBuffer), gone: make(chan struct{})}
	h.subs[sub] = struct{}{}
	return sub, snap
}

// unsubscribe forgets a page whose stream ended; the hub may have dropped it already.
func (h *hub) unsubscribe(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[sub]; ok {
		delete(h.subs, sub)
		close(sub.gone)
	}
	h.idleLocked()
}

// idleLocked starts the idle timer when no page is left and the watches run: whether the last
// page left or was dropped for lagging.
func (h *hub) idleLocked() {
	if len(h.subs) > 0 || h.run == nil || h.closed || h.stopTimer != nil {
		return
	}
	h.idleTimers++
	n := h.idleTimers
	h.stopTimer = time.AfterFunc(idleStop, func() { h.stopIfIdle(n) })
}

// stopIfIdle stops the watches if idle timer n is still the current one (a page that came
// back stopped it; one that fired late must not cut a newer one short) and no page is left.
func (h *hub) stopIfIdle(n uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopTimer == nil || h.idleTimers != n {
		return
	}
	h.stopTimer = nil
	if len(h.subs) == 0 {
		h.stopLocked()
	}
}

// stopLocked ends the current run and forgets its objects; the timeline stays.
func (h *hub) stopLocked() {
	if h.run == nil {
		return
	}
	h.run.cancel()
	h.run = nil
	h.objects = map[string]map[string]json.RawMessage{}
	h.problems = map[string]string{}
	h.synced = map[string]bool{}
}

// close stops the watches for good and waits for them.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	if h.stopTimer != nil {
		h.stopTimer.Stop()
	}
	r := h.run
	h.stopLocked()
	for sub := range h.subs {
		delete(h.subs, sub)
		close(sub.gone)
	}
	h.mu.Unlock()
	if r != nil {
		r.wg.Wait()
	}
}

// broadcastLocked sends ev to every page; a page too far behind is dropped (its stream ends,
// and the page reconnects for a fresh snapshot).
func (h *hub) broadcastLocked(ev event) {
	dropped := false
	for sub := range h.subs {
		select {
		case sub.ch <- ev:
		default:
			delete(h.subs, sub)
			close(sub.gone)
			dropped = true
		}
	}
	if dropped {
		h.idleLocked()
	}
}

// current is the run gen if it is still the hub's current one.
func (h *hub) current(gen uint64) bool { return h.run != nil && h.run.gen == gen }

// change is an object upserted or deleted, or a kind reset or synced.
type change struct {
	Kind   string          `json:"kind"`
	Key    string          `json:"key,omitempty"`
	Object json.RawMessage `json:"object,omitempty"`
}

// problem says why a kind cannot be watched; an empty message clears it.
type problem struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func (h *hub) upsert(gen uint64, kind, key string, obj json.RawMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.current(gen) {
		return
	}
	if h.objects[kind] == nil {
		h.objects[kind] = map[string]json.RawMessage{}
	}
	h.objects[kind][key] = obj
	h.clearProblemLocked(kind)
	h.broadcastLocked(newEvent("upsert", change{Kind: kind, Key: key, Object: obj}))
}

func (h *hub) remove(gen uint64, kind, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.current(gen) {
		return
	}
	delete(h.objects[kind], key)
	if kind == kindMigration {
		delete(h.run.progress.jobs, key) // its sampling loop ends
	}
	h.broadcastLocked(newEvent("delete", change{Kind: kind, Key: key}))
}

// resetLocked forgets every object of kind, on the pages too.
func (h *hub) resetLocked(kind string) {
	delete(h.objects, kind)
	delete(h.problems, kind)
	delete(h.synced, kind)
	h.broadcastLocked(newEvent("reset", change{Kind: kind}))
}

func (h *hub) markSynced(gen uint64, kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.current(gen) {
		return
	}
	h.synced[kind] = true
	h.clearProblemLocked(kind)
	h.broadcastLocked(newEvent("synced", change{Kind: kind}))
}

func (h *hub) setProblem(gen uint64, kind, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.current(gen) || h.problems[kind] == msg {
		return
	}
	h.problems[kind] = msg
	h.broadcastLocked(newEvent("problem", problem{Kind: kind, Message: msg}))
}

func (h *hub) clearProblemLocked(kind string) {
	if _, ok := h.problems[kind]; !ok {
		return
	}
	delete(h.problems, kind)
	h.broadcastLocked(newEvent("problem", problem{Kind: kind}))
}

// trailProblem says on the pages, and in the log, why the trail's folder is not followed;
// "" clears it.
func (h *hub) trailProblem(gen uint64, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.current(gen) {
		return
	}
	if msg == "" {
		h.clearProblemLocked(kindTrail)
		return
	}
	if h.problems[kindTrail] == msg {
		return
	}
	h.problems[kindTrail] = msg
	h.broadcastLocked(newEvent("problem", problem{Kind: kindTrail, Message: msg}))
	fmt.Fprintf(h.log, "nodewright ui: %s\n", msg)
}

// trailChanged tells the pages to read the trail again.
func (h *hub) trailChanged(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.current(gen) {
		h.broadcastLocked(newEvent("trail", struct{}{}))
	}
}
