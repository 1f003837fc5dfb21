package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestSimulatedUpgradeOnTheLocalSite lets the demo's legacy DaemonSet simulator play its
// whole scenario (bootstrap, single- to multi-node upgrade, a lost peer, recovery) and
// expects the NodewrightCluster to pass through every phase, each node's status to appear, and
// the simulated DaemonSet's pods (run by kwok) to count as available.
func TestSimulatedUpgradeOnTheLocalSite(t *testing.T) {
	s := startSite(t)
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	w, err := c.Watch(ctx, &nwv1.NodewrightClusterList{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	want := []nwv1.ClusterPhase{nwv1.ClusterBootstrap, nwv1.ClusterSingleNode, nwv1.ClusterUpgrading,
		nwv1.ClusterMultiNode, nwv1.ClusterDegraded, nwv1.ClusterRecovering}
	var seen []nwv1.ClusterPhase
	for !containsAll(seen, want) {
		select {
		case ev := <-w.ResultChan():
			if nwc, ok := ev.Object.(*nwv1.NodewrightCluster); ok && (len(seen) == 0 || seen[len(seen)-1] != nwc.Status.Phase) {
				seen = append(seen, nwc.Status.Phase)
			}
		case <-ctx.Done():
			t.Fatalf("phases seen: %v; want each of %v", seen, want)
		}
	}
	t.Logf("phases: %v", seen)

	// The scenario loops, with peers leaving and joining: each node has its status at some point.
	for _, n := range []string{"edge-1", "edge-2", "edge-3"} {
		deadline := time.Now().Add(patience)
		for {
			role := s.kubectlOut(t, "get", "nodewrightagentstatus", n, "--ignore-not-found", "-o", "jsonpath={.status.role}")
			if role != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no NodewrightAgentStatus with a role for %s within %s", n, patience)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if ds := s.kubectlOut(t, "get", "nodewrightcluster", "nodewright", "-o",
		`jsonpath={.status.conditions[?(@.type=="DaemonSetAvailable")].status}`); ds != "True" {
		t.Errorf("DaemonSetAvailable = %q; the simulated DaemonSet's pods should be ready on the kwok nodes", ds)
	}
}

func containsAll(seen, want []nwv1.ClusterPhase) bool {
	for _, p := range want {
		if !slices.Contains(seen, p) {
			return false
		}
	}
	return true
}

func (s *site) client(t *testing.T) client.WithWatch {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := nwv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(fmt.Errorf("client for the local site: %w", err))
	}
	return c
}
