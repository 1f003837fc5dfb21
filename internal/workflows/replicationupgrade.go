package workflows

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/spectrocloud/nodewright/internal/controller/replicationupgrade"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
)

// Its admission (internal/webhook/v1alpha1, workflowWebhooks).
// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-replicationupgrade,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=replicationupgrades,verbs=create;update,versions=v1alpha1,name=mreplicationupgrade-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-replicationupgrade,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=replicationupgrades,verbs=create;update,versions=v1alpha1,name=vreplicationupgrade-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-delete-nodewright-spectrocloud-com-v1alpha1-replicationupgrade,mutating=false,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=replicationupgrades,verbs=delete,versions=v1alpha1,name=vdeletereplicationupgrade-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,timeoutSeconds=5

// ReplicationUpgrade turns single-node storage into replicated storage.
var ReplicationUpgrade = register(replupgrade.Descriptor, &replicationupgrade.Reconciler{}, func(mgr ctrl.Manager, o Options) error {
	return (&replicationupgrade.Reconciler{Deps: o.Deps, AgentNamespace: o.AgentNamespace, LINSTOR: o.LINSTOR}).SetupWithManager(mgr)
})
