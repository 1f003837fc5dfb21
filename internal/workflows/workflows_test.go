package workflows_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/internal/workflow/example"
	"github.com/spectrocloud/nodewright/internal/workflow/workflowtest"
	"github.com/spectrocloud/nodewright/internal/workflows"
)

// TestEveryRegisteredPlanConforms runs the conformance check on every plan of every workflow
// kind the operator runs, and checks that each step of each has an action in its kind's table.
func TestEveryRegisteredPlanConforms(t *testing.T) {
	kinds := workflows.All()
	var names []string
	for _, k := range kinds {
		names = append(names, k.Name)
	}
	// The register is read by the operator; a kind missing here would have no controller.
	for _, want := range []string{"BondModeFlipPlan", "ReplicationUpgrade", "VMVolumeMigration"} {
		if !slices.Contains(names, want) {
			t.Errorf("the register lists %v, without %s", names, want)
		}
	}
	for _, k := range kinds {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			plans := k.Plans()
			if len(plans) == 0 {
				t.Fatalf("%s names no plan", k.Name)
			}
			for _, p := range plans {
				workflowtest.Conformance(t, p)
				workflowtest.Actions(t, p, k.ActionKeys)
			}
		})
	}
}

// TestTheExampleConforms: the example kind (internal/workflow/example), which the operator
// does not run, is held to the same rules.
func TestTheExampleConforms(t *testing.T) {
	for _, p := range example.Descriptor.Plans() {
		workflowtest.Conformance(t, p)
		workflowtest.Actions(t, p, (&example.Reconciler{}).Actions().Keys())
	}
}

// TestEveryActionIsOfAStep: a table entry no step of any plan reaches is a leftover, or a
// step's key misspelt.
func TestEveryActionIsOfAStep(t *testing.T) {
	for _, k := range workflows.All() {
		used := map[workflow.Step]bool{}
		for _, p := range k.Plans() {
			for _, s := range workflow.Steps(p) {
				used[workflow.ActionKey(p, s)] = true
			}
		}
		for _, key := range k.ActionKeys {
			if !used[key] {
				t.Errorf("%s: the action %s is of no step of any of its plans", k.Name, key)
			}
		}
	}
}

// TestShortNamesAreTheCRDs: the CLI takes a kind's short names from its descriptor, which
// must say what the CRD's +kubebuilder:resource marker does.
func TestShortNamesAreTheCRDs(t *testing.T) {
	dir := filepath.Join("..", "..", "config", "crd", "bases")
	files, err := filepath.Glob(filepath.Join(dir, "nodewright.spectrocloud.com_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crds := map[string]apiextensionsv1.CustomResourceDefinition{}
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		crds[crd.Spec.Names.Kind] = crd
	}
	for _, k := range engine.Described() {
		if k.Kind.Name == "ConfigSwap" {
			continue // the example's CRD is its tests'
		}
		crd, ok := crds[k.Kind.Name]
		if !ok {
			t.Errorf("%s: no CRD of the kind in %s", k.Kind.Name, dir)
			continue
		}
		if !slices.Equal(crd.Spec.Names.ShortNames, k.ShortNames) {
			t.Errorf("%s: the descriptor's short names are %v, the CRD's %v", k.Kind.Name, k.ShortNames, crd.Spec.Names.ShortNames)
		}
	}
}
