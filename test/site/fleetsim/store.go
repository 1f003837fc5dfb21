package fleetsim

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// object is one version of a member's object, immutable once stored: lists, gets and watch
// events share it.
type object struct {
	res      *resource
	ns, name string
	labels   map[string]string
	rv       uint64
	// json is the object as the API server encodes it: with apiVersion, kind and its
	// resourceVersion.
	json []byte
}

// key orders objects as etcd's keys do (/registry/<resource>/<namespace>/<name>).
func (o *object) key() string { return objectKey(o.ns, o.name) }

func objectKey(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// event is one write, as a watch sees it.
type event struct {
	typ watch.EventType
	// obj is the object after the write; for a deletion its last state, with the
	// deletion's resourceVersion, as the API server sends it.
	obj *object
	// prev is the object before the write; nil for an addition. A watch with a selector
	// needs it: an object that stops matching is DELETED for that watch.
	prev *object
}

// store is one member's objects, its resourceVersion counter and its recent events. Every
// write bumps the counter, as a write to etcd bumps its revision.
type store struct {
	mu      sync.Mutex
	rv      uint64
	objects map[*resource]map[string]*object
	// history are the last events, oldest first; compacted is the resourceVersion of the
	// newest event dropped from it (0 while none was): a watch or a continue token from an
	// older version is answered 410 Gone, as after etcd's compaction.
	history   []event
	compacted uint64
	limit     int
	// changed is closed, and replaced, by every write: open watches wait on it.
	changed chan struct{}
	// held is the size of the objects' JSON, in bytes.
	held int64
}

func newStore(limit int) *store {
	return &store{objects: map[*resource]map[string]*object{}, limit: limit, changed: make(chan struct{})}
}

// write stores the object that encode makes at the next resourceVersion, or removes it when
// remove is set, and records the event. encode gets the version to put in the object; it
// returns prev when nothing changed, which writes nothing.
func (s *store) write(res *resource, ns, name string, remove bool, encode func(rv uint64, prev *object) (*object, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	byKey := s.objects[res]
	if byKey == nil {
		byKey = map[string]*object{}
		s.objects[res] = byKey
	}
	key := objectKey(ns, name)
	prev := byKey[key]
	if remove && prev == nil {
		return fmt.Errorf("%s %q: %w", res.gvr.Resource, key, errNotFound)
	}
	obj, err := encode(s.rv+1, prev)
	if err != nil {
		return err
	}
	if obj == prev && !remove {
		return nil // nothing changed: no new version, no event
	}
	s.rv++
	ev := event{typ: watch.Added, obj: obj, prev: prev}
	switch {
	case remove:
		ev.typ = watch.Deleted
		delete(byKey, key)
		s.held -= int64(len(prev.json))
	case prev != nil:
		ev.typ = watch.Modified
		byKey[key] = obj
		s.held += int64(len(obj.json) - len(prev.json))
	default:
		byKey[key] = obj
		s.held += int64(len(obj.json))
	}
	s.history = append(s.history, ev)
	if over := len(s.history) - s.limit; over > 0 {
		s.compacted = s.history[over-1].obj.rv
		s.history = append(s.history[:0:0], s.history[over:]...)
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// get is the object stored under the key; nil if none.
func (s *store) get(res *resource, ns, name string) *object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[res][objectKey(ns, name)]
}

// snapshot is every object of the resource in key order, and the current resourceVersion.
func (s *store) snapshot(res *resource) ([]*object, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*object, 0, len(s.objects[res]))
	for _, o := range s.objects[res] {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out, s.rv
}

// since is every event after resourceVersion rv, the current resourceVersion, and a channel
// closed at the next write. gone says the events after rv are no longer all kept.
func (s *store) since(rv uint64) (events []event, current uint64, changed <-chan struct{}, gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv < s.compacted {
		return nil, s.rv, s.changed, true
	}
	i := sort.Search(len(s.history), func(i int) bool { return s.history[i].obj.rv > rv })
	return append([]event(nil), s.history[i:]...), s.rv, s.changed, false
}

// state is the current resourceVersion and the oldest one a watch can resume from.
func (s *store) state() (current, compacted uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rv, s.compacted
}

// withVersion is the encoded object with its metadata.resourceVersion replaced.
func withVersion(data []byte, rv uint64) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(doc["metadata"], &meta); err != nil {
		return nil, err
	}
	v, err := json.Marshal(fmt.Sprint(rv))
	if err != nil {
		return nil, err
	}
	meta["resourceVersion"] = v
	if doc["metadata"], err = json.Marshal(meta); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}
