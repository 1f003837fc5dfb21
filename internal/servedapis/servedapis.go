// Package servedapis tells whether the API server serves the kinds a controller needs, and
// why not when it does not.
//
// Nodewright's read-only bridge must run on any cluster, while VMVolumeMigration needs
// KubeVirt's and the CSI snapshot APIs, which a cluster may gain, or lose, while the operator
// runs. Kinds.Missing asks discovery; Explain reads the CustomResourceDefinitions to say
// precisely what is wrong.
package servedapis

import (
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kinds are the kinds, at one version each, that a controller reads or writes.
type Kinds []schema.GroupVersionKind

// Groups are the API groups of the kinds.
func (k Kinds) Groups() []string {
	var groups []string
	for _, gvk := range k {
		if !slices.Contains(groups, gvk.Group) {
			groups = append(groups, gvk.Group)
		}
	}
	return groups
}

// String names the kinds as kubectl does, Kind.group/version, comma-separated.
func (k Kinds) String() string {
	names := make([]string, len(k))
	for i, gvk := range k {
		names[i] = Name(gvk)
	}
	return strings.Join(names, ", ")
}

// Name is gvk as Kind.group/version.
func Name(gvk schema.GroupVersionKind) string {
	return gvk.Kind + "." + gvk.Group + "/" + gvk.Version
}

// Explanation says why missing kinds are not served.
type Explanation struct {
	// Message names each missing kind and why it is missing, from its
	// CustomResourceDefinition when there is one.
	Message string
	// Catching up: every missing kind has an established definition that serves its
	// version, so discovery has not caught up yet and the kinds will be found in a moment.
	CatchingUp bool
}

// Explain says, for each missing kind, what the CustomResourceDefinitions in crds show:
// none defines it, or the one that does is not established yet, or does not serve the
// version. It is pure, so that every case is tested without a cluster.
func Explain(missing Kinds, crds []apiextensionsv1.CustomResourceDefinition) Explanation {
	if len(missing) == 0 {
		return Explanation{}
	}
	parts := make([]string, 0, len(missing))
	catchingUp := true
	for _, gvk := range missing {
		why, served := explainOne(gvk, crds)
		catchingUp = catchingUp && served
		parts = append(parts, Name(gvk)+" ("+why+")")
	}
	return Explanation{
		Message:    "the API server does not serve " + strings.Join(parts, ", "),
		CatchingUp: catchingUp,
	}
}

// explainOne says why gvk is missing, and whether its definition says it is served.
func explainOne(gvk schema.GroupVersionKind, crds []apiextensionsv1.CustomResourceDefinition) (why string, served bool) {
	for i := range crds {
		crd := &crds[i]
		if crd.Spec.Group != gvk.Group || crd.Spec.Names.Kind != gvk.Kind {
			continue
		}
		var versions []string
		serves := false
		for _, v := range crd.Spec.Versions {
			if v.Served {
				versions = append(versions, v.Name)
				serves = serves || v.Name == gvk.Version
			}
		}
		switch {
		case !crd.DeletionTimestamp.IsZero():
			return fmt.Sprintf("its CustomResourceDefinition %s is being deleted", crd.Name), false
		case !serves:
			return fmt.Sprintf("its CustomResourceDefinition %s serves only %s", crd.Name, orNone(versions)), false
		case !established(crd):
			return fmt.Sprintf("its CustomResourceDefinition %s is not established yet", crd.Name), false
		default:
			return fmt.Sprintf("its CustomResourceDefinition %s was established a moment ago", crd.Name), true
		}
	}
	return "no CustomResourceDefinition defines it", false
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

func orNone(versions []string) string {
	if len(versions) == 0 {
		return "no version"
	}
	return strings.Join(versions, ", ")
}

// Lean keeps of a CustomResourceDefinition only what Explain reads, so that a cache of them
// stays small: KubeVirt's definitions carry megabytes of OpenAPI schema. It is a cache
// transform (cache.ByObject.Transform).
func Lean(obj any) (any, error) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return obj, nil
	}
	lean := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta: crd.TypeMeta,
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: crd.Spec.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: crd.Spec.Names.Kind, Plural: crd.Spec.Names.Plural},
			Scope: crd.Spec.Scope,
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: crd.Status.Conditions},
	}
	// The object is the informer's own, just decoded: its metadata can be moved over. The
	// annotations go too: kubectl's last-applied-configuration holds the whole definition.
	lean.ObjectMeta = crd.ObjectMeta
	lean.ManagedFields = nil
	lean.Annotations = nil
	for _, v := range crd.Spec.Versions {
		lean.Spec.Versions = append(lean.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v.Name, Served: v.Served, Storage: v.Storage})
	}
	return lean, nil
}
