package agent

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

// next gets the next key, failing the test after a limit only a stuck queue reaches.
func next(t *testing.T, q *queue) types.NamespacedName {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k, ok := q.Get(ctx)
	if !ok {
		t.Fatal("nothing came out of the queue")
	}
	return k
}

// empty says whether the queue holds nothing to work on now.
func empty(q *queue) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order) == 0
}

func TestQueueHoldsAKeyOnce(t *testing.T) {
	q := newQueue(5*time.Millisecond, 5*time.Second)
	defer q.Stop()
	q.Add(key("a"))
	q.Add(key("b"))
	q.Add(key("a"))
	if k := next(t, q); k != key("a") {
		t.Fatalf("first %v; want a", k)
	}
	// Added while worked on: not handed out twice at once, but again once done.
	q.Add(key("a"))
	if k := next(t, q); k != key("b") {
		t.Fatalf("second %v; want b (a is being worked on)", k)
	}
	q.Done(key("b"))
	if !empty(q) {
		t.Fatal("a was handed out again while still worked on")
	}
	q.Done(key("a"))
	if k := next(t, q); k != key("a") {
		t.Fatalf("after its work ended: %v; want a again", k)
	}
	q.Done(key("a"))
	if !empty(q) {
		t.Error("the queue holds more than was added")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := q.Get(ctx); ok {
		t.Error("Get handed out a key from an empty queue after its context ended")
	}
}

func TestQueueDelays(t *testing.T) {
	q := newQueue(20*time.Millisecond, 80*time.Millisecond)
	defer q.Stop()
	// A later AddAfter does not put off an earlier one.
	start := time.Now()
	q.AddAfter(key("a"), 50*time.Millisecond)
	q.AddAfter(key("a"), time.Hour)
	if k := next(t, q); k != key("a") || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("%v after %s; want a after 50ms", k, time.Since(start))
	}
	q.Done(key("a"))
	// Each failure in a row waits twice as long, up to the limit, until forgotten.
	for _, want := range []time.Duration{20, 40, 80, 80} {
		start := time.Now()
		q.AddRateLimited(key("b"))
		if k := next(t, q); k != key("b") || time.Since(start) < want*time.Millisecond {
			t.Fatalf("%v after %s; want b after %dms", k, time.Since(start), want)
		}
		q.Done(key("b"))
	}
	q.Forget(key("b"))
	q.mu.Lock()
	failures := q.failures[key("b")]
	q.mu.Unlock()
	if failures != 0 {
		t.Errorf("%d failures remembered after Forget", failures)
	}
}
