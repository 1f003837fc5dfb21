package bondmodeflipplan_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestCrashAtEveryStepAndPartBoundary kills the operator right after it recorded the start of
// each step of a two-node flip, and of each part of a node's step after its first (the write
// that ends one part begins the next), forward and rollback, and starts a new one: each flip
// still ends Succeeded (or RolledBack), and no node's bond is changed more often than the flip
// needs. The flips of the table go back and forth between active-backup and 802.3ad on one
// site.
func TestCrashAtEveryStepAndPartBoundary(t *testing.T) {
	s := plantSite(t, false, nil, "flipcrash-a=primary", "flipcrash-b=secondary")
	plan, _ := bondflip.NewPlan(2)
	type crash struct {
		step bondflip.Step
		// part, when set, is the part of the step whose start is the crash point.
		part     string
		rollback bool
	}
	var cases []crash
	for _, step := range plan.Forward() {
		cases = append(cases, crash{step: step})
		if step == bondflip.Preflight {
			continue
		}
		for _, part := range bondflip.NodeParts[1:] {
			cases = append(cases, crash{step: step, part: part})
		}
	}
	// Node 2's port never carries the mode: its SetBondMode fails, node 2 is brought back
	// (its mode, by its own checkpoint, and its VMs), then node 1 is flipped back.
	for _, back := range []struct {
		k     int
		parts []string
	}{{2, bondflip.UndoParts(bondflip.SetBondMode)}, {1, bondflip.UndoParts("")}} {
		cases = append(cases, crash{step: bondflip.RollbackStep(back.k), rollback: true})
		for _, part := range back.parts[1:] {
			cases = append(cases, crash{step: bondflip.RollbackStep(back.k), part: part, rollback: true})
		}
	}
	if len(cases) != 25 {
		t.Fatalf("%d crash points; want 25: the Preflight, two nodes' steps and seven parts each after the first, "+
			"node 2's rollback and its second and third parts, node 1's and its second to fifth", len(cases))
	}
	modes := []nwv1.BondMode{nwv1.BondModeActiveBackup, nwv1.BondMode8023AD}
	current := nwv1.BondModeActiveBackup
	for i, c := range cases {
		target := modes[(indexOf(modes, current)+1)%2]
		name := fmt.Sprintf("crash-%d-%s", i, strings.ToLower(string(c.step)+c.part))
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
				return ok && w.SubResource == "status" && o.Name == name && running(o, c.step, c.part)
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

// running reports whether the flip's status shows step running, and, with a part, the record
// of the step's node that part under way.
func running(f *nwv1.BondModeFlipPlan, step bondflip.Step, part string) bool {
	k, _, _ := bondflip.ParseStep(step)
	for _, s := range f.Status.Steps {
		if s.Name != string(step) || s.State != nwv1.StepRunning {
			continue
		}
		if part == "" {
			return true
		}
		for _, n := range f.Status.Nodes {
			if int(n.Position) == k && slices.ContainsFunc(n.Parts, func(p nwv1.NodeFlipPart) bool {
				return p.Name == part && p.State == nwv1.StepRunning
			}) {
				return true
			}
		}
	}
	return false
}

// TestACrashRightAfterACordonWrite kills the operator right after it wrote a Node's cordon or
// uncordon, before the status could record it, and starts a new one: the Node is the record,
// so each flip ends with every node schedulable and unannotated, as before it. Killed after the
// cordon of node 1, the flip carries on and succeeds; after the uncordon of node 1, the same;
// after the cordon of node 2, with the flip deleted while no operator runs, the rollback finds
// node 2's cordon on the Node (its Cordon part recorded under way, nothing else) and removes it,
// and node 1 is flipped back.
func TestACrashRightAfterACordonWrite(t *testing.T) {
	s := plantSite(t, false, nil, "cordoncrash-a=primary", "cordoncrash-b=secondary")
	current := nwv1.BondModeActiveBackup
	for i, c := range []struct {
		name, node    string
		unschedulable bool
		// deleted: the flip is deleted while no operator runs.
		deleted bool
	}{
		{"after-cordon-n1", "cordoncrash-a", true, false},
		{"after-uncordon-n1", "cordoncrash-a", false, false},
		{"after-cordon-n2-deleted", "cordoncrash-b", true, true},
	} {
		target := nwv1.BondMode8023AD
		if current == target {
			target = nwv1.BondModeActiveBackup
		}
		name := fmt.Sprintf("cordoncrash-%d-%s", i, c.name)
		t.Run(c.name, func(t *testing.T) {
			before := map[string]int{}
			for _, n := range s.nodes {
				before[n] = s.changes(n)
				s.reported(n, current)
			}
			f := s.flipTo(name, target, nwv1.VMProtectionNone, "cordoncrash-a", "cordoncrash-b")
			crash := testenv.NewCrash(func(w testenv.Write) bool {
				n, ok := w.Object.(*corev1.Node)
				return ok && n.Name == c.node && n.Spec.Unschedulable == c.unschedulable
			})
			env.RunUntilCrash(t, crash, s.cacheOptions(), func(_ context.Context, mgr manager.Manager, cl client.Client, r client.Reader) error {
				return s.reconciler(mgr, cl, r).SetupWithManager(mgr)
			})
			if c.unschedulable {
				if got, want := cordonOf(t, c.node), "cordoned by "+bondflip.CordonedBy(name); got != want {
					t.Fatalf("at the crash %s is %s; want %s", c.node, got, want)
				}
			}
			if c.deleted {
				if err := env.Client.Delete(context.Background(), f); err != nil {
					t.Fatal(err)
				}
			}
			stop := s.startOperator(nil)
			defer stop()
			gone := func() {
				testenv.Eventually(t, patience, func() string {
					if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), f); !apierrors.IsNotFound(err) {
						return fmt.Sprintf("the deleted flip is still there: phase %s; steps %s", f.Status.Phase, steps(f))
					}
					return ""
				})
			}
			wantChanges := map[string]int{"cordoncrash-a": 1, "cordoncrash-b": 1}
			if c.deleted {
				gone()
				wantChanges = map[string]int{"cordoncrash-a": 2, "cordoncrash-b": 0}
			} else {
				f = s.ended(f, nwv1.WorkflowSucceeded)
				if f.Status.Nodes[0].Cordon != nwv1.NodeUncordoned || partMessage(f, 1, bondflip.Cordon) != "cordoned cordoncrash-a" ||
					partMessage(f, 1, bondflip.Uncordon) != "uncordoned cordoncrash-a" {
					t.Errorf("node 1: cordon %q, Cordon %q, Uncordon %q", f.Status.Nodes[0].Cordon, partMessage(f, 1, bondflip.Cordon), partMessage(f, 1, bondflip.Uncordon))
				}
				current = target
				if err := env.Client.Delete(context.Background(), f); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				gone()
			}
			for _, n := range s.nodes {
				if got := cordonOf(t, n); got != "schedulable" {
					t.Errorf("%s is %s; want schedulable, unannotated, as before the flip", n, got)
				}
				if got := s.changes(n) - before[n]; got != wantChanges[n] {
					t.Errorf("%s's bond changed %d times; want %d", n, got, wantChanges[n])
				}
				if got := s.mode(n); got != current {
					t.Errorf("%s runs %s, want %s", n, got, current)
				}
			}
		})
		if t.Failed() {
			return
		}
	}
}
