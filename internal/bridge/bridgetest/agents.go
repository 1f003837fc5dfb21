package bridgetest

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// Agents are node agents' heartbeats, each the agent's own (agent.Heartbeat, renewing the
// node's Lease as the kubelet's lease controller does), run in the test's process.
type Agents struct {
	t         testing.TB
	env       *testenv.Env
	Namespace string
	interval  time.Duration

	mu      sync.Mutex
	running map[string]context.CancelFunc
	done    sync.WaitGroup
}

// StartAgents creates namespace (unless it exists) and each Node (unless it exists; those it
// created are deleted when the test ends), and starts an agent heartbeat for each node,
// renewing its Lease every interval, until Stop or the end of the test. It returns once every
// Lease has been renewed.
func StartAgents(t testing.TB, env *testenv.Env, namespace string, interval time.Duration, nodes ...string) *Agents {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	a := &Agents{t: t, env: env, Namespace: namespace, interval: interval, running: map[string]context.CancelFunc{}}
	t.Cleanup(a.StopAll)
	for _, n := range nodes {
		CreateNode(t, env, n)
		a.Start(n)
	}
	return a
}

// CreateNode creates the Node name unless it exists, and deletes it when the test ends if it
// created it: other tests of a package may count on the Nodes they made.
func CreateNode(t testing.TB, env *testenv.Env, name string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	err := env.Client.Create(context.Background(), node)
	if apierrors.IsAlreadyExists(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
}

// Start starts node's heartbeat and waits until its Lease has been renewed.
func (a *Agents) Start(node string) {
	a.t.Helper()
	lite := a.env.LiteClient(a.t)
	ctx, cancel := context.WithCancel(context.Background())
	a.mu.Lock()
	if stop, ok := a.running[node]; ok {
		stop()
	}
	a.running[node] = cancel
	a.mu.Unlock()
	a.done.Add(1)
	go func() {
		defer a.done.Done()
		h := &agent.Heartbeat{Client: lite, Node: node, Namespace: a.Namespace, Interval: a.interval}
		_ = h.Run(ctx)
	}()
	started := time.Now()
	Eventually(a.t, 2*time.Minute, func() string {
		if renewed := a.Renewed(node); renewed.IsZero() || renewed.Before(started.Truncate(time.Second)) {
			return "the heartbeat Lease of " + node + " has not been renewed yet"
		}
		return ""
	})
}

// Stop stops node's heartbeat: its Lease stays as last renewed.
func (a *Agents) Stop(node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if stop, ok := a.running[node]; ok {
		stop()
		delete(a.running, node)
	}
}

// StopAll stops every heartbeat and waits until they have stopped.
func (a *Agents) StopAll() {
	a.mu.Lock()
	for n, stop := range a.running {
		stop()
		delete(a.running, n)
	}
	a.mu.Unlock()
	a.done.Wait()
}

// Renewed is when node's Lease was last renewed; zero when it has no Lease or no renewal.
func (a *Agents) Renewed(node string) time.Time {
	l := &coordinationv1.Lease{}
	if err := a.env.Client.Get(context.Background(), client.ObjectKey{Namespace: a.Namespace, Name: node}, l); err != nil || l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}
