package fleetsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

const (
	// initialEventsEnd is the annotation of the bookmark that ends a watch's initial
	// events (sendInitialEvents=true).
	initialEventsEnd = "k8s.io/initial-events-end"
	// minRequestTimeout is the kube-apiserver's --min-request-timeout default: a watch
	// without timeoutSeconds ends after between one and two of it.
	minRequestTimeout = 1800 * time.Second
	// tooLargeWait is how long a watch from a resourceVersion the member has not reached
	// waits for it, as the API server's watch cache does.
	tooLargeWait = 3 * time.Second
)

// watchRequest is a watch's parameters.
type watchRequest struct {
	request
	sel       selector
	format    format
	from      uint64
	initial   bool // send the current objects first, as ADDED
	bookmarks bool
	// initialEnd asks for the bookmark that ends the initial events (sendInitialEvents).
	initialEnd bool
	deadline   time.Time
}

func (m *Member) serveWatch(w http.ResponseWriter, r *http.Request, req request) {
	wr, err := m.parseWatch(r, req)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if current, _ := m.store.state(); wr.from > current {
		if !m.waitVersion(r, wr.from) {
			current, _ = m.store.state()
			writeStatus(w, apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", wr.from, current), 1))
			return
		}
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", wr.contentType())
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	s := &watchStream{m: m, w: w, flusher: flusher, r: r, wr: wr}
	s.run()
}

func (wr *watchRequest) contentType() string {
	if wr.format == metadataOnly {
		return "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	}
	return "application/json"
}

func (m *Member) parseWatch(r *http.Request, req request) (*watchRequest, error) {
	f, _, ok := negotiate(r.Header.Get("Accept"), false)
	if !ok {
		return nil, notAcceptable()
	}
	q := r.URL.Query()
	sel, err := parseSelector(q.Get("labelSelector"), q.Get("fieldSelector"))
	if err != nil {
		return nil, err
	}
	wr := &watchRequest{request: req, sel: sel, format: f, bookmarks: q.Get("allowWatchBookmarks") == "true"}
	timeout := minRequestTimeout + rand.N(minRequestTimeout)
	if t := q.Get("timeoutSeconds"); t != "" {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || n < 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("timeoutSeconds: %q is not a number of seconds", t))
		}
		if n > 0 {
			timeout = time.Duration(n) * time.Second
		}
	}
	wr.deadline = time.Now().Add(timeout)
	rv := q.Get("resourceVersion")
	switch send := q.Get("sendInitialEvents"); {
	case send == "true":
		// The watch-list protocol: the API server requires these, and so does the simulator.
		if q.Get("resourceVersionMatch") != string(metav1.ResourceVersionMatchNotOlderThan) || !wr.bookmarks {
			return nil, apierrors.NewBadRequest("sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true")
		}
		wr.initial, wr.initialEnd = true, true
	case rv == "" || rv == "0":
		// "Start at the most recent", with the objects that exist first.
		wr.initial = send != "false"
	}
	if rv != "" && rv != "0" {
		if wr.from, err = strconv.ParseUint(rv, 10, 64); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", rv))
		}
	}
	return wr, nil
}

// waitVersion waits until the member reaches the resourceVersion, at most tooLargeWait.
func (m *Member) waitVersion(r *http.Request, rv uint64) bool {
	deadline := time.NewTimer(tooLargeWait)
	defer deadline.Stop()
	for {
		_, current, changed, _ := m.store.since(rv)
		if current >= rv {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		case <-r.Context().Done():
			return false
		}
	}
}

// watchStream sends one watch's events.
type watchStream struct {
	m       *Member
	w       http.ResponseWriter
	flusher http.Flusher
	r       *http.Request
	wr      *watchRequest
	// at is the resourceVersion up to which every event was sent.
	at uint64
}

