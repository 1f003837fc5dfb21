package nodewrightcluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/controller/nodewrightcluster"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/operator"
)

// TestLegacyObjectsOutsideTheLegacyNamespaceAreNotRead runs the controller as the operator
// runs with --legacy-namespace: it reads legacy objects in that namespace only, through a
// cache that watches nothing else. A cluster naming another namespace (stored before the
// webhook could refuse it; this package runs none) gets a Warning Event naming the field and
// is not observed; once its spec names the legacy namespace, it is.
func TestLegacyObjectsOutsideTheLegacyNamespaceAreNotRead(t *testing.T) {
	f := bt.New(t, env, time.Minute) // the cluster names the fixture's namespace ...
	f.SetNodes(f.Node(1))
	f.Transition(legacy.SingleNodeReady)
	legacyNS := env.Namespace(t) // ... and the operator reads only this one.

	env.StartManagerWithCache(t, operator.CacheOptions(operator.Scope{Legacy: legacyNS}), func(ctx context.Context, mgr manager.Manager) error {
		return (&nodewrightcluster.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("nodewright-test"),
			LegacyNamespace: legacyNS}).SetupWithManager(ctx, mgr)
	})

	var msg string
	bt.Eventually(t, wait, func() string {
		var ok bool
		msg, ok = clusterEvent(t, f.Cluster.UID, nodewrightcluster.EventLegacyNotRead)
		if !ok {
			return fmt.Sprintf("no Warning Event %s on the cluster; Warning Events: %v", nodewrightcluster.EventLegacyNotRead, clusterEventReasons(t, f.Cluster.UID))
		}
		return ""
	})
	for _, want := range []string{"spec.legacy.configMapRef.namespace", fmt.Sprintf("%q", f.Namespace), fmt.Sprintf("namespace %q", legacyNS)} {
		if !strings.Contains(msg, want) {
			t.Errorf("the %s Event says %q; want it to name %s", nodewrightcluster.EventLegacyNotRead, msg, want)
		}
	}
	// The controller stopped there: nothing was observed in the namespace it does not read.
	if c := f.Status(); c.Status.LegacyState != "" || c.Status.ObservedGeneration != 0 || len(c.Status.Conditions) != 0 {
		t.Errorf("the cluster out of scope was observed: %+v", c.Status)
	}

	// The legacy objects move into the namespace the operator reads, and the spec follows.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: legacyNS, Name: bt.ConfigMapName}, Data: f.Data}
	ctx := context.Background()
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, c); err != nil {
			return err
		}
		c.Spec.Legacy.ConfigMapRef.Namespace, c.Spec.Legacy.DaemonSetRef.Namespace = legacyNS, legacyNS
		return env.Client.Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(f, phaseIs(nwv1.ClusterSingleNode, legacy.SingleNodeReady))
}

// clusterEvent is the message of a Warning Event with reason on the object with uid.
func clusterEvent(t *testing.T, uid types.UID, reason string) (string, bool) {
	t.Helper()
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events); err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == uid && ev.Type == corev1.EventTypeWarning && ev.Reason == reason {
			return ev.Message, true
		}
	}
	return "", false
}
