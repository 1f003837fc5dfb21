package replicationupgrade_test

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// TestOneClusterWideWorkflowAtATime: while a BondModeFlipPlan holds the cluster-wide claim,
// an upgrade waits at its Preflight, held by the lock, and changes nothing; once the flip
// ends, the upgrade runs.
func TestOneClusterWideWorkflowAtATime(t *testing.T) {
	s := newSite(t, siteOptions{volumes: 2}, "upl-a", "upl-b")
	// A flip that no controller runs here holds the claim, as its controller takes it; once it
	// is gone, the upgrade takes the claim over.
	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "holds-the-claim"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD}}
	must(t, env.Client.Create(context.Background(), flip))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), flip) })
	flip.Status.Phase = nwv1.WorkflowRunning
	must(t, env.Client.Status().Update(context.Background(), flip))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.lockNS, Name: engine.LockName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("BondModeFlipPlan/" + flip.Name + "/" + string(flip.UID))}}
	must(t, env.Client.Create(context.Background(), lease))

	s.startOperator()
	u := s.upgrade("waits-for-the-flip", nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"upl-b"}, ReplicaCount: 2})
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if !waiting(u, replupgrade.Preflight) || heldReason(u) != nwv1.ReasonAnotherWorkflowRunning {
			return "Preflight is not held by the flip; held by " + heldReason(u) + "; " + steps(u)
		}
		return ""
	})
	if diff := stateDiff(s.start, s.sim.State()); diff != "" {
		t.Errorf("LINSTOR changed while the upgrade waited:\n%s", diff)
	}
	must(t, env.Client.Delete(context.Background(), flip))
	s.ended(u, nwv1.WorkflowSucceeded)
}
