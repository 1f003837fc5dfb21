// Package workflows is the register of Nodewright's workflow kinds. Each kind is one file
// here that pairs its descriptor (engine.Descriptor, kept with its plan) with its controller;
// the operator's wiring, the cache of its children, the cluster-wide claim, admission and the
// conformance test of every plan read the register, so that a new kind is its API type, its
// plan and descriptor, its controller and its file here (docs/development.md, "Writing a new
// workflow").
package workflows

import (
	"cmp"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// Options are what the operator gives the workflow controllers.
type Options struct {
	engine.Deps
	// AgentNamespace is where the node agents run their NodeOperations and keep their
	// heartbeat Leases; empty: no agents, and the kinds that need them have no controller.
	AgentNamespace string
	// CopyImage is the image with nodewright-copy that a migration's data Jobs run.
	CopyImage string
	// LINSTOR is how an upgrade reaches the LINSTOR gate.
	LINSTOR linstor.Config
}

// Kind is one workflow kind as the register holds it.
type Kind struct {
	// Name is the API kind (BondModeFlipPlan).
	Name string
	// NeedsAgents, Children and APIs are the descriptor's.
	NeedsAgents bool
	Children    []engine.Child
	APIs        servedapis.Kinds
	// Plans are every shape of the kind's plan; ActionKeys the keys of its table of actions.
	Plans      func() []workflow.Plan
	ActionKeys []workflow.Step
	// Setup builds the kind's controller on the manager.
	Setup func(ctrl.Manager, Options) error
}

var all []Kind

// register adds a kind: d its descriptor, w a Workflow of it (only its table of actions is
// read here), setup what builds its controller.
func register[O engine.Object](d *engine.Descriptor[O], w engine.Workflow[O], setup func(ctrl.Manager, Options) error) Kind {
	k := Kind{Name: d.Kind.Name, NeedsAgents: d.NeedsAgents, Children: d.Children, APIs: d.APIs, Plans: d.Plans, ActionKeys: w.Actions().Keys(), Setup: setup}
	all = append(all, k)
	slices.SortFunc(all, func(a, b Kind) int { return cmp.Compare(a.Name, b.Name) })
	return k
}

// All lists every workflow kind, by name.
func All() []Kind { return slices.Clone(all) }
