package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/selfservice"
)

const requestApproveHelp = `Approve a VMOperationRequest of the namespace (-n, or the context's) that waits for an
administrator (status.approval Required: the SelfServicePolicy's approval Manual). The command
sets the annotation nodewright.spectrocloud.com/approve to the request's operation, as
docs/selfservice.md says; the admission webhook stamps you in
nodewright.spectrocloud.com/approved-by, and refuses an approval by the requester, and one of a
request that started or ended. It needs the right to update (patch) the request, which the
VM owners' roles do not give.

The command reads the request first and refuses when it started or ended, or when its policy
needs no approval. The annotation is written with the request's resourceVersion: if the request
changed in between, it is read and checked again. An approved request may still wait for what
else holds it (the maintenance window, the rate, the queue, node work): "request watch" says.

Exit codes: 0 approved (or already approved); 1 refused (nothing to approve, the webhook's
reason, no right to update the request) or the request cannot be read; 2 usage.`

const requestApproveExamples = `  # What waits for an administrator, then approve it
  kubectl nodewright request list -A
  kubectl nodewright request approve web-restore-x7k2p -n team-a`

func newRequestApproveCommand(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:               "approve NAME",
		Short:             "Approve a request that waits for an administrator",
		Long:              requestApproveHelp,
		Example:           requestApproveExamples,
		Args:              exactArgs(1, "the NAME of a VMOperationRequest"),
		ValidArgsFunction: completeRequests(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			namespace, _, err := f.Namespace()
			if err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			said, err := approveRequest(cmd.Context(), c, namespace, args[0])
			if err != nil {
				return err
			}
			return printLines(f, []string{said})
		},
	}
}

// approveRequest sets the approve annotation of the request namespace/name to its operation,
// with a merge patch carrying the resourceVersion it read, reading and checking again when the
// request changed in between. It says what it did, or why nothing was approved.
func approveRequest(ctx context.Context, c client.Client, namespace, name string) (string, error) {
	object := requestKind + "/" + name
	for try := 1; ; try++ {
		r := &nwv1.VMOperationRequest{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, r); err != nil {
			return "", apiError(err, requestKind, name)
		}
		op := string(r.Spec.Operation)
		phase := requestPhase(r)
		switch {
		case r.Annotations[nwv1.AnnotationApprove] == op:
			said := fmt.Sprintf("%s: already approved", object)
			if by := r.Annotations[nwv1.AnnotationApprovedBy]; by != "" {
				said += " by " + shown(by)
			}
			return said, nil
		case phase == nwv1.VMOperationRunning || !selfservice.Unfinished(phase):
			return "", fmt.Errorf("%s is %s: a request is approved before it starts", object, phase)
		case r.Status.Approval == nwv1.ApprovalNotRequired:
			return "", fmt.Errorf("%s needs no approval: the SelfServicePolicy approves %s without one (status.approval NotRequired)", object, op)
		}
		before := r.DeepCopy()
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations[nwv1.AnnotationApprove] = op
		err := c.Patch(ctx, r, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			return fmt.Sprintf("%s: approved: %s", object, describeRequest(r)), nil
		case apierrors.IsConflict(err) && try < approveTries:
			continue // changed since the read: read it and check again
		case apierrors.IsConflict(err):
			return "", fmt.Errorf("%s changed each of the %d times it was read to be approved; nothing was approved, try again", object, approveTries)
		case refusedByRBAC(err):
			return "", fmt.Errorf("you may not approve %s: the API server refused the update: %w", object, err)
		}
		return "", apiError(err, requestKind, name)
	}
}
