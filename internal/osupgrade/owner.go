package osupgrade

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/osimage"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// ActionStep is the audit action of a policy's transitions.
const ActionStep = "OSVersionPolicyTransition"

// The labels on everything a policy creates (its NodeOperations).
const (
	LabelName = "nodewright.spectrocloud.com/osversionpolicy"
	LabelUID  = "nodewright.spectrocloud.com/osversionpolicy-uid"
	// LabelStep is the part that made the child: Node1Stage.
	LabelStep = "nodewright.spectrocloud.com/step"
)

// CordonedBy is the value of the cordon annotation (bondflip.AnnotationCordonedBy) on a Node
// the policy named policy cordoned: "osversionpolicy/<name>".
func CordonedBy(policy string) string { return "osversionpolicy/" + policy }

// Descriptor is the policy as the workflow engine, the operator and admission know it.
var Descriptor = engine.Describe(&engine.Descriptor[*nwv1.OSVersionPolicy]{
	Kind: workflow.Kind{
		Name:        "OSVersionPolicy",
		AuditAction: ActionStep,
		Succeeded:   "every selected node booted the image, proven from the node, and soaked",
		RolledBack:  "stopped before its next node: the nodes upgraded before keep the image they booted; no other node was touched",
		Cancelled:   "the policy was deleted",
		Noun:        "policy",
	},
	Controller: "osversionpolicy",
	ShortNames: []string{"osvp", "osversion"},
	New:        func() *nwv1.OSVersionPolicy { return &nwv1.OSVersionPolicy{} },
	NewList:    func() client.ObjectList { return &nwv1.OSVersionPolicyList{} },
	Plan:       func(p *nwv1.OSVersionPolicy) workflow.Plan { return PlanOf(p) },
	Plans: func() []workflow.Plan {
		var plans []workflow.Plan
		for n := 0; n <= MaxNodes; n++ {
			for _, recovery := range []bool{false, true} {
				p, _ := NewPlan(n, recovery)
				if n == 0 && recovery {
					continue
				}
				plans = append(plans, p)
			}
		}
		return plans
	},
	Finalizer:     "nodewright.spectrocloud.com/osversionpolicy",
	NameLabel:     LabelName,
	UIDLabel:      LabelUID,
	Children:      []engine.Child{{Object: &nwv1.NodeOperation{}, InAgentNamespace: true}},
	ClusterWide:   true,
	ClusterPhases: []nwv1.ClusterPhase{nwv1.ClusterSingleNode, nwv1.ClusterMultiNode},
	NeedsAgents:   true,
	Gates:         []engine.Gate{fallbackGate},
	Nodes: func(p *nwv1.OSVersionPolicy) []engine.NodeField {
		fields := engine.NodeList("spec.nodeOrder", p.Spec.NodeOrder)
		for i, h := range p.Spec.Hold {
			fields = append(fields, engine.NodeField{Path: fmt.Sprintf("spec.hold[%d].node", i), Name: h.Node})
		}
		if rp := p.Spec.Repairs; rp != nil {
			fields = append(fields, engine.NodeField{Path: "spec.repairs.node", Name: rp.Node})
		}
		return fields
	},
	Admit:    admit,
	Changing: changing,
})

// changing is the node of the policy's step that runs or waits: the node it upgrades, or is
// about to; every node for the Recovery, which writes each one's recovery system. Its
// Preflight changes none.
func changing(p *nwv1.OSVersionPolicy) ([]string, bool) {
	pr := ProgressOf(p)
	switch {
	case pr.Current == nil:
		return nil, false
	case Step(pr.Current.Name) == Preflight:
		return nil, true
	case Step(pr.Current.Name) == Recovery:
		nodes := make([]string, 0, len(pr.Nodes))
		for _, n := range pr.Nodes {
			nodes = append(nodes, n.Name)
		}
		return nodes, len(nodes) > 0
	}
	n, ok := pr.NodeAt(pr.CurrentPosition)
	if !ok {
		return nil, false
	}
	return []string{n.Name}, true
}

// admit refuses a policy whose node selector cannot select, or whose image the EdgeProfile in
// force does not allow (every agent would refuse to stage it), naming the field; not a repair
// that stages no image (an AssessmentReset, a SelectBootEntry). Without a
// profile in force the image is admitted: the Preflight says what is missing. A change of the
// spec is checked when it changes the image.
func admit(ctx context.Context, c client.Reader, old, p *nwv1.OSVersionPolicy) error {
	if p.Spec.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err != nil {
			return fmt.Errorf("spec.nodeSelector: %w", err)
		}
	}
	if old != nil && old.Spec.Image == p.Spec.Image && old.Spec.Repairs.KeepsImage() == p.Spec.Repairs.KeepsImage() {
		return nil
	}
	if p.Spec.Repairs.KeepsImage() {
		// Its spec.image is the image its node boots as it is: nothing is staged.
		return nil
	}
	profile, err := engine.ProfileInForce(ctx, c)
	if err != nil {
		return fmt.Errorf("reading the EdgeProfile in force: %w", err)
	}
	if profile == nil {
		return nil
	}
	if why := osimage.Allowed(profile, p.Spec.Image); why != "" {
		return fmt.Errorf("spec.image: %s; the nodes' agents would refuse to stage it", why)
	}
	return nil
}

// Kind is what the shared workflow code calls a policy and says of its outcomes.
var Kind = Descriptor.Kind

// Order is the policy's node order, as it recorded it in status.nodes before it started.
func Order(p *nwv1.OSVersionPolicy) []string {
	out := make([]string, 0, len(p.Status.Nodes))
	for _, n := range p.Status.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// PlanOf is p's plan: one step per node it recorded, and the Recovery when asked for.
func PlanOf(p *nwv1.OSVersionPolicy) Plan {
	plan, err := NewPlan(len(p.Status.Nodes), p.Spec.UpgradeRecovery == nwv1.RecoveryUpgradeAfterSoak)
	if err != nil {
		return Plan{}
	}
	return plan
}

// Repository is the image reference without its digest, REPOSITORY:TAG: what a booted node's
// /etc/kairos-release names (KAIROS_IMAGE_REPO).
func Repository(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	return ref
}

// Runs reports whether a node whose agent reports k runs image: booted from the active slot,
// not after a failed upgrade, its kairos-release naming the image's repository and tag.
func Runs(k *nwv1.KairosStatus, image string) bool {
	return k != nil && k.BootEntry == nwv1.KairosBootActive && !k.UpgradeFailure && k.Image == Repository(image)
}

// Acknowledged are the nodes the policy's AnnotationAcknowledgeFallback names.
func Acknowledged(p *nwv1.OSVersionPolicy) []string {
	var out []string
	for _, n := range strings.Split(p.Annotations[nwv1.AnnotationAcknowledgeFallback], ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
