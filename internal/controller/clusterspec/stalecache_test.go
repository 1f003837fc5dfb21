package clusterspec_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/clusterspec"
)

// staleCache plays the manager's cache in front of the real API server: it answers reads of
// the NodewrightCluster with what it last saw, as an informer does before a watch event
// arrives. Everything else, and every write, goes to the API server.
type staleCache struct {
	cluster *nwv1.NodewrightCluster // nil: the cache has seen no cluster
	lagging bool                    // false: the cache is up to date
}

func (s *staleCache) client(t *testing.T) client.Client {
	t.Helper()
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			nwc, ok := obj.(*nwv1.NodewrightCluster)
			if !ok || !s.lagging {
				return c.Get(ctx, key, obj, opts...)
			}
			if s.cluster == nil {
				return apierrors.NewNotFound(schema.GroupResource{Group: nwv1.GroupVersion.Group, Resource: "nodewrightclusters"}, key.Name)
			}
			s.cluster.DeepCopyInto(nwc)
			return nil
		},
	})
}

// TestACreationTheCacheHasNotSeenIsAnnouncedOnce: the reconcile that follows a deletion
// can read a cache that still holds the deleted cluster, and its apply creates the cluster
// again. That creation is announced all the same; a later reconcile, whatever its cache
// holds, does not announce the same cluster twice.
func TestACreationTheCacheHasNotSeenIsAnnouncedOnce(t *testing.T) {
	key := types.NamespacedName{Namespace: env.Namespace(t), Name: "cluster-spec"}
	deleteCluster(t)
	t.Cleanup(func() { deleteCluster(t) })
	var recorder record.EventRecorder
	env.StartManager(t, func(_ context.Context, mgr manager.Manager) error {
		recorder = mgr.GetEventRecorderFor("test")
		return nil
	})
	cache := &staleCache{}
	r := &clusterspec.Reconciler{Client: cache.client(t), Recorder: recorder, ConfigMap: key}
	cm := write(t, key, validSpec)
	reconcile := func() {
		t.Helper()
		// A refusal is retried later; here it would only leave the test waiting.
		if res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil || res.RequeueAfter != 0 {
			t.Fatalf("reconcile: %+v, %v; Warning Events: %+v", res, err, events(t, cm, corev1.EventTypeWarning, clusterspec.EventInvalid))
		}
	}

	reconcile()
	first := specIs(t, parsedSpec)

	if err := env.Client.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() string {
		if cluster(t) != nil {
			return "the NodewrightCluster is still there"
		}
		return ""
	})
	cache.cluster, cache.lagging = first, true
	reconcile()
	second := cluster(t)
	if second == nil || second.UID == first.UID {
		t.Fatalf("the reconcile did not create the cluster again: %+v", second)
	}
	flushEvents(t, recorder, cm, "the creation")
	if n := appliedCount(t, cm); n != 2 {
		t.Errorf("%d Normal %s Events on the ConfigMap after the reconcile that created the cluster again, want 2: one per creation", n, clusterspec.EventApplied)
	}

	// The same cluster, seen by a cache that has caught up, and by one that has only seen
	// the deletion: neither is a creation.
	cache.lagging = false
	reconcile()
	cache.cluster, cache.lagging = nil, true
	reconcile()
	flushEvents(t, recorder, cm, "the reconciles that follow")
	if n := appliedCount(t, cm); n != 2 {
		t.Errorf("%d Normal %s Events on the ConfigMap after reconciles that created nothing, want still 2", n, clusterspec.EventApplied)
	}
}

// flushEvents waits until every Event recorder was given before it is in the API server: the
// recorder writes them one at a time, in order, so once a marker Event recorded last is there,
// so are the others. after names the marker; a marker with a message of its own is an Event
// object of its own, not a repeat merged into an earlier one.
func flushEvents(t *testing.T, recorder record.EventRecorder, cm *corev1.ConfigMap, after string) {
	t.Helper()
	const reason = "TestMarker"
	message := "every Event before this one is written: " + after
	recorder.Event(cm, corev1.EventTypeNormal, reason, message)
	eventually(t, func() string {
		for _, ev := range events(t, cm, corev1.EventTypeNormal, reason) {
			if ev.Message == message {
				return ""
			}
		}
		return fmt.Sprintf("the recorder has not written the %s Event %q", reason, message)
	})
}
