package cli

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// BenchmarkFleetList lists 3,500 summaries as kubectl nodewright fleet does, 500 at a time,
// and in one request: go test ./internal/cli -run '^$' -bench FleetList -benchtime 10x.
func BenchmarkFleetList(b *testing.B) {
	ctx := context.Background()
	if err := env.InstallCRDs(testenv.FleetCRDPaths(env.RepoRoot)...); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	storeMembers(b, 3500)
	b.Logf("3500 summaries stored in %s", time.Since(start).Round(time.Millisecond))
	b.Run("chunked", func(b *testing.B) {
		for b.Loop() {
			if list, err := listSummaries(ctx, env.Client); err != nil || len(list.Items) != 3500 {
				b.Fatalf("%v, %d", err, len(list.Items))
			}
		}
	})
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			list := &fleetv1alpha1.NodewrightClusterSummaryList{}
			if err := env.Client.List(ctx, list); err != nil || len(list.Items) != 3500 {
				b.Fatalf("%v, %d", err, len(list.Items))
			}
		}
	})
}

// storeMembers stores n summaries of healthy members with their status, 16 at a time, and
// deletes them all when the test ends.
func storeMembers(tb testing.TB, n int) {
	tb.Helper()
	ctx := context.Background()
	tb.Cleanup(func() {
		if err := env.Client.DeleteAllOf(context.Background(), &fleetv1alpha1.NodewrightClusterSummary{}); err != nil {
			tb.Errorf("deleting the summaries: %v", err)
		}
	})
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			s := &fleetv1alpha1.NodewrightClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("store-%04d", i)},
				Spec: fleetv1alpha1.NodewrightClusterSummarySpec{Registration: fleetv1alpha1.Registration{
					Source: fleetv1alpha1.FromKubeconfigSecret, Namespace: "nodewright-fleet", Name: fmt.Sprintf("store-%04d", i)}}}
			if err := env.Client.Create(ctx, s); err != nil {
				return err
			}
			s.Status = fleetv1alpha1.NodewrightClusterSummaryStatus{Phase: "SingleNode", Nodes: fleetv1alpha1.MemberNodes{Ready: 1, Total: 1},
				Management: "Managed", KubernetesVersion: "v1.34.2", NodewrightVersion: "0.9.0",
				Profile: &fleetv1alpha1.MemberProfile{Name: "edge-standard", Version: "1.2.0"},
				Boots:   &fleetv1alpha1.MemberBoots{KairosNodes: 1, Nodes: []fleetv1alpha1.MemberNodeBoot{{Name: "n1", Slot: "Active", Image: fleetImageB}}},
				Conditions: []metav1.Condition{{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionTrue,
					Reason: fleetv1alpha1.ReasonAnswering, Message: "checked", LastTransitionTime: metav1.Now()}}}
			return env.Client.Status().Update(ctx, s, &client.SubResourceUpdateOptions{})
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
}
