// Command upgrade measures a ReplicationUpgrade of 200 volumes from one node to two (make
// bench): the operator's upgrade controller in this process against a real API server and
// LINSTOR's stand-in (test/site/linstorsim), each node's agent a real process built for the
// local site, in its own network namespace of the played storage network, its DRBD played from
// the resource files of what the stand-in holds. Every time is when this process saw the
// change, through watches of the upgrade and its NodeOperations.
//
//   - The orchestration's overhead: from the upgrade created to Succeeded, less the stand-in's
//     own synchronisation time (each new replica takes SyncTime from its creation) and less
//     the agents' own time verifying (the time during which some verify operation was seen
//     running). Target: 3 s. The time during which some LINSTOR call was in flight is printed
//     beside it: most of the overhead is the stand-in answering the creates of Place.
//   - LINSTOR API calls per volume, counted by the stand-in.
//   - The batches: the most replica creates in flight at once (the limit is the controller's
//     concurrency, 4) and the most replicas placed between two progress updates (the batch
//     size, 20).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/replicationupgrade"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/bench/agentlab"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

const (
	volumes = 200
	// syncTime is how long the stand-in takes to synchronise each new replica.
	syncTime = 30 * time.Second
	// target is the orchestration overhead allowed beyond the sync and the verify, at the
	// agents' default report interval.
	target = 3 * time.Second
	// verifyTarget is how much longer the Verify step may take than the agents' verifying.
	verifyTarget = 1.2
)

var nodes = []string{"bench-up-a", "bench-up-b"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-upgrade: %v\n", err)
		os.Exit(1)
	}
	if benchproc.Missed {
		os.Exit(1)
	}
}