func (s *watchStream) run() {
	ctx := s.r.Context()
	wr := s.wr
	s.at = wr.from
	if wr.initial {
		objs, current := s.m.store.snapshot(wr.res)
		if wr.from == 0 || wr.from < current {
			s.at = current
		}
		for _, o := range objs {
			if wr.sel.matches(o, wr.namespace) && !s.send(watch.Added, o) {
				return
			}
		}
		if wr.initialEnd && !s.bookmark(s.at, true) {
			return
		}
		s.flush()
	}
	end := time.NewTimer(time.Until(wr.deadline))
	defer end.Stop()
	var bookmarkDue <-chan time.Time
	var bookmarks *time.Timer
	if wr.bookmarks {
		bookmarks = time.NewTimer(s.nextBookmark())
		defer bookmarks.Stop()
		bookmarkDue = bookmarks.C
	}
	for {
		events, current, changed, gone := s.m.store.since(s.at)
		if gone {
			s.sendExpired()
			return
		}
		for _, ev := range events {
			if !s.deliver(ev) {
				return
			}
		}
		if len(events) > 0 {
			s.at = events[len(events)-1].obj.rv
		}
		s.flush()
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-changed:
		case <-bookmarkDue:
			if !s.bookmark(max(current, s.at), false) {
				return
			}
			s.at = max(current, s.at)
			s.flush()
			bookmarks.Reset(s.nextBookmark())
		}
	}
}

// nextBookmark is when the next bookmark is due: every BookmarkInterval.
func (s *watchStream) nextBookmark() time.Duration { return s.m.sim.opts.BookmarkInterval }

// deliver sends the event as the watch sees it: with a selector, an object that starts
// matching is ADDED and one that stops matching is DELETED.
func (s *watchStream) deliver(ev event) bool {
	wr := s.wr
	if ev.obj.res != wr.res {
		return true
	}
	now := wr.sel.matches(ev.obj, wr.namespace)
	was := ev.prev != nil && wr.sel.matches(ev.prev, wr.namespace)
	switch {
	case ev.typ == watch.Deleted && was:
		return s.send(watch.Deleted, ev.obj)
	case ev.typ == watch.Deleted:
		return true
	case now && was:
		return s.send(watch.Modified, ev.obj)
	case now:
		return s.send(watch.Added, ev.obj)
	case was:
		return s.send(watch.Deleted, ev.obj)
	}
	return true
}

func (s *watchStream) send(typ watch.EventType, o *object) bool {
	data, err := encodeAs(o, s.wr.format)
	if err != nil {
		return false
	}
	return s.write(typ, data)
}

// bookmark sends a BOOKMARK: an object of the kind with only its resourceVersion, and the
// initial-events-end annotation when it ends the initial events.
func (s *watchStream) bookmark(rv uint64, initialEnd bool) bool {
	kind, apiVersion := s.wr.res.kind, s.wr.res.apiVersion()
	if s.wr.format == metadataOnly {
		kind, apiVersion = "PartialObjectMetadata", "meta.k8s.io/v1"
	}
	meta := metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
	if initialEnd {
		meta.Annotations = map[string]string{initialEventsEnd: "true"}
	}
	data, err := json.Marshal(struct {
		Kind       string            `json:"kind"`
		APIVersion string            `json:"apiVersion"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}{kind, apiVersion, meta})
	if err != nil {
		return false
	}
	return s.write(watch.Bookmark, data)
}

// sendExpired ends a watch whose resourceVersion is older than the member keeps, as the API
// server does: an ERROR event with a 410 Status.
func (s *watchStream) sendExpired() {
	_, compacted := s.m.store.state()
	status := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", s.at, compacted+1)).Status()
	status.Kind, status.APIVersion = "Status", "v1"
	if data, err := json.Marshal(&status); err == nil {
		_ = s.write(watch.Error, data)
		s.flush()
	}
}

// write sends one event, holding it while the member is frozen.
func (s *watchStream) write(typ watch.EventType, object []byte) bool {
	if !s.m.waitThawed(s.r.Context()) {
		return false
	}
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	t, _ := json.Marshal(string(typ))
	b.Write(t)
	b.WriteString(`,"object":`)
	b.Write(object)
	b.WriteString("}\n")
	_, err := s.w.Write(b.Bytes())
	return err == nil
}

func (s *watchStream) flush() {
	if s.flusher != nil {
		s.flusher.Flush()
	}
}
