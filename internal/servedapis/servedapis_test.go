package servedapis_test

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/spectrocloud/nodewright/internal/servedapis"
)

var (
	snapshot = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshot"}
	vm       = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"}
)

func TestMissingAsksTheMapperForEachKind(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(vm, meta.RESTScopeNamespace)
	got := servedapis.Kinds{vm, snapshot}.Missing(mapper)
	if len(got) != 1 || got[0] != snapshot {
		t.Fatalf("Missing = %v, want only %v", got, snapshot)
	}
	if s := got.String(); s != "VolumeSnapshot.snapshot.storage.k8s.io/v1" {
		t.Errorf("String = %q", s)
	}
	// The version matters: a mapper that knows only v1beta1 does not serve v1.
	old := meta.NewDefaultRESTMapper(nil)
	old.Add(schema.GroupVersionKind{Group: snapshot.Group, Version: "v1beta1", Kind: snapshot.Kind}, meta.RESTScopeNamespace)
	if got := (servedapis.Kinds{snapshot}).Missing(old); len(got) != 1 {
		t.Errorf("v1 was found where only v1beta1 is served")
	}
	if got := (servedapis.Kinds{vm, snapshot, vm}).Groups(); strings.Join(got, ",") != "kubevirt.io,snapshot.storage.k8s.io" {
		t.Errorf("Groups = %v", got)
	}
}

func crd(kind string, established bool, versions ...string) apiextensionsv1.CustomResourceDefinition {
	c := apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: strings.ToLower(kind) + "s." + snapshot.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: snapshot.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind},
		},
	}
	for _, v := range versions {
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true})
	}
	status := apiextensionsv1.ConditionFalse
	if established {
		status = apiextensionsv1.ConditionTrue
	}
	c.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: status}}
	return c
}

func TestExplainSaysWhyEachKindIsMissing(t *testing.T) {
	deleting := crd("VolumeSnapshot", true, "v1")
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	for _, tc := range []struct {
		name       string
		crds       []apiextensionsv1.CustomResourceDefinition
		want       string
		catchingUp bool
	}{
		{"no definition", nil, "VolumeSnapshot.snapshot.storage.k8s.io/v1 (no CustomResourceDefinition defines it)", false},
		{"another kind of the group only", []apiextensionsv1.CustomResourceDefinition{crd("VolumeSnapshotClass", true, "v1")},
			"no CustomResourceDefinition defines it", false},
		{"an older version only", []apiextensionsv1.CustomResourceDefinition{crd("VolumeSnapshot", true, "v1beta1")},
			"its CustomResourceDefinition volumesnapshots.snapshot.storage.k8s.io serves only v1beta1", false},
		{"no served version", []apiextensionsv1.CustomResourceDefinition{crd("VolumeSnapshot", true)},
			"serves only no version", false},
		{"not established", []apiextensionsv1.CustomResourceDefinition{crd("VolumeSnapshot", false, "v1beta1", "v1")},
			"is not established yet", false},
		{"being deleted", []apiextensionsv1.CustomResourceDefinition{deleting}, "is being deleted", false},
		{"established: discovery catches up", []apiextensionsv1.CustomResourceDefinition{crd("VolumeSnapshot", true, "v1")},
			"was established a moment ago", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := servedapis.Explain(servedapis.Kinds{snapshot}, tc.crds)
			if !strings.HasPrefix(got.Message, "the API server does not serve VolumeSnapshot.snapshot.storage.k8s.io/v1 (") || !strings.Contains(got.Message, tc.want) {
				t.Errorf("Message = %q, want it to contain %q", got.Message, tc.want)
			}
			if got.CatchingUp != tc.catchingUp {
				t.Errorf("CatchingUp = %v, want %v", got.CatchingUp, tc.catchingUp)
			}
		})
	}
	// Two kinds: catching up only when both are.
	got := servedapis.Explain(servedapis.Kinds{snapshot, vm}, []apiextensionsv1.CustomResourceDefinition{crd("VolumeSnapshot", true, "v1")})
	if got.CatchingUp || !strings.Contains(got.Message, "VirtualMachine.kubevirt.io/v1 (no CustomResourceDefinition defines it)") {
		t.Errorf("two kinds, one defined: %+v", got)
	}
	if got := servedapis.Explain(nil, nil); got != (servedapis.Explanation{}) {
		t.Errorf("nothing missing: %+v", got)
	}
}

func TestLeanKeepsWhatExplainReads(t *testing.T) {
	full := crd("VolumeSnapshot", true, "v1beta1", "v1")
	full.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1<<20)}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	full.Spec.Versions[1].Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Description: strings.Repeat("y", 1<<20)}}
	full.Spec.Versions[0].Served = false
	out, err := servedapis.Lean(&full)
	if err != nil {
		t.Fatal(err)
	}
	lean := out.(*apiextensionsv1.CustomResourceDefinition)
	if lean.Annotations != nil || lean.ManagedFields != nil || lean.Spec.Versions[1].Schema != nil {
		t.Errorf("the lean definition keeps annotations, managed fields or a schema")
	}
	explain := func(c apiextensionsv1.CustomResourceDefinition) servedapis.Explanation {
		return servedapis.Explain(servedapis.Kinds{snapshot}, []apiextensionsv1.CustomResourceDefinition{c})
	}
	if got, want := explain(*lean), explain(full); got != want || !got.CatchingUp {
		t.Errorf("Explain reads the lean definition as %+v, the full one as %+v", got, want)
	}
	if lean.Name != full.Name {
		t.Errorf("name %q", lean.Name)
	}
	if other, _ := servedapis.Lean("not a definition"); other != "not a definition" {
		t.Errorf("Lean changed another type: %v", other)
	}
}
