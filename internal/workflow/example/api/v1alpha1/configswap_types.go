// Package v1alpha1 is the API of the example workflow (internal/workflow/example): a kind of
// its own group, installed only by the example's tests, never by the chart.
//
// +kubebuilder:object:generate=true
// +groupName=example.nodewright.spectrocloud.com
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

var (
	// GroupVersion is the example's group and version.
	GroupVersion = schema.GroupVersion{Group: "example.nodewright.spectrocloud.com", Version: "v1alpha1"}
	// SchemeBuilder registers the example's kind.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the example's kind to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// ConfigSwapSpec says which ConfigMap key gets which value.
type ConfigSwapSpec struct {
	// configMapName is the ConfigMap, in the swap's namespace, whose key changes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ConfigMapName string `json:"configMapName"`
	// key is the key that changes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
	// value is what the key holds once the swap succeeded.
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value"`
}

// ConfigSwapStatus is the workflow's status, shared by every workflow kind.
type ConfigSwapStatus struct {
	nwv1.WorkflowStatus `json:",inline"`
}

// ConfigSwap sets one key of a ConfigMap, with the value before kept in a backup and put
// back if the new one fails its check. The spec cannot change once the swap has started.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="ConfigMap",type=string,JSONPath=`.spec.configMapName`
// +kubebuilder:printcolumn:name="Key",type=string,JSONPath=`.spec.key`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.steps[?(@.state=="Running")].name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec",message="spec cannot change once the swap has started; delete it to cancel",fieldPath=".spec"
type ConfigSwap struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec ConfigSwapSpec `json:"spec"`
	// +optional
	Status ConfigSwapStatus `json:"status,omitempty"`
}

// GetWorkflowStatus is the swap's workflow status, which the engine reads and writes.
func (c *ConfigSwap) GetWorkflowStatus() *nwv1.WorkflowStatus { return &c.Status.WorkflowStatus }

// ConfigSwapList is a list of ConfigSwap.
//
// +kubebuilder:object:root=true
type ConfigSwapList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConfigSwap `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ConfigSwap{}, &ConfigSwapList{})
}
