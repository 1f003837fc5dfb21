package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const bootAckHelp = `Acknowledge the last fallback of each node NODE...: the command reads the boot that fell back
from the BootRecoveryPolicy's status (status.nodes[].lastFallback.bootID) and adds NODE@BOOTID
to the policy's annotation nodewright.spectrocloud.com/acknowledge-fallback, with a merge
patch carrying the resourceVersion it read (the entries of other nodes are kept; an older
entry of the same node, for a boot that no longer counts, is replaced; if the policy changed
in between, it is read again and checked again). The admission webhook stamps you in
nodewright.spectrocloud.com/acknowledged-by; the command says who is stamped. It needs the
right to patch the BootRecoveryPolicy.

The operator then records the acknowledgement in the node's status (acknowledged: boot, by,
at), lifts the node's pin and, once no node's fallback waits, lets the OSVersionPolicies
start their nodes' steps again. An acknowledgement holds for that boot alone: the node
falling back again, at another boot, is pinned again.

Nothing is written, for any node, when one of them has no fallback, has its fallback
acknowledged already (in the status, or by the annotation the operator has not read yet),
is not in the policy's status, or reports a boot ID that is not one (1 to 64 letters, digits
and dashes, as the webhook admits them): the error names each such node.

Exit codes: 0 acknowledged; 1 the policy does not exist or cannot be read, a node is refused
as above, or the patch is refused (no right to, or the webhook refused it); 2 usage.`

const bootAckExamples = `  # edge-2 fell back from the image it was upgraded to; you found and fixed why
  kubectl nodewright boot ack edge-2

  # Two nodes at once (none is acknowledged unless both can be)
  kubectl nodewright boot ack edge-2 edge-3`

// bootIDPattern is a boot ID as the admission webhook admits it in an acknowledgement: the
// kernel's boot_id is a UUID. A boot ID is written by the node's agent; one with a comma or an
// @ would add entries of its own choosing to the annotation a person sets.
var bootIDPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// bootAckAttempts bounds the re-reads on conflicts: the operator writes the policy's status
// as the nodes report, and each write changes its resourceVersion.
const bootAckAttempts = 20

func newBootAckCommand(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "ack NODE...",
		Short:   "Acknowledge nodes' last fallback by the boot that fell back (the acknowledge-fallback annotation, stamped with who)",
		Long:    bootAckHelp,
		Example: bootAckExamples,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s wants at least one NODE, got none", cmd.CommandPath())
			}
			return nil
		},
		ValidArgsFunction: completeFellBackNodes(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			nodes, err := nodeNames("NODE", args, nwv1.MaxBootRecoveryNodes)
			if err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			res, err := AcknowledgeBootFallback(cmd.Context(), c, nodes)
			if err != nil {
				return err
			}
			return printLines(f, res.Lines())
		},
	}
}

// BootAcknowledgement is what boot ack did: the policy as the API server returned it, and
// the entries (NODE@BOOTID) it added.
type BootAcknowledgement struct {
	Policy *nwv1.BootRecoveryPolicy
	Added  []string
}

