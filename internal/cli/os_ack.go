package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
)

const osAckHelp = `Acknowledge that the nodes NODE... fell back from the image of the OSVersionPolicy NAME: the
command adds them to the policy's annotation nodewright.spectrocloud.com/acknowledge-fallback
(a merge patch with the policy's resourceVersion, keeping the nodes it named already; if the
policy changed in between, it is read again), and the admission webhook stamps you in
nodewright.spectrocloud.com/acknowledged-by. The command says who is stamped. It needs the
right to update (patch) the policy.

A node whose agent reports a fallback from the policy's image is held by the policy (os watch
lists it under the held nodes) until a person acknowledges it. The policy reads the
acknowledgement once, as it starts (on its first reconcile, when it chooses its nodes): it
counts only when set as the policy is created (os plan --ack); on a policy already started it
is recorded, stamped, and changes nothing. A policy that stopped because a node fell back (FellBack) does not
start again: delete it and create a new one that acknowledges the node,
kubectl nodewright os plan --image IMAGE ... --ack NODE.

Exit codes: 0 acknowledged (or already); 1 the policy cannot be read or the patch is refused
(no right to, or the webhook refused it); 2 usage.`

const osAckExamples = `  # edge-2 fell back from the image; you found and fixed why: let the policy try it again
  kubectl nodewright os ack to-v3-6 edge-2

  # Who acknowledged what
  kubectl get osvp to-v3-6 -o jsonpath='{.metadata.annotations}'`

func newOSAckCommand(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "ack NAME NODE...",
		Short:   "Acknowledge nodes' fallback from a policy's image (the acknowledge-fallback annotation, stamped with who)",
		Long:    osAckHelp,
		Example: osAckExamples,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageErrorf("%s wants the NAME of an OSVersionPolicy and at least one NODE, got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return completeClusterNames(f, func() client.ObjectList { return &nwv1.OSVersionPolicyList{} })(cmd, args, toComplete)
			}
			return completeNodeOrder(f)(cmd, nil, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			nodes, err := nodeNames("NODE", args[1:], osupgrade.MaxNodes)
			if err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			res, err := AcknowledgeFallback(cmd.Context(), c, args[0], nodes)
			if err != nil {
				return err
			}
			return printLines(f, res.Lines())
		},
	}
}

// Acknowledgement is what os ack did: the policy as the API server returned it, and the nodes
// it added to those acknowledged.
type Acknowledgement struct {
	Policy *nwv1.OSVersionPolicy
	Added  []string
	// Asked are the nodes asked for.
	Asked []string
}

// AcknowledgeFallback adds nodes to the acknowledge-fallback annotation of the policy name, as a
// merge patch carrying the resourceVersion read (read and tried again on a conflict), keeping
// the nodes it names already.
func AcknowledgeFallback(ctx context.Context, c client.Client, name string, nodes []string) (Acknowledgement, error) {
	for {
		p := &nwv1.OSVersionPolicy{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			return Acknowledgement{}, apiError(err, osKind, name)
		}
		acked := osupgrade.Acknowledged(p)
		var added []string
		for _, n := range nodes {
			if !slices.Contains(acked, n) {
				added = append(added, n)
			}
		}
		if len(added) == 0 {
			return Acknowledgement{Policy: p, Asked: nodes}, nil
		}
		patched := p.DeepCopy()
		if patched.Annotations == nil {
			patched.Annotations = map[string]string{}
		}
		patched.Annotations[nwv1.AnnotationAcknowledgeFallback] = strings.Join(append(acked, added...), ",")
		err := c.Patch(ctx, patched, client.MergeFromWithOptions(p, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsConflict(err):
			continue
		case err != nil:
			return Acknowledgement{}, apiError(err, osKind, name)
		}
		return Acknowledgement{Policy: patched, Added: added, Asked: nodes}, nil
	}
}

// Lines say what the acknowledgement did, who is stamped, and what happens next.
func (a Acknowledgement) Lines() []string {
	p := a.Policy
	ref := osKind + "/" + p.Name
	acked := osupgrade.Acknowledged(p)
	var out []string
	if len(a.Added) == 0 {
		out = append(out, fmt.Sprintf("%s: %s already acknowledged; nothing changed", ref, strings.Join(a.Asked, ", ")))
	} else {
		out = append(out, fmt.Sprintf("%s: acknowledged the fallback of %s (the policy's acknowledge-fallback now names %s)",
			ref, strings.Join(a.Added, ", "), strings.Join(acked, ", ")))
	}
	if by := p.Annotations[nwv1.AnnotationAcknowledgedBy]; by != "" {
		out = append(out, "Stamped: acknowledged-by "+by)
	} else {
		out = append(out, "Not stamped: the policy has no acknowledged-by (is the operator's admission webhook running?)")
	}
	st := &p.Status.WorkflowStatus
	pr := osupgrade.ProgressOf(p)
	phase := statusPhase(st)
	nodes := strings.Join(a.Asked, ", ")
	switch {
	case len(pr.FellBack) > 0 && phase.Finished():
		out = append(out, fmt.Sprintf("The policy stopped: %s fell back. It does not start again: to try the image there again, delete it and create a new one that acknowledges the node:",
			strings.Join(pr.FellBack, ", ")),
			fmt.Sprintf("  kubectl delete osvp %s && kubectl nodewright os plan --image %s --ack %s ...", p.Name, p.Spec.Image, strings.Join(pr.FellBack, ",")))
	case phase.Finished():
		out = append(out, fmt.Sprintf("The policy has ended (%s): it tries nothing again. To try the image on %s, create a new policy with --ack.", phase, nodes))
	case st.Phase == "" || st.Phase == nwv1.WorkflowPending:
		out = append(out, fmt.Sprintf("Next: when the policy starts, it may try %s again on %s.", osupgrade.Repository(p.Spec.Image), nodes))
	default:
		out = append(out, fmt.Sprintf("The policy has started (%s): it chose its nodes at its Preflight, and does not try %s on %s. To try the image there, create a new policy with --ack once this one ends.",
			phase, osupgrade.Repository(p.Spec.Image), nodes))
	}
	return out
}
