package agent

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// queue is the operation runner's work queue, client-go's workqueue for one worker: a key is
// queued once however often it is added; one added while it is worked on is worked on again
// once that ends, never twice at once; AddAfter adds it once its time has come (the earliest
// asked for); AddRateLimited after a wait that doubles with each failure in a row, from
// first to limit, until Forget.
type queue struct {
	first, limit time.Duration

	mu       sync.Mutex
	order    []types.NamespacedName
	queued   map[types.NamespacedName]bool
	working  map[types.NamespacedName]bool
	failures map[types.NamespacedName]int
	waiting  map[types.NamespacedName]*delayedAdd
	ready    chan struct{}
}

type delayedAdd struct {
	at    time.Time
	timer *time.Timer
}

func newQueue(first, limit time.Duration) *queue {
	return &queue{first: first, limit: limit, queued: map[types.NamespacedName]bool{}, working: map[types.NamespacedName]bool{},
		failures: map[types.NamespacedName]int{}, waiting: map[types.NamespacedName]*delayedAdd{}, ready: make(chan struct{}, 1)}
}

// Add queues key, unless it is queued already.
func (q *queue) Add(key types.NamespacedName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.add(key)
}

func (q *queue) add(key types.NamespacedName) {
	if q.queued[key] {
		return
	}
	q.queued[key] = true
	if q.working[key] {
		// Queued again when its work ends (Done).
		return
	}
	q.order = append(q.order, key)
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// AddAfter queues key once after has passed; a key already waiting keeps the earlier time.
func (q *queue) AddAfter(key types.NamespacedName, after time.Duration) {
	if after <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	at := time.Now().Add(after)
	if w, ok := q.waiting[key]; ok {
		if !w.at.After(at) {
			return
		}
		w.timer.Stop()
	}
	w := &delayedAdd{at: at}
	w.timer = time.AfterFunc(after, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.waiting[key] == w {
			delete(q.waiting, key)
		}
		q.add(key)
	})
	q.waiting[key] = w
}

// AddRateLimited queues key after a wait that doubles with each of its failures in a row.
func (q *queue) AddRateLimited(key types.NamespacedName) {
	q.mu.Lock()
	n := q.failures[key]
	q.failures[key] = n + 1
	q.mu.Unlock()
	wait := q.limit
	if n < 32 {
		wait = min(q.first<<n, q.limit)
	}
	q.AddAfter(key, wait)
}

// Forget clears key's failures.
func (q *queue) Forget(key types.NamespacedName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.failures, key)
}

// Get waits for the next key to work on, until ctx ends (false).
func (q *queue) Get(ctx context.Context) (types.NamespacedName, bool) {
	for {
		q.mu.Lock()
		if len(q.order) > 0 {
			key := q.order[0]
			q.order = q.order[1:]
			delete(q.queued, key)
			q.working[key] = true
			q.mu.Unlock()
			return key, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return types.NamespacedName{}, false
		case <-q.ready:
		}
	}
}

// Done ends the work on key; it is queued again if it was added meanwhile.
func (q *queue) Done(key types.NamespacedName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.working, key)
	if q.queued[key] {
		delete(q.queued, key)
		q.add(key)
	}
}

// Stop stops the delayed adds.
func (q *queue) Stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key, w := range q.waiting {
		w.timer.Stop()
		delete(q.waiting, key)
	}
}
