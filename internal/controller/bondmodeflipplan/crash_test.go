package bondmodeflipplan_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestCrashAtEveryStepBoundary kills the operator right after it recorded the start of each
// step of a two-node flip, forward and rollback, and starts a new one: each flip still ends
// Succeeded (or RolledBack), and no node's bond is changed more often than the flip needs.
// The flips of the table go back and forth between active-backup and 802.3ad on one site.
func TestCrashAtEveryStepBoundary(t *testing.T) {
	s := plantSite(t, false, nil, "flipcrash-a=primary", "flipcrash-b=secondary")
	plan, _ := bondflip.NewPlan(2)
	type crash struct {
		step     bondflip.Step
		rollback bool
	}
	var cases []crash
	for _, step := range plan.Forward() {
		cases = append(cases, crash{step: step})
	}
	// Node 2's port never carries the mode: node 1 is flipped back.
	for _, part := range []string{bondflip.RollbackProtectVMs, bondflip.RollbackBondMode, bondflip.RollbackVMs} {
		cases = append(cases, crash{step: bondflip.NodeStep(1, part), rollback: true})
	}
	modes := []nwv1.BondMode{nwv1.BondModeActiveBackup, nwv1.BondMode8023AD}
	current := nwv1.BondModeActiveBackup
	for i, c := range cases {
		target := modes[(indexOf(modes, current)+1)%2]
		name := fmt.Sprintf("crash-%d-%s", i, strings.ToLower(string(c.step)))
		t.Run(name, func(t *testing.T) {
			before := map[string]int{}
			for _, n := range s.nodes {
				before[n] = s.changes(n)
			}
			if c.rollback {
				s.net.NeverCarry("flipcrash-b", target)
				defer s.net.NeverCarry("flipcrash-b", "")
			}
			f := s.flipTo(name, target, nwv1.VMProtectionNone, "flipcrash-a", "flipcrash-b")
			crash := testenv.NewCrash(func(w testenv.Write) bool {
				o, ok := w.Object.(*nwv1.BondModeFlipPlan)
				return ok && w.SubResource == "status" && o.Name == name && running(o, c.step)
			})
			env.RunUntilCrash(t, crash, s.cacheOptions(), func(_ context.Context, mgr manager.Manager, cl client.Client, r client.Reader) error {
				return s.reconciler(mgr, cl, r).SetupWithManager(mgr)
			})
			stop := s.startOperator(nil)
			defer stop()
			want, wantChanges := nwv1.WorkflowSucceeded, map[string]int{"flipcrash-a": 1, "flipcrash-b": 1}
			if c.rollback {
				// Node 1 there and back; node 2 there and back by its own checkpoint.
				want, wantChanges = nwv1.WorkflowRolledBack, map[string]int{"flipcrash-a": 2, "flipcrash-b": 2}
			}
			s.ended(f, want)
			for _, n := range s.nodes {
				if got := s.changes(n) - before[n]; got != wantChanges[n] {
					t.Errorf("%s's bond changed %d times; want %d", n, got, wantChanges[n])
				}
			}
			if !c.rollback {
				current = target
			}
			for _, n := range s.nodes {
				if got := s.mode(n); got != current {
					t.Errorf("%s runs %s, want %s", n, got, current)
				}
			}
			if err := env.Client.Delete(context.Background(), f); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			testenv.Eventually(t, patience, func() string {
				if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), f); !apierrors.IsNotFound(err) {
					return "the flip is still there"
				}
				return ""
			})
		})
		if t.Failed() {
			return
		}
	}
}

func indexOf(modes []nwv1.BondMode, m nwv1.BondMode) int {
	for i, x := range modes {
		if x == m {
			return i
		}
	}
	return -1
}

// running reports whether the flip's status shows step running.
func running(f *nwv1.BondModeFlipPlan, step bondflip.Step) bool {
	for _, s := range f.Status.Steps {
		if s.Name == string(step) && s.State == nwv1.StepRunning {
			return true
		}
	}
	return false
}
