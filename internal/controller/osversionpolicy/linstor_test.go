package osversionpolicy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/linstorgate/linstorgatetest"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

// TestTheSoakWaitsForTheLINSTORSatellite: three Kairos nodes, each a satellite of the played
// LINSTOR (test/site/linstorsim), which the operator reads through the LINSTOR gate. A
// policy whose Preflight finds a satellite OFFLINE stops there, RolledBack. The next one's
// Preflight finds every satellite ONLINE; then, while the first node's step waits for its
// approval (so that the test does not race the played boot), the first two go OFFLINE. The
// first node's soak waits, naming its satellite, until it is ONLINE again within the reboot
// timeout, and passes; the second's stays OFFLINE: its soak fails at the reboot timeout naming
// the satellite, the policy stops Failed, and the third node is untouched.
func TestTheSoakWaitsForTheLINSTORSatellite(t *testing.T) {
	s := plant(t, false, "oslin-1", "oslin-2", "oslin-3")
	sim := linstorsim.Start(t, linstorsim.Options{TLS: true})
	for _, n := range s.nodes {
		if err := sim.AddNode(linstorsim.Node{Name: n, Address: s.net.Node(n).Address}); err != nil {
			t.Fatal(err)
		}
	}
	gate := linstorgatetest.Start(t, env, linstorgatetest.Options{URL: sim.URL, ClientSecret: sim.ClientSecret()})
	s.startOperatorWithLINSTOR(gate.Config())
	untouched := s.booted("oslin-3")

	// A satellite OFFLINE at the Preflight stops the policy before anything changes.
	if err := sim.SetOnline("oslin-3", false); err != nil {
		t.Fatal(err)
	}
	pre := s.ended(s.policy("oslin-pre", newVersion, soakFor, time.Minute), nwv1.WorkflowRolledBack)
	if want := "LINSTOR satellite oslin-3 OFFLINE; every node's LINSTOR satellite must be ONLINE before an upgrade starts"; !strings.Contains(steps(pre), want) {
		t.Errorf("the Preflight does not say %q: %s", want, steps(pre))
	}
	for _, n := range pre.Status.Nodes {
		if len(n.Parts) > 0 {
			t.Errorf("%s was touched by a policy whose Preflight failed: %+v", n.Name, n.Parts)
		}
	}
	deleted(t, pre)
	if err := sim.SetOnline("oslin-3", true); err != nil {
		t.Fatal(err)
	}

	p := s.policyWith("oslin", newVersion, soakFor, time.Minute, func(p *nwv1.OSVersionPolicy) {
		p.Spec.Approval = nwv1.ApprovalManual
	}, "oslin-1", "oslin-2", "oslin-3")
	held(t, p, nwv1.ReasonAwaitingApproval, "Node1")
	for _, n := range []string{"oslin-1", "oslin-2"} {
		if err := sim.SetOnline(n, false); err != nil {
			t.Fatal(err)
		}
	}
	approve(t, p, "Node1")
	s.step(p, "Node1", func(st nwv1.WorkflowStep) string {
		if st.State == nwv1.StepSucceeded || st.State == nwv1.StepFailed {
			t.Fatalf("Node1 ended %s while oslin-1's satellite is OFFLINE: %s", st.State, st.Message)
		}
		if want := "waiting for oslin-1's health to be green before its soak"; !strings.Contains(st.Message, want) || !strings.Contains(st.Message, "LINSTOR satellite oslin-1 OFFLINE") {
			return fmt.Sprintf("Node1 is %s (%s); want it waiting, naming the satellite", st.State, st.Message)
		}
		return ""
	})
	if err := sim.SetOnline("oslin-1", true); err != nil {
		t.Fatal(err)
	}
	held(t, p, nwv1.ReasonAwaitingApproval, "Node2")
	approve(t, p, "Node2")

	p = s.ended(p, nwv1.WorkflowFailed)
	first, second, third := p.Status.Nodes[0], p.Status.Nodes[1], p.Status.Nodes[2]
	if first.Phase != nwv1.NodeOSDone || first.HealthyAt == nil {
		t.Errorf("oslin-1: %s, healthy %v; want Done once its satellite was back", first.Phase, first.HealthyAt)
	}
	if soak := part(first, "Soak"); soak == nil || soak.State != nwv1.StepSucceeded {
		t.Errorf("oslin-1's soak: %+v; want it passed", soak)
	}
	if second.Phase != nwv1.NodeOSFailed || second.VerifiedAt == nil {
		t.Errorf("oslin-2: %s, verified %v; want Failed after it was proven booted", second.Phase, second.VerifiedAt)
	}
	if soak := part(second, "Soak"); soak == nil || soak.State != nwv1.StepFailed ||
		!strings.Contains(soak.Message, "not green within 1m0s") || !strings.Contains(soak.Message, "LINSTOR satellite oslin-2 OFFLINE") {
		t.Errorf("oslin-2's soak: %+v; want it failed at the reboot timeout, naming the satellite OFFLINE", soak)
	}
	if got := s.booted("oslin-2"); got.image != repository(s.images[newVersion]) {
		t.Errorf("oslin-2 runs %+v; want the new image (its boot worked; its satellite did not come back)", got)
	}
	if got := s.booted("oslin-3"); got != untouched || third.Phase != nwv1.NodeOSPending {
		t.Errorf("oslin-3 was touched: %+v (%s)", got, third.Phase)
	}
	if cordoned, by := unschedulable(t, "oslin-3"); cordoned {
		t.Errorf("oslin-3 is cordoned (%q)", by)
	}
	if strings.Contains(steps(p), "not checked") {
		t.Errorf("the Preflight says the satellites are not checked, with a LINSTOR gate: %s", steps(p))
	}
}

// approve approves the policy's step, as kubectl nodewright approve does.
func approve(t *testing.T, p *nwv1.OSVersionPolicy, step string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &nwv1.OSVersionPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[nwv1.AnnotationApprove] = step
		cur.Annotations[nwv1.AnnotationApprovedBy] = "alice"
		return env.Client.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startOperatorWithLINSTOR is startOperator, the controller reading LINSTOR through cfg.
func (s *site) startOperatorWithLINSTOR(cfg linstor.Config) {
	asOperator := env.AsOperatorUnderPolicies(s.t, "nodewright-system")
	env.StartManagerAsWithCache(s.t, asOperator, s.cacheOptions(), func(_ context.Context, mgr manager.Manager) error {
		r := s.reconciler(mgr, mgr.GetClient(), nil)
		r.LINSTOR = cfg
		return r.SetupWithManager(mgr)
	})
}

// step waits until check finds the policy's step name as it wants ("" when it does).
func (s *site) step(p *nwv1.OSVersionPolicy, name string, check func(nwv1.WorkflowStep) string) {
	s.t.Helper()
	testenv.Eventually(s.t, patience, func() string {
		cur := &nwv1.OSVersionPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), cur); err != nil {
			return err.Error()
		}
		for _, st := range cur.Status.Steps {
			if st.Name == name {
				return check(st)
			}
		}
		return fmt.Sprintf("no step %s yet (phase %s)", name, cur.Status.Phase)
	})
}