func run() error {
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	log.SetLogger(logr.Discard())
	lab, err := agentlab.Start("bench-upgrade-")
	if err != nil {
		return err
	}
	defer lab.Close()
	env := lab.Env
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const agentNS, lockNS = agentlab.AgentNamespace, agentlab.WorkflowNamespace
	n, err := lab.Site(ctx, nwv1.BondModeActiveBackup, nodes)
	if err != nil {
		return err
	}
	defer n.Close()

	sim, err := linstorsim.New(linstorsim.Options{SyncTime: syncTime})
	if err != nil {
		return err
	}
	defer sim.Close()
	for _, name := range nodes {
		if err := sim.AddNode(linstorsim.Node{Name: name, Address: n.Node(name).Address}); err != nil {
			return err
		}
		if err := sim.AddStoragePool(linstorsim.Pool{Node: name, Name: "lvm-thin", TotalKiB: 1 << 30, FreeKiB: 1 << 30}); err != nil {
			return err
		}
	}
	if err := sim.AddResourceGroup(linstorsim.Group{Name: "vm-disks", PlaceCount: 1, StoragePool: "lvm-thin"}); err != nil {
		return err
	}
	for i := range volumes {
		name := fmt.Sprintf("pvc-bench-%03d", i)
		if err := sim.AddResourceDefinition(linstorsim.Definition{Name: name, Group: "vm-disks", SizesKiB: []int64{1 << 20}}); err != nil {
			return err
		}
		if err := sim.AddResource(linstorsim.Resource{Definition: name, Node: nodes[0], Pool: "lvm-thin"}); err != nil {
			return err
		}
	}
	go sim.FollowResources(ctx, 100*time.Millisecond, func(def string, diskful, diskless []string) error {
		return n.PlaceDRBDDiskless(def, diskful, diskless)
	})

	for _, name := range nodes {
		n.Expect(name, nwv1.BondModeActiveBackup)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		if err := env.Client.Create(ctx, node); err != nil {
			return err
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		if err := env.Client.Status().Update(ctx, node); err != nil {
			return err
		}
		// At the agent's default report interval: the Verify must not wait on it, but on
		// DRBD's events.
		p, err := n.StartAgent(name, "10s")
		if err != nil {
			return err
		}
		defer p.Stop()
	}
	if err := agentlab.Wait(ctx, 3*time.Minute, func() (bool, error) {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nodes[0]}, as); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return as.Status.Storage != nil && as.Status.Storage.Resources == volumes, nil
	}); err != nil {
		return fmt.Errorf("waiting for %s's agent to report its %d DRBD resources: %w", nodes[0], volumes, err)
	}
	cleanup, err := clusterplay.Managed(ctx, env.Client, netsite.Bond, nwv1.BondModeActiveBackup)
	if err != nil {
		return err
	}
	defer cleanup()
	nwc := &nwv1.NodewrightCluster{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
		return err
	}
	nwc.Status.Phase = nwv1.ClusterSingleNode
	if err := env.Client.Status().Update(ctx, nwc); err != nil {
		return err
	}

	scheme, err := operator.NewScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: operator.CacheOptions(operator.Scope{Agent: agentNS, Workflows: lockNS})})
	if err != nil {
		return err
	}
	flight := &inFlight{}
	if err := (&replicationupgrade.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("bench-upgrade"), LockNamespace: lockNS}, Client: mgr.GetClient(), AgentNamespace: agentNS, LINSTOR: linstor.Config{URL: sim.URL, Transport: flight.wrap}}).SetupWithManager(mgr); err != nil {
		return err
	}
	go func() { _ = mgr.Start(ctx) }()
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	fmt.Printf("A ReplicationUpgrade of %d volumes from one node to two (the stand-in's sync %s per replica; batches of %d, %d at a time):\n",
		volumes, syncTime, replicationupgrade.DefaultBatchSize, replicationupgrade.DefaultConcurrency)
	before := total(sim.Requests())
	seen, err := follow(ctx, watcher, agentNS)
	if err != nil {
		return err
	}
	calls := total(sim.Requests()) - before
	wall := seen.end.Sub(seen.start)
	verifying := seen.verifying()
	for _, st := range seen.stages {
		fmt.Printf("  %-13s %6.2f s\n", st.name, st.took.Seconds())
	}
	overhead := wall - syncTime - verifying
	fmt.Printf("  %.2f s in all, %.2f s of it the stand-in's sync, %.2f s the agents verifying; some LINSTOR call in flight for %.2f s\n",
		wall.Seconds(), syncTime.Seconds(), verifying.Seconds(), flight.busy().Seconds())
	for _, st := range seen.stages {
		if st.name == "Verify" && verifying > 0 {
			ratio := st.took.Seconds() / verifying.Seconds()
			benchproc.Verdict(fmt.Sprintf("the Verify step beside the agents' verifying: %.2f s for %.2f s (%.2f×, the target %.1f×)",
				st.took.Seconds(), verifying.Seconds(), ratio, verifyTarget), ratio <= verifyTarget)
		}
	}
	benchproc.Verdict(fmt.Sprintf("orchestration overhead beyond LINSTOR's sync and DRBD's verify: %.2f s (%.2f× the target, %s)",
		overhead.Seconds(), overhead.Seconds()/target.Seconds(), target), overhead <= target)
	fmt.Printf("  LINSTOR API calls: %d, %.2f per volume\n", calls, float64(calls)/volumes)
	benchproc.Verdict(fmt.Sprintf("replica creates in flight at once, at most: %d (the limit %d); placed between two progress updates, at most: %d (the batch %d)",
		flight.max.Load(), replicationupgrade.DefaultConcurrency, seen.maxStep, replicationupgrade.DefaultBatchSize),
		flight.max.Load() <= replicationupgrade.DefaultConcurrency && seen.maxStep <= replicationupgrade.DefaultBatchSize)
	return nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// inFlight counts the replica creates in flight and remembers the most at once; and the time
// during which any LINSTOR call was in flight.
type inFlight struct {
	now, max atomic.Int32

	mu      sync.Mutex
	calls   int
	since   time.Time
	waiting time.Duration
}

// busy is the time during which at least one LINSTOR call was in flight.
func (f *inFlight) busy() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

func (f *inFlight) call() (done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == 0 {
		f.since = time.Now()
	}
	f.calls++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.calls--; f.calls == 0 {
			f.waiting += time.Since(f.since)
		}
	}
}

func (f *inFlight) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		defer f.call()()
		if req.Method != http.MethodPost || !strings.Contains(req.URL.Path, "/resources/") {
			return next.RoundTrip(req)
		}
		n := f.now.Add(1)
		defer f.now.Add(-1)
		for {
			m := f.max.Load()
			if n <= m || f.max.CompareAndSwap(m, n) {
				break
			}
		}
		return next.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// seen is what this process saw of the upgrade.