// AcknowledgeBootFallback acknowledges the last fallback of each of nodes in the
// BootRecoveryPolicy: NODE@BOOTID added to its acknowledge-fallback annotation, as a merge
// patch carrying the resourceVersion read (read, checked and tried again on a conflict). It
// writes nothing unless every node has a fallback to acknowledge.
func AcknowledgeBootFallback(ctx context.Context, c client.Client, nodes []string) (BootAcknowledgement, error) {
	for range bootAckAttempts {
		p, err := getBootPolicy(ctx, c)
		if err != nil {
			return BootAcknowledgement{}, err
		}
		boots, err := fallbackBoots(p, nodes)
		if err != nil {
			return BootAcknowledgement{}, err
		}
		patched := p.DeepCopy()
		if patched.Annotations == nil {
			patched.Annotations = map[string]string{}
		}
		patched.Annotations[nwv1.AnnotationAcknowledgeFallback] = withAcknowledgements(p.Annotations[nwv1.AnnotationAcknowledgeFallback], nodes, boots)
		err = c.Patch(ctx, patched, client.MergeFromWithOptions(p, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsConflict(err):
			continue
		case err != nil:
			return BootAcknowledgement{}, apiError(err, bootKind, p.Name)
		}
		added := make([]string, len(nodes))
		for i, n := range nodes {
			added[i] = n + "@" + boots[n]
		}
		return BootAcknowledgement{Policy: patched, Added: added}, nil
	}
	return BootAcknowledgement{}, fmt.Errorf("%s/%s changed %d times while acknowledging: nothing written; try again", bootKind, nwv1.BootRecoveryPolicyName, bootAckAttempts)
}

// fallbackBoots is, for each of nodes, the boot of its last fallback, or an error naming
// every node that has nothing to acknowledge.
func fallbackBoots(p *nwv1.BootRecoveryPolicy, nodes []string) (map[string]string, error) {
	annotated := acknowledgementEntries(p.Annotations[nwv1.AnnotationAcknowledgeFallback])
	boots := map[string]string{}
	var errs []error
	for _, name := range nodes {
		i := slices.IndexFunc(p.Status.Nodes, func(n nwv1.NodeBootRecord) bool { return n.Name == name })
		if i < 0 {
			errs = append(errs, fmt.Errorf("%s: not in the BootRecoveryPolicy's status (no agent reports its boot)", name))
			continue
		}
		n := p.Status.Nodes[i]
		fb := n.LastFallback
		switch {
		case fb == nil:
			errs = append(errs, fmt.Errorf("%s: no fallback to acknowledge (status.nodes[%s].lastFallback is empty)", name, name))
		case n.Unacknowledged() == nil:
			by := ""
			if n.Acknowledged.By != "" {
				by = " by " + shown(n.Acknowledged.By)
			}
			errs = append(errs, fmt.Errorf("%s: its fallback at boot %s is acknowledged already%s at %s", name, shown(fb.BootID), by, timestamp(n.Acknowledged.At.Time)))
		case !bootIDPattern.MatchString(fb.BootID):
			errs = append(errs, fmt.Errorf("%s: status.nodes[%s].lastFallback.bootID %q is not a boot ID (1 to 64 letters, digits and dashes): not written into the annotation",
				name, name, fb.BootID))
		case slices.Contains(annotated, name+"@"+fb.BootID):
			errs = append(errs, fmt.Errorf("%s: its fallback at boot %s is acknowledged already by the annotation (%s); the operator has not recorded it yet",
				name, fb.BootID, nwv1.AnnotationAcknowledgeFallback))
		default:
			boots[name] = fb.BootID
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s/%s: nothing acknowledged: %w", bootKind, nwv1.BootRecoveryPolicyName, errors.Join(errs...))
	}
	return boots, nil
}

// acknowledgementEntries are the annotation's entries, trimmed, without empty ones.
func acknowledgementEntries(annotation string) []string {
	var out []string
	for _, e := range strings.Split(annotation, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// withAcknowledgements is the annotation with NODE@BOOTID for each of nodes: the entries of
// other nodes kept in their order, an older entry of one of nodes (another boot: only the
// node's last entry counts, and only for that boot) replaced, the new entries last.
func withAcknowledgements(annotation string, nodes []string, boots map[string]string) string {
	var out []string
	for _, e := range acknowledgementEntries(annotation) {
		node, _, _ := strings.Cut(e, "@")
		if !slices.Contains(nodes, node) {
			out = append(out, e)
		}
	}
	for _, n := range nodes {
		out = append(out, n+"@"+boots[n])
	}
	return strings.Join(out, ",")
}

// Lines say what the acknowledgement did, who is stamped, and what happens next.
func (a BootAcknowledgement) Lines() []string {
	p := a.Policy
	out := []string{fmt.Sprintf("%s/%s: acknowledged the fallback of %s", bootKind, p.Name, strings.Join(a.Added, ", "))}
	if by := p.Annotations[nwv1.AnnotationAcknowledgedBy]; by != "" {
		out = append(out, "Stamped: acknowledged-by "+shown(by))
	} else {
		out = append(out, "Not stamped: the policy has no acknowledged-by (is the operator's admission webhook running?)")
	}
	next := "Next: the operator records it (boot status: \"acknowledged by\")"
	if p.HoldsUpgrades() {
		next += " and lifts the pin; the OSVersionPolicies start their nodes' steps again once no fallback waits"
	}
	return append(out, next+".")
}

// completeFellBackNodes completes NODE from the BootRecoveryPolicy's nodes whose fallback is
// not acknowledged (those boot ack takes), leaving out those named already and any name that
// is not a node's (a status is written from what agents report).
func completeFellBackNodes(f *Factory) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		c, err := f.Client()
		if err != nil {
			return nil, none
		}
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		p, err := getBootPolicy(ctx, c)
		if err != nil {
			return nil, none
		}
		var out []string
		for _, n := range bootNodes(p) {
			if n.Unacknowledged() != nil && strings.HasPrefix(n.Name, toComplete) && !slices.Contains(args, n.Name) &&
				len(validation.IsDNS1123Subdomain(n.Name)) == 0 {
				out = append(out, n.Name)
			}
		}
		return out, none
	}
}
