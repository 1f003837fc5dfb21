// Package bridgetest sets up the legacy DaemonSet's objects and the NodewrightCluster for the
// observation bridge's integration tests against a real API server.
package bridgetest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// Fixture is a legacy namespace with its state ConfigMap, and the NodewrightCluster observing
// it. Node names carry the test's namespace so that the cluster-scoped
// NodewrightAgentStatus objects of different tests never collide.
type Fixture struct {
	T          testing.TB
	Env        *testenv.Env
	Namespace  string
	Cluster    *nwv1.NodewrightCluster
	Data       map[string]string
	generation int64
	state      legacy.State
}

// ConfigMapName and the other legacy names the fixture uses.
const (
	ConfigMapName = "node-init-state"
	DaemonSetName = "node-init"
	Component     = "node-init"
)

// New creates the namespace and the NodewrightCluster (with the given staleness threshold),
// and removes the cluster and every NodewrightAgentStatus when the test ends: envtest runs no
// garbage collector.
func New(t testing.TB, env *testenv.Env, staleAfter time.Duration) *Fixture {
	t.Helper()
	f := &Fixture{T: t, Env: env, Namespace: env.Namespace(t), Data: map[string]string{}}
	f.Cluster = &nwv1.NodewrightCluster{
		ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{
			Legacy: nwv1.LegacySource{
				ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: f.Namespace, Name: ConfigMapName},
				DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: f.Namespace, Name: DaemonSetName},
				EventComponent: Component,
			},
			HeartbeatStaleAfter: metav1.Duration{Duration: staleAfter},
		},
	}
	ctx := context.Background()
	if err := env.Client.Create(ctx, f.Cluster); err != nil {
		t.Fatalf("creating the NodewrightCluster: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName}})
		_ = env.Client.DeleteAllOf(ctx, &nwv1.NodewrightAgentStatus{})
		Eventually(t, 2*time.Minute, func() string {
			err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, &nwv1.NodewrightCluster{})
			if apierrors.IsNotFound(err) {
				return ""
			}
			return "the NodewrightCluster is still there"
		})
	})
	return f
}

// Node is the fixture's name for node i, unique to the test.
func (f *Fixture) Node(i int) string { return f.Namespace + "-n" + strconv.Itoa(i) }

// Transition moves the legacy machine to state, as the DaemonSet would: previousState,
// stateSince and generation+1 in one write.
func (f *Fixture) Transition(state legacy.State) {
	f.T.Helper()
	f.JumpTo(state, 1)
}

// JumpTo is Transition with the generation moved by step (a step above one means missed
// transitions).
func (f *Fixture) JumpTo(state legacy.State, step int64) {
	f.T.Helper()
	f.Data[legacy.KeyPreviousState] = string(f.state)
	f.Data[legacy.KeyState] = string(state)
	f.Data[legacy.KeyStateSince] = time.Now().UTC().Format(time.RFC3339)
	f.generation += step
	f.Data[legacy.KeyGeneration] = strconv.FormatInt(f.generation, 10)
	f.state = state
	f.Write()
}

// SetNodes sets the managed nodes, each with a fresh heartbeat, healthy DRBD and a role
// (the first is primary).
func (f *Fixture) SetNodes(names ...string) {
	f.T.Helper()
	for key := range f.Data {
		if strings.HasPrefix(key, "node.") {
			delete(f.Data, key)
		}
	}
	f.Data[legacy.KeyNodes] = strings.Join(names, ",")
	now := time.Now().UTC().Format(time.RFC3339)
	for i, n := range names {
		role := "secondary"
		if i == 0 {
			role = "primary"
		}
		f.Data[legacy.NodeKey(n, legacy.FieldHeartbeat)] = now
		f.Data[legacy.NodeKey(n, legacy.FieldRole)] = role
		f.Data[legacy.NodeKey(n, legacy.FieldDRBD)] = `{"resources":2,"connected":2,"upToDate":2,"outOfSyncKiB":0}`
		f.Data[legacy.NodeKey(n, legacy.FieldBondMode)] = "802.3ad"
	}
	f.Write()
}

// Heartbeat refreshes the named nodes' heartbeats to now, as their pods do every 10 s.
func (f *Fixture) Heartbeat(names ...string) {
	f.T.Helper()
	now := time.Now().UTC().Format(time.RFC3339)
	for _, n := range names {
		f.Data[legacy.NodeKey(n, legacy.FieldHeartbeat)] = now
	}
	f.Write()
}

// Write creates or updates the ConfigMap with Data.
func (f *Fixture) Write() {
	f.T.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: ConfigMapName}}
	data := make(map[string]string, len(f.Data))
	for k, v := range f.Data {
		data[k] = v
	}
	err := f.Env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	switch {
	case apierrors.IsNotFound(err):
		cm.Data = data
		err = f.Env.Client.Create(ctx, cm)
	case err == nil:
		cm.Data = data
		err = f.Env.Client.Update(ctx, cm)
	}
	if err != nil {
		f.T.Fatalf("writing the legacy ConfigMap: %v", err)
	}
}

// DeleteConfigMap removes the legacy ConfigMap.
func (f *Fixture) DeleteConfigMap() {
	f.T.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: ConfigMapName}}
	if err := f.Env.Client.Delete(context.Background(), cm); err != nil {
		f.T.Fatalf("deleting the legacy ConfigMap: %v", err)
	}
}

// Status reads the NodewrightCluster.
func (f *Fixture) Status() *nwv1.NodewrightCluster {
	f.T.Helper()
	nwc := &nwv1.NodewrightCluster{}
	if err := f.Env.Client.Get(context.Background(), client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc); err != nil {
		f.T.Fatalf("reading the NodewrightCluster: %v", err)
	}
	return nwc
}

// EventuallyFresh is Eventually while the named nodes' heartbeats are kept fresh: refreshed
// every half second, as their pods would refresh them every 10 s against a threshold of a
// minute. With a threshold of a few seconds, a check that wants them fresh would otherwise
// depend on how soon a busy machine's controller reads the last heartbeat. Once it returns,
// nothing refreshes them any more.
func (f *Fixture) EventuallyFresh(timeout time.Duration, check func() string, names ...string) {
	f.T.Helper()
	var refreshed time.Time
	Eventually(f.T, timeout, func() string {
		if time.Since(refreshed) >= 500*time.Millisecond {
			f.Heartbeat(names...)
			refreshed = time.Now()
		}
		return check()
	})
}

// Eventually polls check until it returns "" or the timeout passes, then fails with the last
// thing it said.
func Eventually(t testing.TB, timeout time.Duration, check func() string) {
	t.Helper()
	testenv.Eventually(t, timeout, check)
}

// CountEvents counts the events a record.FakeRecorder has received so far with the given
// type and reason, draining its channel into seen.
func CountEvents(events <-chan string, seen *[]string, eventType, reason string) int {
	for {
		select {
		case e := <-events:
			*seen = append(*seen, e)
			continue
		default:
		}
		break
	}
	n := 0
	for _, e := range *seen {
		if strings.HasPrefix(e, eventType+" "+reason+" ") {
			n++
		}
	}
	return n
}
