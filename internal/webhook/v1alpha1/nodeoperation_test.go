package v1alpha1_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestANodeOperationIsOwnedByTheWorkflowThatAsked: an operation for a node's agent is
// admitted only with a live BondModeFlipPlan or ReplicationUpgrade as its controller, and for
// a node that exists.
func TestANodeOperationIsOwnedByTheWorkflowThatAsked(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	noClusterWorkflows(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "op-edge-2"}}
	if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	managedCluster(t)
	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "op-owner"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "802.3ad"}}
	if err := env.Client.Create(ctx, flip); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), flip)
		noClusterWorkflows(t)
	})
	ns := env.Namespace(t)
	op := func(owners ...metav1.OwnerReference) *nwv1.NodeOperation {
		return &nwv1.NodeOperation{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "op-", OwnerReferences: owners},
			Spec: nwv1.NodeOperationSpec{NodeName: node.Name, Type: nwv1.OperationDRBDVerify,
				Deadline:   metav1.NewTime(time.Now().Add(time.Hour)),
				DRBDVerify: &nwv1.DRBDResourceOperation{Resource: "pvc-1"}},
		}
	}
	byFlip := metav1.OwnerReference{APIVersion: nwv1.GroupVersion.String(), Kind: "BondModeFlipPlan", Name: flip.Name,
		UID: flip.UID, Controller: ptr.To(true)}

	refused(t, env.Client.Create(ctx, op()), "metadata.ownerReferences: a NodeOperation is owned, as its controller, by the workflow that asked for it")
	notController := byFlip
	notController.Controller = nil
	refused(t, env.Client.Create(ctx, op(notController)), "metadata.ownerReferences: a NodeOperation is owned, as its controller")
	byPod := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "x", UID: "00000000-0000-4000-8000-000000000001", Controller: ptr.To(true)}
	refused(t, env.Client.Create(ctx, op(byPod)), "metadata.ownerReferences: the controller is a Pod (v1); only a BondModeFlipPlan, an OSVersionPolicy or a ReplicationUpgrade asks")
	gone := byFlip
	gone.UID = "00000000-0000-4000-8000-000000000002"
	refused(t, env.Client.Create(ctx, op(gone)), "the workflow that asked is gone")
	missing := byFlip
	missing.Name = "no-such-flip"
	refused(t, env.Client.Create(ctx, op(missing)), "metadata.ownerReferences: BondModeFlipPlan no-such-flip does not exist")
	elsewhere := op(byFlip)
	elsewhere.Spec.NodeName = "op-edge-9"
	refused(t, env.Client.Create(ctx, elsewhere), `spec.nodeName: "op-edge-9" is not a Node of the cluster`)

	past := op(byFlip)
	past.Spec.Deadline = metav1.NewTime(time.Now().Add(-time.Minute))
	refused(t, env.Client.Create(ctx, past), "spec.deadline: ")
	far := op(byFlip)
	far.Spec.Deadline = metav1.NewTime(time.Now().Add(48 * time.Hour))
	refused(t, env.Client.Create(ctx, far), "must be in the future and at most 24h0m0s ahead")

	ok := op(byFlip)
	if err := env.Client.Create(ctx, ok); err != nil {
		t.Fatalf("an operation owned by its flip, for a node that exists, was refused: %v", err)
	}
	// The workflow that asked cannot change.
	orphaned := ok.DeepCopy()
	orphaned.OwnerReferences = nil
	refused(t, env.Client.Update(ctx, orphaned), "metadata.ownerReferences: the controller owner (BondModeFlipPlan op-owner) is the workflow that asked for the operation and cannot change")
	if who := ok.Annotations[nwv1.AnnotationRequestedBy]; who == "" {
		t.Errorf("the operation carries no requested-by stamp")
	}
}
