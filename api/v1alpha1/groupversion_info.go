// Package v1alpha1 contains the Nodewright API: the cluster health rollup (NodewrightCluster,
// NodewrightAgentStatus), the workflows (VMVolumeMigration, BondModeFlipPlan,
// ReplicationUpgrade) and the site definition (EdgeProfile).
//
// +kubebuilder:object:generate=true
// +groupName=nodewright.spectrocloud.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every Nodewright kind.
	GroupVersion = schema.GroupVersion{Group: "nodewright.spectrocloud.com", Version: "v1alpha1"}

	// SchemeBuilder registers the Nodewright kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Nodewright kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
