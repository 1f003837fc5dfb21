package legacysim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

// Several simulators (processes, in the demo) writing one site at once: every write is retried
// on conflict, so no transition is lost or counted twice, each generation is written by
// exactly one transition, and the writes of the others (heartbeats, garbage) survive.
func TestConcurrentWritersLoseNothing(t *testing.T) {
	sim, cfg := newSite(t)
	joinAll(t, sim, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	beats := make(chan struct{})
	go func() { sim.RunHeartbeats(ctx, time.Millisecond); close(beats) }()
	t.Cleanup(func() { cancel(); <-beats })

	const writers, transitions = 3, 8
	states := []legacy.State{legacy.NetworkConfiguring, legacy.Failed, legacy.Init}
	var wg sync.WaitGroup
	errs := make(chan error, writers*transitions*2)
	for w := range writers {
		writer, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := range transitions {
				if err := writer.ForceState(context.Background(), states[(w+i)%len(states)]); err != nil {
					errs <- fmt.Errorf("writer %d, transition %d: %w", w, i, err)
				}
				key := fmt.Sprintf("writer-%d.write-%d", w, i)
				if err := writer.WriteGarbage(context.Background(), key, "x"); err != nil {
					errs <- fmt.Errorf("writer %d, %s: %w", w, key, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	d := data(t, cfg)
	if want := strconv.Itoa(1 + writers*transitions); d[legacy.KeyGeneration] != want {
		t.Errorf("generation %s after %d transitions from 1, want %s", d[legacy.KeyGeneration], writers*transitions, want)
	}
	for w := range writers {
		for i := range transitions {
			if key := fmt.Sprintf("writer-%d.write-%d", w, i); d[key] != "x" {
				t.Errorf("%s was lost", key)
			}
		}
	}
	// One StateChanged Event per transition, each with its own generation.
	seen := map[int64]int{}
	for _, e := range events(t, cfg, cfg.ConfigMap.Namespace) {
		if e.Reason != ReasonStateChanged {
			continue
		}
		var from, to string
		var generation int64
		if _, err := fmt.Sscanf(e.Message, "State %s -> %s (generation %d)", &from, &to, &generation); err != nil {
			t.Fatalf("Event message %q: %v", e.Message, err)
		}
		seen[generation]++
	}
	for g := int64(2); g <= int64(1+writers*transitions); g++ {
		if seen[g] != 1 {
			t.Errorf("generation %d has %d StateChanged Events, want 1", g, seen[g])
		}
	}
	if len(seen) != writers*transitions {
		t.Errorf("Events name %d generations, want %d: %v", len(seen), writers*transitions, seen)
	}
}

// A transition is one update of the ConfigMap, carrying state, previousState, stateSince and
// generation+1 together: a watcher never sees a half-written transition.
func TestTransitionIsOneUpdate(t *testing.T) {
	sim, cfg := newSite(t)
	ctx := context.Background()
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	start := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, cfg.ConfigMap, start); err != nil {
		t.Fatal(err)
	}
	w, err := watcher.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(cfg.ConfigMap.Namespace),
		&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", cfg.ConfigMap.Name),
			Raw: &metav1.ListOptions{ResourceVersion: start.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	route := []legacy.State{legacy.NetworkConfiguring, legacy.StorageBootstrapping, legacy.SingleNodeReady}
	for _, to := range route {
		if err := sim.Transition(ctx, to); err != nil {
			t.Fatal(err)
		}
	}
	prev, generation := legacy.Init, int64(1)
	for i, to := range route {
		var cm *corev1.ConfigMap
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				t.Fatalf("watch event %d: %s, want Modified", i, ev.Type)
			}
			cm = ev.Object.(*corev1.ConfigMap)
		case <-time.After(2 * time.Minute):
			t.Fatalf("no update for the transition to %s", to)
		}
		generation++
		obs := mustParse(t, cm.Data)
		if obs.State != to || obs.PreviousState != prev || obs.Generation != generation {
			t.Errorf("update %d: state %s, previous %s, generation %d; want %s, %s, %d",
				i, obs.State, obs.PreviousState, obs.Generation, to, prev, generation)
		}
		prev = to
	}
	select {
	case ev := <-w.ResultChan():
		t.Errorf("an extra update after %d transitions: %s %v", len(route), ev.Type, ev.Object)
	case <-time.After(200 * time.Millisecond):
	}
}

// A write that loses a conflict and is then cancelled while it retries reports the
// cancellation, not the conflict it had been retrying.
func TestCancelledWhileRetryingIsCancelled(t *testing.T) {
	_, cfg := newSite(t)
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := 0
	cfg.Client = interceptor.NewClient(direct, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			// Another writer gets in first, so this update conflicts for real...
			other := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
				return err
			}
			other.Data["other-writer"] = strconv.Itoa(updates)
			if err := c.Update(ctx, other); err != nil {
				return err
			}
			err := c.Update(ctx, obj, opts...)
			if !apierrors.IsConflict(err) {
				t.Errorf("update after another writer's: %v, want a conflict", err)
			}
			cancel() // ...and the process is told to stop before the retry.
			return err
		},
	})
	sim, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = sim.Transition(ctx, legacy.NetworkConfiguring)
	if !errors.Is(err, context.Canceled) || apierrors.IsConflict(err) {
		t.Errorf("Transition cancelled while retrying a conflict: %v, want context.Canceled", err)
	}
	if updates != 1 {
		t.Errorf("%d updates attempted, want 1", updates)
	}
	if d := data(t, cfg); d[legacy.KeyState] != string(legacy.Init) || d[legacy.KeyGeneration] != "1" {
		t.Errorf("state %s generation %s, want the transition not written", d[legacy.KeyState], d[legacy.KeyGeneration])
	}
}
