package bondflip

import (
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/nodecordon"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// ActionStep is the audit action of a flip's transitions.
const ActionStep = "BondModeFlipTransition"

// The labels on everything a flip creates (its NodeOperations and VirtualMachineInstanceMigrations),
// so that the operator's cache holds only its own and a person can find them.
const (
	LabelName = "nodewright.spectrocloud.com/bondmodeflipplan"
	LabelUID  = "nodewright.spectrocloud.com/bondmodeflipplan-uid"
	// LabelStep is the step that made the child.
	LabelStep = "nodewright.spectrocloud.com/step"
)

// AnnotationCordonedBy is on a Node a flip cordoned, naming it (CordonedBy). It is written in
// the same update that sets spec.unschedulable and removed in the one that clears it, so the
// Node itself records that the cordon is the flip's: an operator killed between that write and
// the status's finds it there, and a node cordoned by anyone else never carries it. The chart's
// policy nodewright-operator-nodes holds the operator to that pairing.
const AnnotationCordonedBy = nodecordon.AnnotationCordonedBy

// CordonedBy is the value of AnnotationCordonedBy for the flip named flip:
// "bondmodeflipplan/<name>".
func CordonedBy(flip string) string { return "bondmodeflipplan/" + flip }

// Descriptor is the flip as the workflow engine, the operator and admission know it.
var Descriptor = engine.Describe(&engine.Descriptor[*nwv1.BondModeFlipPlan]{
	Kind: workflow.Kind{
		Name:        "BondModeFlipPlan",
		AuditAction: ActionStep,
		Succeeded:   "every node runs the target bond mode",
		RolledBack:  "rolled back: every node runs the bond mode it had before the flip",
		Cancelled:   "the flip was deleted",
		Noun:        "flip",
	},
	Controller: "bondmodeflipplan",
	ShortNames: []string{"bmfp", "bondflip"},
	New:        func() *nwv1.BondModeFlipPlan { return &nwv1.BondModeFlipPlan{} },
	NewList:    func() client.ObjectList { return &nwv1.BondModeFlipPlanList{} },
	Plan:       func(f *nwv1.BondModeFlipPlan) workflow.Plan { return PlanOf(f) },
	Plans: func() []workflow.Plan {
		var plans []workflow.Plan
		for n := 1; n <= MaxNodes; n++ {
			p, _ := NewPlan(n)
			plans = append(plans, p)
		}
		return plans
	},
	Finalizer: "nodewright.spectrocloud.com/bondflip",
	NameLabel: LabelName,
	UIDLabel:  LabelUID,
	// Its VMs' live migrations are read from the API server, not watched: KubeVirt may be
	// absent, and they are few.
	Children:      []engine.Child{{Object: &nwv1.NodeOperation{}, InAgentNamespace: true}},
	ClusterWide:   true,
	ClusterPhases: []nwv1.ClusterPhase{nwv1.ClusterMultiNode},
	NeedsAgents:   true,
	Nodes: func(f *nwv1.BondModeFlipPlan) []engine.NodeField {
		return engine.NodeList("spec.nodeOrder", f.Spec.NodeOrder)
	},
	Admit:    admit,
	Changing: changing,
})

// changing is the node of the flip's step that runs or waits, forward or rollback: the node it
// changes, or is about to. Its Preflight changes none.
func changing(f *nwv1.BondModeFlipPlan) ([]string, bool) {
	p := ProgressOf(f)
	switch {
	case p.Current == nil:
		return nil, false
	case Step(p.Current.Name) == Preflight:
		return nil, true
	case p.CurrentPosition < 1 || p.CurrentPosition > len(p.Nodes) || p.Nodes[p.CurrentPosition-1].Name == "-":
		return nil, false
	}
	return []string{p.Nodes[p.CurrentPosition-1].Name}, true
}

// Kind is what the shared workflow code calls a flip and says of its outcomes.
var Kind = Descriptor.Kind

// Order is the flip's node order: spec.nodeOrder, or, when the spec leaves it to the
// operator, the order it recorded in status.nodes before the flip started.
func Order(f *nwv1.BondModeFlipPlan) []string {
	if len(f.Spec.NodeOrder) > 0 {
		return f.Spec.NodeOrder
	}
	out := make([]string, 0, len(f.Status.Nodes))
	for _, n := range f.Status.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// PlanOf is f's plan: one node's part per node of its order. An order that is not 1 to 3
// nodes gives the Preflight alone, which fails saying why.
func PlanOf(f *nwv1.BondModeFlipPlan) Plan {
	p, err := NewPlan(len(Order(f)))
	if err != nil {
		return Plan{}
	}
	return p
}

// DefaultOrder is the order of the nodes when the spec gives none: tiebreakers first, then
// secondaries, then nodes with no role reported, the primary last, each by name. The
// primary's VMs then move once, and the node that serves them is changed when every other
// has shown the new mode works.
func DefaultOrder(roles map[string]nwv1.NodeRole) []string {
	rank := func(r nwv1.NodeRole) int {
		switch r {
		case nwv1.NodeRoleTiebreaker:
			return 0
		case nwv1.NodeRoleSecondary:
			return 1
		case nwv1.NodeRolePrimary:
			return 3
		}
		return 2
	}
	names := make([]string, 0, len(roles))
	for n := range roles {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := rank(roles[a]) - rank(roles[b]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names
}
