// Package example is a small workflow kind, ConfigSwap, written as a new kind is
// (docs/development.md, "Writing a new workflow"): its API type (api/v1alpha1), its plan and
// descriptor (this file), its controller (controller.go). It sets one key of a ConfigMap:
// the value before is kept in a backup ConfigMap, the new one is checked, and a failed check
// or a cancellation puts the old one back. Its tests run it on a real API server and kill the
// operator at every step boundary. The operator does not run it: it is the example to copy.
package example

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	examplev1 "github.com/spectrocloud/nodewright/internal/workflow/example/api/v1alpha1"
)

// The steps. Each is idempotent: after a crash it runs again.
const (
	// Validate: the ConfigMap exists.
	Validate workflow.Step = "Validate"
	// Backup: the key's value before (or that it had none) is kept in a backup ConfigMap.
	Backup workflow.Step = "Backup"
	// Apply: the key holds the new value.
	Apply workflow.Step = "Apply"
	// Verify: the key reads back as the new value, and no one vetoed it.
	Verify workflow.Step = "Verify"
	// Restore (rollback): the key is as the backup says it was.
	Restore workflow.Step = "Restore"
)

// Plan is every swap's plan.
type Plan struct{}

// Forward lists the steps in order.
func (Plan) Forward() []workflow.Step { return []workflow.Step{Validate, Backup, Apply, Verify} }

// Rollback undoes a failure: once Apply may have changed the key, Restore puts it back.
// Validate and Backup change nothing of the ConfigMap (the backup goes in Finish).
func (Plan) Rollback(failed workflow.Step) []workflow.Step {
	if failed == Apply || failed == Verify {
		return []workflow.Step{Restore}
	}
	return nil
}

// Irreversible is false for every step: a key can always be put back.
func (Plan) Irreversible(workflow.Step) bool { return false }

// The labels that name a swap on its backup.
const (
	LabelName = "example.nodewright.spectrocloud.com/configswap"
	LabelUID  = "example.nodewright.spectrocloud.com/configswap-uid"
)

// Descriptor is the swap as the engine knows it.
var Descriptor = engine.Describe(&engine.Descriptor[*examplev1.ConfigSwap]{
	Kind: workflow.Kind{
		Name:        "ConfigSwap",
		AuditAction: "ConfigSwapTransition",
		Succeeded:   "the key holds the new value",
		RolledBack:  "rolled back: the key is as it was",
		Cancelled:   "the swap was deleted",
		Noun:        "swap",
	},
	Controller: "configswap",
	New:        func() *examplev1.ConfigSwap { return &examplev1.ConfigSwap{} },
	NewList:    func() client.ObjectList { return &examplev1.ConfigSwapList{} },
	Plan:       func(*examplev1.ConfigSwap) workflow.Plan { return Plan{} },
	Plans:      func() []workflow.Plan { return []workflow.Plan{Plan{}} },
	Finalizer:  "example.nodewright.spectrocloud.com/configswap",
	NameLabel:  LabelName,
	UIDLabel:   LabelUID,
	// The backup; the swap reads the user's ConfigMap too.
	Children: []engine.Child{{Object: &corev1.ConfigMap{}, Unwatched: true, AlsoOthers: true}},
})
