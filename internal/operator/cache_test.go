package operator

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestTheCacheMapperKnowsTheOptionalKindsScopes(t *testing.T) {
	snapshot := schema.GroupKind{Group: "snapshot.storage.k8s.io", Kind: "VolumeSnapshot"}
	served := meta.NewDefaultRESTMapper(nil)
	served.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, meta.RESTScopeNamespace)
	m := knownScopes{RESTMapper: served, mappings: optionalKinds}

	for _, versions := range [][]string{{"v1"}, nil, {""}} {
		got, err := m.RESTMapping(snapshot, versions...)
		if err != nil || got.Scope.Name() != meta.RESTScopeNameNamespace || got.Resource.Resource != "volumesnapshots" {
			t.Errorf("versions %q: %+v, %v; want the namespaced volumesnapshots", versions, got, err)
		}
	}
	// Another version of the kind, or another kind, is not made up.
	if _, err := m.RESTMapping(snapshot, "v1beta1"); !meta.IsNoMatchError(err) {
		t.Errorf("v1beta1: %v, want no match", err)
	}
	if _, err := m.RESTMapping(schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachine"}, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("a kind it does not know: %v, want no match", err)
	}
	// What the API server serves is answered by it.
	served.Add(schema.GroupVersionKind{Group: snapshot.Group, Version: "v1", Kind: snapshot.Kind}, meta.RESTScopeRoot)
	if got, err := m.RESTMapping(snapshot, "v1"); err != nil || got.Scope.Name() != meta.RESTScopeNameRoot {
		t.Errorf("served: %+v, %v; want the API server's mapping", got, err)
	}
	if got, err := m.RESTMapping(schema.GroupKind{Group: "apps", Kind: "DaemonSet"}, "v1"); err != nil || got.Resource.Resource != "daemonsets" {
		t.Errorf("DaemonSet: %+v, %v", got, err)
	}
}
