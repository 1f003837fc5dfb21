// Package v1alpha1 contains the fleet hub's API: NodewrightClusterSummary, one object per
// member cluster, written by cmd/nodewright-fleet on the hub. Members never see this group;
// the member chart does not ship its CRD.
//
// +kubebuilder:object:generate=true
// +groupName=fleet.nodewright.spectrocloud.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the fleet hub's kinds.
	GroupVersion = schema.GroupVersion{Group: "fleet.nodewright.spectrocloud.com", Version: "v1alpha1"}

	// SchemeBuilder registers the fleet hub's kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the fleet hub's kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
