package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

// bareObserverEnv, set to a kubeconfig, makes this program the bare observer instead of the
// benchmark: the benchmark runs it as its own process so that its CPU time is its own.
const bareObserverEnv = "BENCH_BRIDGE_BARE_OBSERVER"

// bareSummaryName is the ConfigMap the bare observer writes what it observed into.
const bareSummaryName = "bare-observer"

// runBareObserver is the yardstick of the bridge's CPU per heartbeat: a plain client-go watch
// of the legacy ConfigMap that observes what the bridge observes (the cluster's phase, each
// node's role, freshness, DRBD report and bond mode), writes it only when it changes, and
// wakes at the next heartbeat's deadline. It is written the way a careful person would by
// hand: a tick that only moves a fresh heartbeat forward costs a comparison, not a parse.
func runBareObserver(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	o := &bareObserver{c: c, staleAfter: 30 * time.Second, written: map[string]string{}}
	for ctx.Err() == nil {
		if err := o.watch(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "bare observer: %v; watching again\n", err)
			time.Sleep(time.Second)
		}
	}
	return nil
}

type bareObserver struct {
	c          client.WithWatch
	staleAfter time.Duration
	data       map[string]string
	obs        legacy.Observation
	problems   []legacy.Problem
	stale      map[string]bool // each node's freshness in the last summary
	written    map[string]string
}

func (o *bareObserver) watch(ctx context.Context) error {
	w, err := o.c.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(legacyNamespace),
		client.MatchingFields{"metadata.name": configMapName})
	if err != nil {
		return err
	}
	defer w.Stop()
	deadline := time.NewTimer(time.Hour)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed")
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if !isCM || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			if !o.observe(cm.Data) {
				continue
			}
		}
		summary, next := o.summary(time.Now())
		if err := o.write(ctx, summary); err != nil {
			return err
		}
		deadline.Reset(next)
	}
}

// observe takes in a new version of the data: a full parse when anything but heartbeats
// changed, otherwise only the heartbeats that moved. It reports whether the summary may have
// changed: a heartbeat that only moves a fresh node's forward cannot change it (the deadline
// timer, set for the older heartbeat, looks again in time).
func (o *bareObserver) observe(data map[string]string) bool {
	before := o.data
	o.data = data
	// A heartbeat alone cannot clear a problem elsewhere, so any problem means a full parse.
	if before == nil || len(before) != len(data) || len(o.problems) > 0 {
		o.obs, o.problems = legacy.Parse(data)
		return true
	}
	var beats []int
	for k, v := range data {
		if before[k] == v {
			continue
		}
		i := o.heartbeatOf(k)
		if i < 0 {
			o.obs, o.problems = legacy.Parse(data)
			return true
		}
		beats = append(beats, i)
	}
	changed := false
	for _, i := range beats {
		n := &o.obs.Nodes[i]
		t, err := time.Parse(time.RFC3339, data[legacy.NodeKey(n.Name, legacy.FieldHeartbeat)])
		if err != nil {
			o.obs, o.problems = legacy.Parse(data)
			return true
		}
		changed = changed || t.Before(n.Heartbeat) || o.stale[n.Name]
		n.Heartbeat = t
	}
	return changed
}

// heartbeatOf is the index of the node whose heartbeat key k is, or -1.
func (o *bareObserver) heartbeatOf(k string) int {
	name, ok := strings.CutSuffix(strings.TrimPrefix(k, "node."), "."+legacy.FieldHeartbeat)
	if !ok || !strings.HasPrefix(k, "node.") {
		return -1
	}
	for i := range o.obs.Nodes {
		if o.obs.Nodes[i].Name == name {
			return i
		}
	}
	return -1
}

// summary is what was observed, one key per node and one for the cluster, and how long
// until the next fresh heartbeat goes stale.
func (o *bareObserver) summary(now time.Time) (map[string]string, time.Duration) {
	roll := legacy.Roll(o.obs, o.problems, now, o.staleAfter)
	out := map[string]string{"phase": string(roll.Phase), "ready": fmt.Sprintf("%d/%d", roll.Ready, len(roll.Nodes))}
	o.stale = map[string]bool{}
	for _, n := range roll.Nodes {
		o.stale[n.Name] = n.Stale
		drbd, _ := json.Marshal(n.DRBD)
		out["node."+n.Name] = fmt.Sprintf("role=%s stale=%v bond=%s drbd=%s", n.Role, n.Stale, n.BondMode, drbd)
	}
	next := time.Hour
	if !roll.NextDeadline.IsZero() {
		next = max(roll.NextDeadline.Sub(now), 0)
	}
	return out, next
}

// write patches the keys that changed since the last write, and nothing when none did.
func (o *bareObserver) write(ctx context.Context, summary map[string]string) error {
	changed := map[string]any{}
	for k, v := range summary {
		if o.written[k] != v {
			changed[k] = v
		}
	}
	for k := range o.written {
		if _, ok := summary[k]; !ok {
			changed[k] = nil
		}
	}
	if len(changed) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"data": changed})
	if err != nil {
		return err
	}
	out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNamespace, Name: bareSummaryName}}
	if err := o.c.Patch(ctx, out, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return err
	}
	o.written = summary
	return nil
}
