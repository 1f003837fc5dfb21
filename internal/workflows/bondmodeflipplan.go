package workflows

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/controller/bondmodeflipplan"
)

// Its admission (internal/webhook/v1alpha1, workflowWebhooks).
// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-bondmodeflipplan,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=bondmodeflipplans,verbs=create;update,versions=v1alpha1,name=mbondmodeflipplan-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-bondmodeflipplan,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=bondmodeflipplans,verbs=create;update,versions=v1alpha1,name=vbondmodeflipplan-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-delete-nodewright-spectrocloud-com-v1alpha1-bondmodeflipplan,mutating=false,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=bondmodeflipplans,verbs=delete,versions=v1alpha1,name=vdeletebondmodeflipplan-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,timeoutSeconds=5

// BondModeFlipPlan changes the storage bond's mode on every node, one node at a time.
var BondModeFlipPlan = register(bondflip.Descriptor, &bondmodeflipplan.Reconciler{}, func(mgr ctrl.Manager, o Options) error {
	return (&bondmodeflipplan.Reconciler{Deps: o.Deps, AgentNamespace: o.AgentNamespace}).SetupWithManager(mgr)
})
