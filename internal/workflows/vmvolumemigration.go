package workflows

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/migration"
)

// Its admission (internal/webhook/v1alpha1, workflowWebhooks).
// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-vmvolumemigration,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=vmvolumemigrations,verbs=create;update,versions=v1alpha1,name=mvmvolumemigration-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-vmvolumemigration,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=vmvolumemigrations,verbs=create;update,versions=v1alpha1,name=vvmvolumemigration-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-delete-nodewright-spectrocloud-com-v1alpha1-vmvolumemigration,mutating=false,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=vmvolumemigrations,verbs=delete,versions=v1alpha1,name=vdeletevmvolumemigration-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,timeoutSeconds=5

// VMVolumeMigration moves one volume of a KubeVirt VM onto a new claim, verified.
var VMVolumeMigration = register(migration.Descriptor, &vmvolumemigration.Reconciler{}, func(mgr ctrl.Manager, o Options) error {
	return (&vmvolumemigration.Reconciler{Deps: o.Deps, CopyImage: o.CopyImage}).SetupWithManager(mgr)
})
