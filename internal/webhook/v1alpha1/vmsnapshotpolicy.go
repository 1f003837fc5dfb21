package v1alpha1

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
)

// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-vmsnapshotpolicy,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=vmsnapshotpolicies,verbs=create;update,versions=v1alpha1,name=mvmsnapshotpolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-vmsnapshotpolicy,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=vmsnapshotpolicies,verbs=create;update,versions=v1alpha1,name=vvmsnapshotpolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1

// namespaceLabel is the label Kubernetes puts on every namespace with its name: a VM selector
// naming it reaches for a namespace, which VM labels do not carry.
const namespaceLabel = "kubernetes.io/metadata.name"

// admitSnapshotPolicy refuses what the CRD's schema cannot check: a cron expression or time
// zone the schedule's parser refuses, a label selector that is not one, and a selector that
// reaches for another namespace. minGood above keepLast and a namespace/name in names are the
// schema's (CEL) refusals.
func admitSnapshotPolicy(_ context.Context, p *nwv1.VMSnapshotPolicy) (admission.Warnings, error) {
	if _, err := vmsnapshot.ParseSchedule(p.Spec.Schedule.Cron, p.Spec.Schedule.TimeZone, "spec.schedule"); err != nil {
		return nil, err
	}
	s := p.Spec.VMSelector
	sel := &metav1.LabelSelector{MatchLabels: s.MatchLabels, MatchExpressions: s.MatchExpressions}
	path := field.NewPath("spec", "vmSelector")
	if errs := metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, path); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	if _, ok := s.MatchLabels[namespaceLabel]; ok {
		return nil, fmt.Errorf("spec.vmSelector.matchLabels[%s]: a policy selects VMs in its own namespace (%s) only; VMs do not carry their namespace as a label, and another namespace is never reached", namespaceLabel, p.Namespace)
	}
	for i, e := range s.MatchExpressions {
		if e.Key == namespaceLabel {
			return nil, fmt.Errorf("spec.vmSelector.matchExpressions[%d].key: %s: a policy selects VMs in its own namespace (%s) only; VMs do not carry their namespace as a label, and another namespace is never reached", i, namespaceLabel, p.Namespace)
		}
	}
	return nil, nil
}
