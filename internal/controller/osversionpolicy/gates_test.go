package osversionpolicy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// TestTheGatesHoldANodeBeforeItIsTouched: on one Kairos node, a policy waits, with the node
// untouched (not cordoned, nothing asked of its agent, the same boot), while a flip holds the
// cluster-wide claim, outside its maintenance window, until a person approves the node's step,
// and while the node is held; once the flip is gone, and once approved, it upgrades the node.
func TestTheGatesHoldANodeBeforeItIsTouched(t *testing.T) {
	s := plant(t, true, "osgate-1")
	ctx := context.Background()
	untouched := func(t *testing.T, p *nwv1.OSVersionPolicy) {
		t.Helper()
		if cordoned, by := unschedulable(t, "osgate-1"); cordoned {
			t.Errorf("osgate-1 is cordoned (%q) while the policy is held", by)
		}
		var ops nwv1.NodeOperationList
		if err := env.Client.List(ctx, &ops, client.InNamespace(s.ns)); err != nil {
			t.Fatal(err)
		}
		for _, op := range ops.Items {
			if op.Labels["nodewright.spectrocloud.com/osversionpolicy"] == p.Name {
				t.Errorf("the policy asked %s of the agent while held", op.Name)
			}
		}
	}
	// version is what the node runs; other the image a policy moves it to.
	version := oldVersion
	other := func() string {
		if version == oldVersion {
			return newVersion
		}
		return oldVersion
	}

	t.Run("the claim of a flip", func(t *testing.T) {
		flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "osgate-flip"}, Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD}}
		if err := env.Client.Create(ctx, flip); err != nil {
			t.Fatal(err)
		}
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.lockNS, Name: engine.LockName},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(fmt.Sprintf("BondModeFlipPlan/%s/%s", flip.Name, flip.UID))}}
		if err := env.Client.Create(ctx, lease); err != nil {
			t.Fatal(err)
		}
		p := s.policy("osgate-claim", other(), soakFor, 2*time.Minute)
		held(t, p, nwv1.ReasonAnotherWorkflowRunning, "osgate-flip")
		untouched(t, p)
		if err := env.Client.Delete(ctx, flip); err != nil {
			t.Fatal(err)
		}
		s.ended(p, nwv1.WorkflowSucceeded)
		version = other()
		deleted(t, p)
	})

	t.Run("the maintenance window", func(t *testing.T) {
		// A window of an hour that opens twelve hours from now.
		start := time.Now().UTC().Add(12 * time.Hour)
		p := s.policyWith("osgate-window", other(), soakFor, 2*time.Minute, func(p *nwv1.OSVersionPolicy) {
			p.Spec.MaintenanceWindow = &nwv1.MaintenanceWindow{Start: start.Format("15:04"), End: start.Add(time.Hour).Format("15:04"), TimeZone: "UTC"}
		})
		held(t, p, nwv1.ReasonOutsideWindow, "")
		untouched(t, p)
		deleted(t, p)
	})

	t.Run("manual approval", func(t *testing.T) {
		p := s.policyWith("osgate-approval", other(), soakFor, 2*time.Minute, func(p *nwv1.OSVersionPolicy) {
			p.Spec.Approval = nwv1.ApprovalManual
		})
		held(t, p, nwv1.ReasonAwaitingApproval, "Node1")
		untouched(t, p)
		approve(t, p, "Node1")
		p = s.ended(p, nwv1.WorkflowSucceeded)
		version = other()
		if got := s.booted("osgate-1"); got.image != repository(s.images[version]) {
			t.Errorf("osgate-1 runs %+v after the approval; want %s", got, version)
		}
		deleted(t, p)
	})

	t.Run("a node that fell back", func(t *testing.T) {
		// The BootRecoveryPolicy's status as its controller writes it
		// (internal/controller/bootrecoverypolicy proves that): a node fell back and is pinned.
		brp := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}}
		if err := env.Client.Create(ctx, brp); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = env.Client.Delete(ctx, brp) }()
		pin := func(node string, acknowledged bool) {
			t.Helper()
			rec := nwv1.NodeBootRecord{Name: node, BootEntry: nwv1.KairosBootPassive, BootID: node + "-b2", Image: repository(s.images[version]),
				LastFallback: &nwv1.KairosFallback{FromImage: s.images[other()], ToImage: repository(s.images[version]), BootID: node + "-b2", SeenAt: metav1.Now()}}
			if acknowledged {
				rec.Acknowledged = &nwv1.FallbackAcknowledgement{BootID: node + "-b2", By: "alice", At: metav1.Now()}
			} else {
				rec.PinnedImage = rec.Image
			}
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(brp), brp); err != nil {
					return err
				}
				brp.Status.Nodes = []nwv1.NodeBootRecord{rec}
				return env.Client.Status().Update(ctx, brp)
			})
			if err != nil {
				t.Fatal(err)
			}
		}

		// The node itself is pinned: the policy holds it, saying why and how to let it go.
		pin("osgate-1", false)
		p := s.policy("osgate-pinned", other(), soakFor, 2*time.Minute)
		p = s.ended(p, nwv1.WorkflowRolledBack)
		if len(p.Status.Held) != 1 || !strings.Contains(p.Status.Held[0].Reason, "osgate-1@osgate-1-b2") || len(p.Status.Nodes) != 0 {
			t.Errorf("held %+v, nodes %+v; want osgate-1 held, pinned after its fallback", p.Status.Held, p.Status.Nodes)
		}
		untouched(t, p)
		deleted(t, p)

		// Another node is pinned: the policy's step waits at the gate, the node untouched,
		// until the fallback is acknowledged; then it upgrades the node.
		pin("osgate-elsewhere", false)
		p = s.policy("osgate-fellback", other(), soakFor, 2*time.Minute)
		held(t, p, osupgrade.ReasonNodeFellBack, "osgate-elsewhere")
		untouched(t, p)
		pin("osgate-elsewhere", true)
		p = s.ended(p, nwv1.WorkflowSucceeded)
		version = other()
		deleted(t, p)
	})

	t.Run("a held node", func(t *testing.T) {
		p := s.policyWith("osgate-hold", other(), soakFor, 2*time.Minute, func(p *nwv1.OSVersionPolicy) {
			p.Spec.Hold = []nwv1.OSNodeHold{{Node: "osgate-1", Reason: "a customer demo on Friday"}}
		})
		// The Preflight fails, naming the hold; nothing changed, so the policy is RolledBack.
		p = s.ended(p, nwv1.WorkflowRolledBack)
		if !strings.Contains(steps(p), "every node it selects is held: osgate-1 (a customer demo on Friday)") {
			t.Errorf("the Preflight does not name the hold: %s", steps(p))
		}
		if len(p.Status.Held) != 1 || p.Status.Held[0].Reason != "a customer demo on Friday" || len(p.Status.Nodes) != 0 {
			t.Errorf("held %+v, nodes %+v; want osgate-1 held for its reason, and no node", p.Status.Held, p.Status.Nodes)
		}
		untouched(t, p)
		deleted(t, p)
	})
}

// held waits until the policy's Held condition says reason, its message naming what.
func held(t *testing.T, p *nwv1.OSVersionPolicy, reason, what string) {
	t.Helper()
	testenv.Eventually(t, patience, func() string {
		cur := &nwv1.OSVersionPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), cur); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, nwv1.ConditionHeld)
		if c == nil || c.Reason != reason || (what != "" && !strings.Contains(c.Message, what)) {
			return fmt.Sprintf("Held %+v; want %s naming %q (steps %s)", c, reason, what, steps(cur))
		}
		return ""
	})
}
