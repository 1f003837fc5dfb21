package kubelite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/spectrocloud/nodewright/internal/text"
)

// ListOptions select what a list or a watch returns.
type ListOptions struct {
	// FieldSelector, e.g. spec.nodeName=edge-1 (a custom resource's selectableFields).
	FieldSelector string
	LabelSelector string
	// ResourceVersion: a watch sends the changes after it.
	ResourceVersion string
	// TimeoutSeconds: the server ends the watch after it.
	TimeoutSeconds int
	// AllowWatchBookmarks: the server sends BOOKMARK events, which carry only a newer
	// resourceVersion to resume from.
	AllowWatchBookmarks bool
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.FieldSelector != "" {
		q.Set("fieldSelector", o.FieldSelector)
	}
	if o.LabelSelector != "" {
		q.Set("labelSelector", o.LabelSelector)
	}
	if o.ResourceVersion != "" {
		q.Set("resourceVersion", o.ResourceVersion)
	}
	if o.TimeoutSeconds > 0 {
		q.Set("timeoutSeconds", strconv.Itoa(o.TimeoutSeconds))
	}
	if o.AllowWatchBookmarks {
		q.Set("allowWatchBookmarks", "true")
	}
	return q
}

// List reads the collection at path into into (a list type: its metadata.resourceVersion is
// where a watch of the same collection goes on from).
func (c *Client) List(ctx context.Context, path string, opts ListOptions, into any) error {
	return c.Do(ctx, http.MethodGet, path, opts.query(), "", nil, into)
}

// The types of a watch's events.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Bookmark = "BOOKMARK"
	Error    = "ERROR"
)

// Event is one event of a watch: its type and the object, still encoded.
type Event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// Watcher reads the events of one watch.
type Watcher struct {
	body io.ReadCloser
	dec  *json.Decoder
}

// Watch watches the collection at path from opts.ResourceVersion. The server may refuse a
// version too old with a *StatusError that IsGone, now or in an ERROR event.
func (c *Client) Watch(ctx context.Context, path string, opts ListOptions) (*Watcher, error) {
	q := opts.query()
	q.Set("watch", "true")
	resp, err := c.request(ctx, http.MethodGet, path, q, "", nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, statusError(resp, body)
	}
	return &Watcher{body: resp.Body, dec: json.NewDecoder(resp.Body)}, nil
}

// Next is the watch's next event. It returns io.EOF once the server ended the watch, and
// an ERROR event's Status as a *StatusError.
func (w *Watcher) Next() (Event, error) {
	var e Event
	if err := w.dec.Decode(&e); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return e, fmt.Errorf("the watch was cut: %w", err)
		}
		return e, err
	}
	switch e.Type {
	case Added, Modified, Deleted, Bookmark:
		return e, nil
	case Error:
		var s status
		if err := json.Unmarshal(e.Object, &s); err != nil || s.Message == "" {
			return e, fmt.Errorf("the watch ended with an error the client cannot read: %s", e.Object)
		}
		return e, &StatusError{Code: s.Code, Reason: s.Reason, Message: s.Message}
	default:
		return e, fmt.Errorf("the watch sent an event of unknown type %q", e.Type)
	}
}

// Close ends the watch.
func (w *Watcher) Close() error { return w.body.Close() }

// ObjectMeta is the part of an object's metadata that tells which it is and which version.
type ObjectMeta struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	ResourceVersion string `json:"resourceVersion"`
}

// MetaOf reads the metadata of an encoded object.
func MetaOf(obj json.RawMessage) (ObjectMeta, error) {
	var o struct {
		Metadata ObjectMeta `json:"metadata"`
	}
	err := json.Unmarshal(obj, &o)
	return o.Metadata, err
}

// Listed is the type ListWatch gives the objects of a list, which are not watch events.
const Listed = "LISTED"

// ListWatch follows a collection as client-go's reflector does, without a cache: it lists it,
// hands each object to Handle, then watches it from the list's resourceVersion and hands on
// each change. A watch the server ends (each one after WatchTimeout) or that breaks is taken
// up again from the last resourceVersion seen, bookmarks included, so that nothing is missed
// or seen twice; a version the server no longer has (410 Gone, Expired) makes it list again.
// Failed requests are tried again after a backoff, from 1 s doubling to 30 s.
type ListWatch struct {
	Client  *Client
	Path    string
	Options ListOptions
	// Handle is called, one event at a time, with each listed object (type Listed) and each
	// watch event but bookmarks.
	Handle func(Event)
	// WatchTimeout: each watch ends after it (a random time between it and twice it when
	// zero: between 5 and 10 minutes, as client-go's), and is taken up again.
	WatchTimeout time.Duration

	mu sync.Mutex
	rv string
	// lists and watches count the requests made, for tests.
	lists, watches int
}