type seen struct {
	start, end time.Time
	stages     []stage
	maxStep    int32
	// ops are the verify operations' intervals, from seen Running (or created) to seen ended.
	ops map[string]*[2]time.Time
}

type stage struct {
	name string
	took time.Duration
}

// verifying is the time during which some verify operation ran.
func (s *seen) verifying() time.Duration {
	var spans [][2]time.Time
	for _, iv := range s.ops {
		if !iv[0].IsZero() && !iv[1].IsZero() {
			spans = append(spans, *iv)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0].Before(spans[j][0]) })
	var total time.Duration
	var cur [2]time.Time
	for i, sp := range spans {
		switch {
		case i == 0:
			cur = sp
		case sp[0].After(cur[1]):
			total += cur[1].Sub(cur[0])
			cur = sp
		case sp[1].After(cur[1]):
			cur[1] = sp[1]
		}
	}
	if len(spans) > 0 {
		total += cur[1].Sub(cur[0])
	}
	return total
}

// follow creates the upgrade and follows it and its operations until it ends.
func follow(ctx context.Context, c client.WithWatch, ns string) (*seen, error) {
	s := &seen{ops: map[string]*[2]time.Time{}}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	ups, err := c.Watch(ctx, &nwv1.ReplicationUpgradeList{})
	if err != nil {
		return nil, err
	}
	defer ups.Stop()
	ops, err := c.Watch(ctx, &nwv1.NodeOperationList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	defer ops.Stop()
	u := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "bench-upgrade"},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{nodes[1]}, ReplicaCount: 2}}
	s.start = time.Now()
	if err := c.Create(ctx, u); err != nil {
		return nil, err
	}
	started := map[string]time.Time{}
	placed := int32(0)
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the upgrade did not end in time")
		case e := <-ops.ResultChan():
			op, ok := e.Object.(*nwv1.NodeOperation)
			if !ok || e.Type == watch.Deleted || op.Labels[replupgrade.LabelName] != u.Name {
				continue
			}
			now := time.Now()
			iv := s.ops[op.Name]
			if iv == nil {
				iv = &[2]time.Time{}
				s.ops[op.Name] = iv
			}
			if iv[0].IsZero() && op.Status.Phase != "" {
				iv[0] = now
			}
			if iv[1].IsZero() && (op.Status.Phase == nwv1.OperationSucceeded || op.Status.Phase == nwv1.OperationFailed) {
				iv[1] = now
			}
		case e := <-ups.ResultChan():
			got, ok := e.Object.(*nwv1.ReplicationUpgrade)
			if !ok || got.Name != u.Name {
				continue
			}
			now := time.Now()
			if v := got.Status.Volumes; v != nil && got.Status.Steps != nil && running(got, replupgrade.Place) {
				s.maxStep = max(s.maxStep, v.Placed-placed)
				placed = v.Placed
			}
			for _, st := range got.Status.Steps {
				if st.StartedAt != nil {
					if _, ok := started[st.Name]; !ok {
						started[st.Name] = now
					}
				}
				if (st.State == nwv1.StepSucceeded || st.State == nwv1.StepSkipped) && !done(s, st.Name) {
					s.stages = append(s.stages, stage{name: st.Name, took: now.Sub(started[st.Name])})
				}
			}
			if got.Status.Phase.Finished() {
				s.end = now
				if got.Status.Phase != nwv1.WorkflowSucceeded {
					return nil, fmt.Errorf("the upgrade ended %s: %+v", got.Status.Phase, got.Status.Steps)
				}
				return s, nil
			}
		}
	}
}

func running(u *nwv1.ReplicationUpgrade, step replupgrade.Step) bool {
	for _, st := range u.Status.Steps {
		if st.Name == string(step) {
			return st.State == nwv1.StepRunning || st.State == nwv1.StepSucceeded
		}
	}
	return false
}

func done(s *seen, name string) bool {
	for _, st := range s.stages {
		if st.name == name {
			return true
		}
	}
	return false
}
