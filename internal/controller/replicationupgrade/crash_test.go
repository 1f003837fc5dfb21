package replicationupgrade_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestCrashAtEveryStageBoundary kills the operator right after it recorded the start of each
// stage, forward and rollback (a verify mismatch makes the rollback), and once in the middle
// of a batch of replica creates, then starts a new one: each upgrade ends Succeeded with every
// volume replicated once, or RolledBack with LINSTOR holding what it held at the start.
func TestCrashAtEveryStageBoundary(t *testing.T) {
	type crash struct {
		step     replupgrade.Step
		rollback bool
		midBatch bool
	}
	var cases []crash
	for _, step := range (replupgrade.Plan{}).Forward() {
		cases = append(cases, crash{step: step})
	}
	for _, step := range (replupgrade.Plan{}).Rollback(replupgrade.Verify) {
		cases = append(cases, crash{step: step, rollback: true})
	}
	cases = append(cases, crash{step: replupgrade.Place, midBatch: true})
	for i, c := range cases {
		name := fmt.Sprintf("crash-%d-%s", i, strings.ToLower(string(c.step)))
		if c.midBatch {
			name += "-mid-batch"
		}
		t.Run(name, func(t *testing.T) {
			s := newSite(t, siteOptions{volumes: 6, mismatch: c.rollback}, fmt.Sprintf("upc%d-a", i), fmt.Sprintf("upc%d-b", i))
			kill := &killSwitch{after: 3}
			if c.midBatch {
				s.transport = kill.wrap
			}
			u := s.upgrade(name, nwv1.ReplicationUpgradeSpec{PeerNodes: []string{s.nodes[1]}, ReplicaCount: 2})
			at := testenv.NewCrash(func(w testenv.Write) bool {
				o, ok := w.Object.(*nwv1.ReplicationUpgrade)
				if !ok || w.SubResource != "status" || o.Name != name {
					return false
				}
				if c.midBatch {
					return kill.dead.Load()
				}
				return running(o, c.step)
			})
			env.RunUntilCrash(t, at, s.cacheOptions(), func(_ context.Context, mgr manager.Manager, cl client.Client, r client.Reader) error {
				return s.reconciler(mgr, cl, r).SetupWithManager(mgr)
			})
			if c.midBatch {
				if n := kill.creates.Load(); n <= kill.after {
					t.Fatalf("the operator died after %d creates, not in the middle of a batch", n)
				}
			}
			s.transport = nil
			s.startOperator()
			// The upgrade goes before the operator stops (its cleanup runs first).
			s.t.Cleanup(func() { s.deleted(u) })
			if c.rollback {
				s.ended(u, nwv1.WorkflowRolledBack)
				s.sameAsStart()
				return
			}
			s.ended(u, nwv1.WorkflowSucceeded)
			st := s.sim.State()
			if got, want := len(st.Resources), 2*len(s.volumes); got != want {
				t.Errorf("LINSTOR holds %d resources, want %d (every volume on both nodes, once)", got, want)
			}
			for _, def := range s.volumes {
				if r, ok := st.Resources[def+"/"+s.nodes[1]]; !ok || r.Diskless || r.Deleting {
					t.Errorf("%s on %s: %+v, %t; want a replica", def, s.nodes[1], r, ok)
				}
			}
		})
		if t.Failed() {
			return
		}
	}
}
