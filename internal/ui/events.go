package ui

import (
	"fmt"
	"net/http"
	"time"
)

// keepAlive is how often an idle event stream gets a comment, so that a page whose
// connection died notices and reconnects.
const keepAlive = 20 * time.Second

// hello starts every stream: the page forgets what it had and rebuilds from what follows.
type hello struct {
	User string `json:"user"`
	// Namespace scopes the page; "" for every namespace the user may list.
	Namespace string `json:"namespace"`
	// DefaultNamespace is the form's first namespace.
	DefaultNamespace string `json:"defaultNamespace"`
	TrailGiven       bool   `json:"trailGiven"`
	// Fleet: the page shows a fleet hub's members, and nothing else.
	Fleet bool `json:"fleet"`
}

// events streams the hub's changes to one page as server-sent events.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	sub, snapshot := s.hub.subscribe()
	if sub == nil {
		http.Error(w, "the UI is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.hub.unsubscribe(sub)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	first := newEvent("hello", hello{User: s.whoAmI(r.Context()), Namespace: s.opts.Namespace,
		DefaultNamespace: s.opts.DefaultNamespace, TrailGiven: s.trail.given(), Fleet: s.opts.Fleet})
	if writeEvent(w, first) != nil {
		return
	}
	for _, ev := range snapshot {
		if writeEvent(w, ev) != nil {
			return
		}
	}
	if writeEvent(w, newEvent("ready", struct{}{})) != nil {
		return
	}
	flusher.Flush()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.gone:
			return
		case ev := <-sub.ch:
			if writeEvent(w, ev) != nil {
				return
			}
			// Send what else is queued in the same flush.
			for drained := false; !drained; {
				select {
				case ev := <-sub.ch:
					if writeEvent(w, ev) != nil {
						return
					}
				default:
					drained = true
				}
			}
			flusher.Flush()
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

func writeEvent(w http.ResponseWriter, ev event) error {
	_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
	return err
}
