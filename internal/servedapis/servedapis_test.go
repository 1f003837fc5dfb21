package servedapis_test

import (
	"errors"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/spectrocloud/nodewright/internal/servedapis"
)

var (
	snapshot = schema.GroupVersionKind{Group: "snapshot.storage.k8s.io", Version: "v1", Kind: "VolumeSnapshot"}
	vm       = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"}
)

// discovery answers from a table of group versions; counts the questions.
type discovery struct {
	served map[string][]string // group version → kinds
	err    error
	asked  int
}

func (d *discovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.asked++
	if d.err != nil {
		return nil, d.err
	}
	kinds, ok := d.served[gv]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	list := &metav1.APIResourceList{GroupVersion: gv}
	for _, k := range kinds {
		list.APIResources = append(list.APIResources, metav1.APIResource{Kind: k, Name: strings.ToLower(k) + "s"})
	}
	return list, nil
}

func TestMissingAsksDiscoveryEveryTime(t *testing.T) {
	snapshotClass := snapshot.GroupVersion().WithKind("VolumeSnapshotClass")
	kinds := servedapis.Kinds{vm, snapshot, snapshotClass}
	d := &discovery{served: map[string][]string{"kubevirt.io/v1": {"VirtualMachine"}}}
	missing, err := kinds.Missing(d)
	if err != nil || missing.String() != "VolumeSnapshot.snapshot.storage.k8s.io/v1, VolumeSnapshotClass.snapshot.storage.k8s.io/v1" {
		t.Fatalf("Missing = %v, %v", missing, err)
	}
	if d.asked != 2 {
		t.Errorf("%d questions for two group versions", d.asked)
	}
	// A group version served without one of the kinds, as when one of two definitions is in.
	d.served["snapshot.storage.k8s.io/v1"] = []string{"VolumeSnapshotClass"}
	if missing, _ := kinds.Missing(d); missing.String() != "VolumeSnapshot.snapshot.storage.k8s.io/v1" {
		t.Errorf("with the class only, Missing = %v", missing)
	}
	// The version matters: v1beta1 does not serve v1.
	d.served = map[string][]string{"kubevirt.io/v1": {"VirtualMachine"}, "snapshot.storage.k8s.io/v1beta1": {"VolumeSnapshot", "VolumeSnapshotClass"}}
	if missing, _ := kinds.Missing(d); len(missing) != 2 {
		t.Errorf("with v1beta1 only, Missing = %v", missing)
	}
	d.served["snapshot.storage.k8s.io/v1"] = []string{"VolumeSnapshot", "VolumeSnapshotClass"}
	if missing, err := kinds.Missing(d); len(missing) != 0 || err != nil {
		t.Fatalf("all served: Missing = %v, %v", missing, err)
	}
	// A definition deleted since is noticed: nothing is kept between calls.
	delete(d.served, "snapshot.storage.k8s.io/v1")
	if missing, _ := kinds.Missing(d); len(missing) != 2 {
		t.Errorf("after the deletion, Missing = %v", missing)
	}
	// Discovery that cannot answer is an error, never a missing kind.
	d.err = errors.New("connection refused")
	if missing, err := kinds.Missing(d); err == nil || len(missing) != 0 || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("discovery failing: Missing = %v, %v", missing, err)
	}
}

func TestKindsNamesAndGroups(t *testing.T) {
	if s := (servedapis.Kinds{snapshot}).String(); s != "VolumeSnapshot.snapshot.storage.k8s.io/v1" {
		t.Errorf("String = %q", s)
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
