package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/test/site/fleetsim"
)

// summaries watches the hub's summaries as a user of the hub would: the latest of each, and
// when each member's marker (its NodewrightCluster's status.nodes.ready) first showed.
type summaries struct {
	mu      sync.Mutex
	latest  map[string]*fleetv1alpha1.NodewrightClusterSummary
	pending map[marker]time.Time     // a change written on a member: when its write began
	seen    map[marker]time.Duration // how long until the summary showed it
}

type marker struct {
	member string
	ready  int32
}

// watchSummaries follows the summaries until ctx ends, watching again whenever a watch closes.
func watchSummaries(ctx context.Context, hub client.WithWatch) *summaries {
	s := &summaries{latest: map[string]*fleetv1alpha1.NodewrightClusterSummary{}, pending: map[marker]time.Time{}, seen: map[marker]time.Duration{}}
	go func() {
		for ctx.Err() == nil {
			w, err := hub.Watch(ctx, &fleetv1alpha1.NodewrightClusterSummaryList{})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for e := range w.ResultChan() {
				now := time.Now()
				o, ok := e.Object.(*fleetv1alpha1.NodewrightClusterSummary)
				if !ok {
					continue
				}
				// By the member's name: the name of its kubeconfig Secret (the summary's is
				// "kubeconfig.<name>").
				name := o.Spec.Registration.Name
				s.mu.Lock()
				if e.Type == watch.Deleted {
					delete(s.latest, name)
				} else {
					s.latest[name] = o
					k := marker{name, o.Status.Nodes.Ready}
					if began, ok := s.pending[k]; ok {
						s.seen[k] = now.Sub(began)
						delete(s.pending, k)
					}
				}
				s.mu.Unlock()
			}
			w.Stop()
		}
	}()
	return s
}

// expect records that a change with this marker is being written now.
func (s *summaries) expect(k marker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending[k] = time.Now()
}

// reset forgets the changes expected and seen so far.
func (s *summaries) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending, s.seen = map[marker]time.Time{}, map[marker]time.Duration{}
}

// results are the latencies seen, and how many changes never showed.
func (s *summaries) results() (seen []time.Duration, missing int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.seen {
		seen = append(seen, d)
	}
	return seen, len(s.pending)
}

func (s *summaries) outstanding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// waitUntil polls the latest summaries until ok says "" for every name, and says what was
// still missing at the deadline.
func (s *summaries) waitUntil(ctx context.Context, names []string, patience time.Duration, ok func(*fleetv1alpha1.NodewrightClusterSummary) string) error {
	deadline := time.Now().Add(patience)
	for {
		why := ""
		s.mu.Lock()
		for _, n := range names {
			sum, found := s.latest[n]
			if !found {
				why = n + ": no summary"
			} else if why = ok(sum); why != "" {
				why = n + ": " + why
			}
			if why != "" {
				break
			}
		}
		s.mu.Unlock()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s, %s", patience, why)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// progress prints, every period until ctx ends, how many of the names' summaries have
// settled, what the others lack (the most common first), and the CPU of the hub, its API
// server, etcd, the benchmark's process and the machine over the period.
func (s *summaries) progress(ctx context.Context, names []string, cpuNow func() (cpuShares, error), period time.Duration) {
	start := time.Now()
	cpu0, _ := cpuNow()
	for sleep(ctx, period) == nil {
		n := 0
		lacking := map[string]int{}
		s.mu.Lock()
		for _, name := range names {
			why := "no summary"
			if sum, ok := s.latest[name]; ok {
				why = settled(sum)
			}
			if why == "" {
				n++
			} else {
				lacking[why]++
			}
		}
		s.mu.Unlock()
		cpu1, _ := cpuNow()
		fmt.Printf("    %3.0fs: %4d of %d summaries settled%s\n           %s\n",
			time.Since(start).Seconds(), n, len(names), showLacking(lacking), cpu0.shares(cpu1))
		cpu0 = cpu1
	}
}

// showLacking says what the summaries not settled lack, the three most common.
func showLacking(lacking map[string]int) string {
	whys := slices.Collect(maps.Keys(lacking))
	slices.SortFunc(whys, func(a, b string) int { return cmp.Or(lacking[b]-lacking[a], strings.Compare(a, b)) })
	out := ""
	for i, why := range whys {
		if i == 3 {
			out += fmt.Sprintf(", %d other", len(whys)-3)
			break
		}
		out += fmt.Sprintf("; %d: %s", lacking[why], why)
	}
	return out
}

// settled is a summary that shows all the member's objects and a reachable member.
func settled(s *fleetv1alpha1.NodewrightClusterSummary) string {
	reachable := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable)
	switch {
	case reachable == nil:
		return "no status yet"
	case reachable.Status != metav1.ConditionTrue:
		return "not Reachable (" + reachable.Reason + ")"
	case s.Status.Phase != "MultiNode" || s.Status.NodewrightVersion != fleetsim.NodewrightVersion || s.Status.KubernetesVersion == "":
		return fmt.Sprintf("phase %q, versions %q %q", s.Status.Phase, s.Status.NodewrightVersion, s.Status.KubernetesVersion)
	case !meta.IsStatusConditionTrue(s.Status.Conditions, fleetv1alpha1.ConditionCheckpointConsistent):
		return "checkpoint not recorded"
	}
	return ""
}

// unreachable is a summary whose member is marked unreachable.
func unreachable(s *fleetv1alpha1.NodewrightClusterSummary) string {
	if c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable); c == nil || c.Status != metav1.ConditionFalse {
		return "still Reachable"
	}
	return ""
}

// sleep waits d, or less when ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
