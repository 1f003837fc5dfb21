package v1alpha1

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/text"
)

// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-bootrecoverypolicy,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=bootrecoverypolicies,verbs=create;update,versions=v1alpha1,name=mbootrecoverypolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-bootrecoverypolicy,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=bootrecoverypolicies,verbs=create;update,versions=v1alpha1,name=vbootrecoverypolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1

// ackEntry is one acknowledgement of a BootRecoveryPolicy: a node's name and the boot ID that
// fell back.
var ackEntry = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*@[A-Za-z0-9-]{1,64}$`)

// admitBootRecovery refuses a BootRecoveryPolicy not named as the singleton, and an
// acknowledgement that is not "node@bootID" entries: one without the boot would acknowledge
// nothing, silently.
func admitBootRecovery(_ context.Context, p *nwv1.BootRecoveryPolicy) (admission.Warnings, error) {
	if p.Name != nwv1.BootRecoveryPolicyName {
		return nil, fmt.Errorf("metadata.name: BootRecoveryPolicy is a singleton and must be named %q, not %q", nwv1.BootRecoveryPolicyName, p.Name)
	}
	v, ok := p.Annotations[nwv1.AnnotationAcknowledgeFallback]
	if !ok {
		return nil, nil
	}
	if len(v) > 8192 {
		return nil, fmt.Errorf("metadata.annotations[%s]: %d bytes, more than 8192", nwv1.AnnotationAcknowledgeFallback, len(v))
	}
	for i, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" || !ackEntry.MatchString(e) {
			return nil, fmt.Errorf("metadata.annotations[%s]: entry %d, %q, is not NODE@BOOTID: a fallback is acknowledged by its node and the boot that fell back (status.nodes[].lastFallback.bootID)",
				nwv1.AnnotationAcknowledgeFallback, i+1, text.Shorten(e, 300))
		}
	}
	return nil, nil
}
