package v1alpha1

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-nodeoperation,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=nodeoperations,verbs=create;update,versions=v1alpha1,name=mnodeoperation-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-nodeoperation,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=nodeoperations,verbs=create;update,versions=v1alpha1,name=vnodeoperation-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1

// nodeOperations admits the operations the operator delegates to the agents: each is owned,
// as its controller, by the cluster-wide workflow that asked for it, which must exist (so
// that an operation never outlives its workflow, and the trail of what asked for a change on
// a node leads to a workflow, its requester and its approver), and is for a node that exists.
type nodeOperations struct {
	client client.Reader
}

// workflowKinds are the kinds that may ask a node's agent for an operation: those that
// change nodes through their agents (engine.Descriptor.NeedsAgents).
func workflowKinds() []string {
	var out []string
	for _, k := range engine.Described() {
		if k.NeedsAgents {
			out = append(out, k.Kind.Name)
		}
	}
	return out
}

// askers names the kinds that may ask for an operation, as a sentence does: "a
// BondModeFlipPlan or a ReplicationUpgrade".
func askers() string {
	kinds := workflowKinds()
	for i, k := range kinds {
		article := "a "
		if strings.ContainsRune("AEIOU", rune(k[0])) {
			article = "an "
		}
		kinds[i] = article + k
	}
	switch len(kinds) {
	case 0:
		return "no workflow kind"
	case 1:
		return kinds[0]
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " or " + kinds[len(kinds)-1]
}

// MaxOperationDeadline bounds how far ahead an operation's deadline may be: an agent performs
// its node's operations one at a time, and one stuck until a far deadline would hold all the
// others up.
const MaxOperationDeadline = 24 * time.Hour

// controllerOf is op's controller owner reference, nil when it has none.
func controllerOf(op *nwv1.NodeOperation) *metav1.OwnerReference {
	for i, ref := range op.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			return &op.OwnerReferences[i]
		}
	}
	return nil
}

// update keeps the workflow that asked: an operation never changes hands or outlives it.
func (n *nodeOperations) update(_ context.Context, old, op *nwv1.NodeOperation) (admission.Warnings, error) {
	before, after := controllerOf(old), controllerOf(op)
	if before != nil && (after == nil || after.UID != before.UID) {
		return nil, fmt.Errorf("metadata.ownerReferences: the controller owner (%s %s) is the workflow that asked for the operation and cannot change", before.Kind, before.Name)
	}
	return nil, nil
}

func (n *nodeOperations) create(ctx context.Context, op *nwv1.NodeOperation) (admission.Warnings, error) {
	if now := time.Now(); !op.Spec.Deadline.After(now) || op.Spec.Deadline.Sub(now) > MaxOperationDeadline {
		return nil, fmt.Errorf("spec.deadline: %s must be in the future and at most %s ahead", op.Spec.Deadline.UTC().Format(time.RFC3339), MaxOperationDeadline)
	}
	owner := controllerOf(op)
	const field = "metadata.ownerReferences"
	if owner == nil {
		return nil, fmt.Errorf("%s: a NodeOperation is owned, as its controller, by the workflow that asked for it (%s); none is", field, askers())
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil || gv.Group != nwv1.GroupVersion.Group || !slices.Contains(workflowKinds(), owner.Kind) {
		return nil, fmt.Errorf("%s: the controller is a %s (%s); only %s asks a node's agent for an operation", field, owner.Kind, owner.APIVersion, askers())
	}
	asker := &metav1.PartialObjectMetadata{}
	asker.SetGroupVersionKind(nwv1.GroupVersion.WithKind(owner.Kind))
	err = n.client.Get(ctx, client.ObjectKey{Name: owner.Name}, asker)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s: %s %s does not exist", field, owner.Kind, owner.Name)
	case err != nil:
		return nil, fmt.Errorf("reading %s %s: %w", owner.Kind, owner.Name, err)
	case asker.UID != owner.UID:
		return nil, fmt.Errorf("%s: %s %s has UID %s, not %s: the workflow that asked is gone", field, owner.Kind, owner.Name, asker.UID, owner.UID)
	case !asker.DeletionTimestamp.IsZero():
		return nil, fmt.Errorf("%s: %s %s is being deleted; it asks for no new operation", field, owner.Kind, owner.Name)
	}
	return nil, nodeExists(ctx, n.client, "spec.nodeName", op.Spec.NodeName)
}