// minWatchTimeout is client-go's reflector's.
const minWatchTimeout = 5 * time.Minute

// Run follows the collection until ctx ends.
func (lw *ListWatch) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("collection", lw.Path)
	backoff := newBackoff(time.Second, 30*time.Second)
	for ctx.Err() == nil {
		if lw.resourceVersion() == "" {
			if err := lw.list(ctx); err != nil {
				if ctx.Err() != nil {
					break
				}
				wait := backoff.next()
				log.Error(err, "Listing failed; trying again", "in", wait)
				sleep(ctx, wait)
				continue
			}
		}
		started := time.Now()
		events, err := lw.watch(ctx)
		if err == nil && events == 0 && time.Since(started) < time.Second {
			err = errors.New("the server ended the watch at once")
		}
		switch {
		case ctx.Err() != nil:
		case IsGone(err):
			log.Info("The watch's resourceVersion is too old; listing again", "reason", err.Error())
			lw.setResourceVersion("")
		case err != nil:
			wait := backoff.next()
			log.Error(err, "Watching failed; trying again", "in", wait)
			sleep(ctx, wait)
		default:
			backoff.reset()
		}
	}
	return nil
}

func (lw *ListWatch) list(ctx context.Context) error {
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	opts := lw.Options
	opts.ResourceVersion, opts.TimeoutSeconds, opts.AllowWatchBookmarks = "", 0, false
	lw.mu.Lock()
	lw.lists++
	lw.mu.Unlock()
	if err := lw.Client.List(ctx, lw.Path, opts, &list); err != nil {
		return err
	}
	if list.Metadata.ResourceVersion == "" {
		return fmt.Errorf("the list of %s has no resourceVersion to watch from", lw.Path)
	}
	for _, item := range list.Items {
		lw.Handle(Event{Type: Listed, Object: item})
	}
	lw.setResourceVersion(list.Metadata.ResourceVersion)
	return nil
}

// watch watches from the last resourceVersion until the watch ends, and says how many events
// it saw: nil when the server ended it as asked.
func (lw *ListWatch) watch(ctx context.Context) (events int, err error) {
	timeout := lw.WatchTimeout
	if timeout <= 0 {
		timeout = minWatchTimeout + rand.N(minWatchTimeout)
	}
	opts := lw.Options
	opts.ResourceVersion, opts.TimeoutSeconds, opts.AllowWatchBookmarks = lw.resourceVersion(), max(int(timeout/time.Second), 1), true
	lw.mu.Lock()
	lw.watches++
	lw.mu.Unlock()
	// The server ends the watch at its timeout; a connection that goes quiet for longer is
	// taken for dead.
	wctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	w, err := lw.Client.Watch(wctx, lw.Path, opts)
	if err != nil {
		return 0, err
	}
	defer func() { _ = w.Close() }()
	for ; ; events++ {
		e, err := w.Next()
		if errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return events, err
		}
		meta, err := MetaOf(e.Object)
		if err != nil || meta.ResourceVersion == "" {
			return events, fmt.Errorf("a %s event of the watch has no resourceVersion: %s", e.Type, text.Shorten(string(e.Object), 512))
		}
		if e.Type != Bookmark {
			lw.Handle(e)
		}
		lw.setResourceVersion(meta.ResourceVersion)
	}
}

func (lw *ListWatch) resourceVersion() string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.rv
}

func (lw *ListWatch) setResourceVersion(rv string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.rv = rv
}

// backoff is an exponential backoff with jitter: each wait between the previous one's double
// and 1.25 times that, up to the limit.
type backoff struct {
	first, limit, last time.Duration
}

func newBackoff(first, limit time.Duration) *backoff { return &backoff{first: first, limit: limit} }

func (b *backoff) next() time.Duration {
	if b.last == 0 {
		b.last = b.first
	} else {
		b.last = min(2*b.last, b.limit)
	}
	return b.last + rand.N(b.last/4+1)
}

func (b *backoff) reset() { b.last = 0 }

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
