package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/spectrocloud/nodewright/internal/testenv"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestMemberWorkflowsBounded: a member holding 10,000 workflows (5,000 of each kind, each
// with an 8 KiB annotation: a member may make its objects as large as its API server takes)
// makes the hub hold next to nothing more: its live heap grows by less than 16 MiB, where a
// cache of the workflows holds their 80 MiB and more. The summary is still right: it lists
// the first 32 unfinished workflows and counts them all, and when some finish, they leave it.
func TestMemberWorkflowsBounded(t *testing.T) {
	const (
		perKind    = 5000
		annotation = 8 << 10
		bound      = 16 << 20
	)
	hub, members := startFleet(t, 1)
	m := members[0]
	ctx := context.Background()
	createCluster(t, m)
	registerKubeconfig(t, hub, "site", m, bearer(m.hubToken(t, "hub-credential")))
	waitSummary(t, hub.Client, "site", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		if s.Status.Phase != "MultiNode" || !meta.IsStatusConditionTrue(s.Status.Conditions, fleetv1alpha1.ConditionReachable) {
			return fmt.Sprintf("%+v", s.Status)
		}
		return ""
	})
	before := liveHeap()

	// The test's own client, not held to client-go's 5 requests a second.
	admin := rest.CopyConfig(m.Admin)
	admin.QPS, admin.Burst = -1, 0
	writer, err := client.New(admin, client.Options{Scheme: m.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	padding := strings.Repeat("x", annotation)
	apply := func(kind, name string, spec map[string]any) error {
		obj := map[string]any{"apiVersion": nodewrightv1alpha1.GroupVersion.String(), "kind": kind,
			"metadata": map[string]any{"name": name, "annotations": map[string]string{"example.com/padding": padding}}, "spec": spec}
		data, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(nodewrightv1alpha1.GroupVersion.String())
		u.SetKind(kind)
		u.SetName(name)
		return writer.Patch(ctx, u, client.RawPatch(types.ApplyPatchType, data), client.FieldOwner("fleet-test"))
	}
	names := make(chan [2]string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range names {
				var err error
				if n[0] == "BondModeFlipPlan" {
					err = apply(n[0], n[1], map[string]any{"targetMode": string(nodewrightv1alpha1.BondMode8023AD)})
				} else {
					err = apply(n[0], n[1], map[string]any{"peerNodes": []string{"node-2"}})
				}
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
			}
		}()
	}
	for i := range perKind {
		names <- [2]string{"BondModeFlipPlan", fmt.Sprintf("f-%05d", i)}
		names <- [2]string{"ReplicationUpgrade", fmt.Sprintf("u-%05d", i)}
	}
	close(names)
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("%d workflows applied in %s", 2*perKind, time.Since(start).Round(time.Second))

	// None has a status: all are unfinished. The summary lists the first 32 and counts all.
	// A read of 10,000 takes 400 requests: longer than the usual patience on a busy machine.
	waitSummaryWithin(t, hub.Client, "site", 10*time.Minute, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		ws := s.Status.Workflows
		if len(ws) != maxWorkflows || ws[0].Name != "f-00000" || ws[31].Name != "f-00031" || s.Status.Workflow != fmt.Sprintf("BondModeFlipPlan/f-00000 (+%d)", 2*perKind-1) {
			return fmt.Sprintf("%d workflows listed, column %q", len(ws), s.Status.Workflow)
		}
		return ""
	})
	t.Logf("the summary showed them %s after the first was applied", time.Since(start).Round(time.Second))
	after := liveHeap()
	t.Logf("the test process's live heap: %d MiB before the workflows, %d MiB with them", before>>20, after>>20)
	if grown := int64(after) - int64(before); grown > bound {
		t.Errorf("the hub holds %d MiB more for the member's %d workflows (of %d KiB each); want less than %d MiB",
			grown>>20, 2*perKind, annotation>>10, bound>>20)
	}

	// The first ten flips finish: they leave the list, and the count.
	for i := range 10 {
		f := &nodewrightv1alpha1.BondModeFlipPlan{}
		f.Name = fmt.Sprintf("f-%05d", i)
		patch := []byte(`{"status":{"phase":"Succeeded"}}`)
		if err := m.Client.Status().Patch(ctx, f, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	waitSummaryWithin(t, hub.Client, "site", 10*time.Minute, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		ws := s.Status.Workflows
		if len(ws) != maxWorkflows || ws[0].Name != "f-00010" || s.Status.Workflow != fmt.Sprintf("BondModeFlipPlan/f-00010 (+%d)", 2*perKind-11) {
			return fmt.Sprintf("%d workflows listed, column %q", len(ws), s.Status.Workflow)
		}
		return ""
	})
}

// liveHeap is the bytes of the process's heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// Simulated members run in this process: what they hold is not the hub's.
	return uint64(max(int64(ms.HeapAlloc)-simulatedHeld(), 0))
}

// waitSummaryWithin is waitSummary with a patience of its own.
func waitSummaryWithin(t *testing.T, hub client.Client, name string, patience time.Duration, check func(*fleetv1alpha1.NodewrightClusterSummary) string) {
	t.Helper()
	testenv.Eventually(t, patience, func() string {
		var s fleetv1alpha1.NodewrightClusterSummary
		if err := hub.Get(context.Background(), client.ObjectKey{Name: kubeconfigSummary(name)}, &s); err != nil {
			return err.Error()
		}
		return check(&s)
	})
}

// failingAfter is a member's API server as the reader sees it: its first list answers with
// one unfinished flip, every later one fails as a stopped API server's would.
type failingAfter struct {
	client.Reader
	mu    sync.Mutex
	lists int
}

func (f *failingAfter) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.lists > len(workflowKinds) {
		return fmt.Errorf("connection refused")
	}
	if l, ok := list.(*nodewrightv1alpha1.BondModeFlipPlanList); ok {
		l.Items = []nodewrightv1alpha1.BondModeFlipPlan{{}}
		l.Items[0].Name = "f"
	}
	return nil
}

// TestWorkflowsKeptWhenAReadFails: a read that fails after one succeeded (the member stopped
// answering) leaves what the last one found, as a cache would, and no error: the summary must
// still get the member's health (a failed read kept TestFleet's stopped member Reachable). A
// member never read successfully answers with the error.
func TestWorkflowsKeptWhenAReadFails(t *testing.T) {
	wake := make(chan event.TypedGenericEvent[string], 8)
	r := newWorkflowReader(wake)
	if _, ok, _ := r.Seen("m"); ok {
		t.Fatal("workflows before any read")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Start(ctx) }()
	r.engage(ctx, "m", &failingAfter{}, answered())
	<-wake
	seen, ok, err := r.Seen("m")
	if !ok || err != nil || seen.Unfinished != 1 || seen.Listed[0].Name != "f" {
		t.Fatalf("after the first read: %+v, %v, %v", seen, ok, err)
	}
	r.changed("m")
	<-wake
	seen, ok, err = r.Seen("m")
	if !ok || err != nil || seen.Unfinished != 1 || seen.Listed[0].Name != "f" {
		t.Fatalf("after a failed read: %+v, %v, %v; want the first read's", seen, ok, err)
	}
	// Before any read succeeded, the failure is the answer.
	r.engage(ctx, "m2", &failingAfter{lists: len(workflowKinds)}, answered())
	<-wake
	if _, ok, err := r.Seen("m2"); ok || err == nil {
		t.Fatalf("a member never read: ok %v, error %v; want the error", ok, err)
	}
}

// answered is the gate of a member that answered.
func answered() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
