package workflows

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/spectrocloud/nodewright/internal/controller/osversionpolicy"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
)

// Its admission (internal/webhook/v1alpha1, workflowWebhooks).
// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-osversionpolicy,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=osversionpolicies,verbs=create;update,versions=v1alpha1,name=mosversionpolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-osversionpolicy,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=osversionpolicies,verbs=create;update,versions=v1alpha1,name=vosversionpolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-delete-nodewright-spectrocloud-com-v1alpha1-osversionpolicy,mutating=false,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=osversionpolicies,verbs=delete,versions=v1alpha1,name=vdeleteosversionpolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,timeoutSeconds=5

// OSVersionPolicy moves the selected Kairos nodes to one OS image, proven booted node by node.
var OSVersionPolicy = register(osupgrade.Descriptor, &osversionpolicy.Reconciler{}, func(mgr ctrl.Manager, o Options) error {
	return (&osversionpolicy.Reconciler{Deps: o.Deps, AgentNamespace: o.AgentNamespace, LINSTOR: o.LINSTOR}).SetupWithManager(mgr)
})
