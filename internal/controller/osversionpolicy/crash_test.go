package osversionpolicy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// TestCrashAtEveryStepAndPartBoundary kills the operator right after it recorded the start of
// each step of a one-node policy, and of each part of the node's step after its first (the
// write that ends one part begins the next), and starts a new one: each policy still ends
// Succeeded with the node proven on its image, and the node is rebooted exactly once for it.
// the policies of the table go back and forth between the two images.
func TestCrashAtEveryStepAndPartBoundary(t *testing.T) {
	s := plant(t, false, "oscrash-1")
	plan, _ := osupgrade.NewPlan(1, false)
	type crash struct {
		step osupgrade.Step
		part string
	}
	var cases []crash
	for _, step := range plan.Forward() {
		cases = append(cases, crash{step: step})
		if step == osupgrade.Preflight {
			continue
		}
		for _, part := range osupgrade.NodeParts[1:] {
			cases = append(cases, crash{step: step, part: part})
		}
	}
	if len(cases) != 10 {
		t.Fatalf("%d crash points; want 10: the Preflight, the node's step and its eight parts after the first", len(cases))
	}
	sup := siteagent.Supervised(s.agents["oscrash-1"])
	current := oldVersion
	for i, c := range cases {
		target := newVersion
		if current == newVersion {
			target = oldVersion
		}
		name := fmt.Sprintf("oscrash-%d-%s", i, strings.ToLower(string(c.step)+c.part))
		t.Run(name, func(t *testing.T) {
			boots := len(sup.Boots())
			p := s.policy(name, target, soakFor, 2*time.Minute)
			crash := testenv.NewCrash(func(w testenv.Write) bool {
				o, ok := w.Object.(*nwv1.OSVersionPolicy)
				return ok && w.SubResource == "status" && o.Name == name && running(o, c.step, c.part)
			})
			env.RunUntilCrash(t, crash, s.cacheOptions(), func(_ context.Context, mgr manager.Manager, cl client.Client, r client.Reader) error {
				return s.reconciler(mgr, cl, r).SetupWithManager(mgr)
			})
			stop := s.startOperator()
			defer stop()
			s.ended(p, nwv1.WorkflowSucceeded)
			if got := len(sup.Boots()) - boots; got != 1 {
				t.Errorf("the node booted %d times for the policy; want once", got)
			}
			if got := s.booted("oscrash-1"); got.image != repository(s.images[target]) || got.entry != "active" {
				t.Errorf("the node runs %+v; want %s from its active slot", got, target)
			}
			current = target
			deleted(t, p)
		})
		if t.Failed() {
			return
		}
	}
}

// running reports whether the policy's status shows step running, and, with a part, the
// record of the step's node that part under way.
func running(p *nwv1.OSVersionPolicy, step osupgrade.Step, part string) bool {
	k, _ := osupgrade.ParseStep(step)
	for _, s := range p.Status.Steps {
		if s.Name != string(step) || s.State != nwv1.StepRunning {
			continue
		}
		if part == "" {
			return true
		}
		for _, n := range p.Status.Nodes {
			if int(n.Position) == k && slices.ContainsFunc(n.Parts, func(x nwv1.OSUpgradePart) bool {
				return x.Name == part && x.State == nwv1.StepRunning
			}) {
				return true
			}
		}
	}
	return false
}
