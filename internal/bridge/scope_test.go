package bridge

import (
	"strconv"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// scoped is a cluster whose ConfigMap and DaemonSet are in the given namespaces.
func scoped(cmNS, dsNS string) *nwv1.NodewrightCluster {
	return &nwv1.NodewrightCluster{Spec: nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{
		ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: cmNS, Name: "node-init-state"},
		DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: dsNS, Name: "node-init"},
		EventComponent: "node-init",
	}}}
}

func TestInScopeWithoutALegacyNamespaceReadsEverywhere(t *testing.T) {
	for _, c := range []*nwv1.NodewrightCluster{scoped("a", "b"), scoped("edge", "edge"), scoped("", "")} {
		if err := InScope(c, ""); err != nil {
			t.Errorf("InScope(%+v, \"\") = %v; want nil: no --legacy-namespace reads every namespace", c.Spec.Legacy, err)
		}
	}
}

func TestInScopeAdmitsObjectsInTheLegacyNamespace(t *testing.T) {
	if err := InScope(scoped("edge", "edge"), "edge"); err != nil {
		t.Errorf("both refs in the legacy namespace: %v; want nil", err)
	}
}

func TestInScopeNamesTheFieldOutOfScope(t *testing.T) {
	const (
		cmField = "spec.legacy.configMapRef.namespace"
		dsField = "spec.legacy.daemonSetRef.namespace"
	)
	for _, tc := range []struct {
		name       string
		cluster    *nwv1.NodewrightCluster
		field      string // the field the error names
		other      string // the field it must not name
		outOfScope string // the namespace it names as not read
	}{
		{"the ConfigMap elsewhere", scoped("kube-system", "edge"), cmField, dsField, "kube-system"},
		{"the DaemonSet elsewhere", scoped("edge", "kube-system"), dsField, cmField, "kube-system"},
		// Both out of scope: the first field is reported, and only it.
		{"both elsewhere", scoped("one", "two"), cmField, dsField, "one"},
		// An empty namespace is not the legacy namespace either.
		{"the ConfigMap's namespace empty", scoped("", "edge"), cmField, dsField, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := InScope(tc.cluster, "edge")
			if err == nil {
				t.Fatalf("InScope(%+v, edge) = nil; want an error naming %s", tc.cluster.Spec.Legacy, tc.field)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tc.field+": ") {
				t.Errorf("%q does not start with the field %s", msg, tc.field)
			}
			if strings.Contains(msg, tc.other) {
				t.Errorf("%q names %s too, which is in scope or not the first out of it", msg, tc.other)
			}
			if want := strconv.Quote(tc.outOfScope); !strings.Contains(msg, want) {
				t.Errorf("%q does not name the namespace out of scope, %s", msg, want)
			}
			if !strings.Contains(msg, `namespace "edge"`) {
				t.Errorf("%q does not name the legacy namespace the operator reads, \"edge\"", msg)
			}
		})
	}
}
