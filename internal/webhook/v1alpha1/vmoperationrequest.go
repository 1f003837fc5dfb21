package v1alpha1

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/selfservice"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// The admission of VMOperationRequests (docs/selfservice.md). The mutating webhook writes
// spec.requester: the user, groups and extra attributes the API server authenticated. The
// validating webhook refuses a request unless
//
//   - spec.requester is that user: a request that names someone else (a forgery, or a
//     mutating webhook that ran after ours) is refused;
//   - the SelfServicePolicy offers the operation in the namespace (and, for a MigrateVolume,
//     the StorageClass), and the namespace has fewer than its maxQueued unfinished requests of
//     the operation;
//   - the API server says, by SubjectAccessReview, that the requester may do the native verb
//     (create virtualmachinesnapshots, say) and Nodewright's (create
//     vmoperationrequests/<operation>). Both answers are recorded in the audit trail. They
//     are asked first: whoever may not ask learns nothing of the VM;
//   - the VM, and a Restore's snapshot, are ones it can be done with (selfservice.Subject).
//
// The spec never changes (the CRD's rule). An approval (the approve annotation) is refused
// unless it names the request's operation, comes from someone other than the requester, and
// the request has not started or ended. The controller checks all of it again before it acts.

// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-vmoperationrequest,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=vmoperationrequests,verbs=create;update,versions=v1alpha1,name=mvmoperationrequest-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-vmoperationrequest,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=vmoperationrequests,verbs=create;update,versions=v1alpha1,name=vvmoperationrequest-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-selfservicepolicy,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=selfservicepolicies,verbs=create;update,versions=v1alpha1,name=mselfservicepolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-selfservicepolicy,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=selfservicepolicies,verbs=create;update,versions=v1alpha1,name=vselfservicepolicy-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1

// The webhook asks the API server whether a requester may do what they ask.
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Authorized is the outcome recorded for a request's access checks that all allowed it.
const Authorized = "Authorized"

// vmOperationRequests admits VMOperationRequests.
type vmOperationRequests struct {
	// reader reads the API server; client asks it the SubjectAccessReviews.
	reader    client.Reader
	client    client.Client
	decisions *Decisions
	clock     clock.PassiveClock
}

// requestUser is the admission request's user, as the API server authenticated them.
func requestUser(ctx context.Context) (nwv1.RequestUser, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nwv1.RequestUser{}, err
	}
	u := nwv1.RequestUser{Username: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups}
	if len(req.UserInfo.Extra) > 0 {
		u.Extra = make(map[string]nwv1.ExtraValue, len(req.UserInfo.Extra))
		for k, v := range req.UserInfo.Extra {
			u.Extra[k] = nwv1.ExtraValue(v)
		}
	}
	return u, nil
}

// sameUser reports whether a and b are the same user with the same groups and attributes.
func sameUser(a, b nwv1.RequestUser) bool {
	if a.Username != b.Username || a.UID != b.UID || !reflect.DeepEqual(nonEmpty(a.Groups), nonEmpty(b.Groups)) || len(a.Extra) != len(b.Extra) {
		return false
	}
	for k, v := range a.Extra {
		if w, ok := b.Extra[k]; !ok || !reflect.DeepEqual(nonEmpty(v), nonEmpty(w)) {
			return false
		}
	}
	return true
}

func nonEmpty[T ~[]string](s T) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// defaults writes spec.requester when the request leaves it unset. One naming someone else is
// left for the validating webhook to refuse: a forged requester is refused, never silently
// replaced.
func (v *vmOperationRequests) defaults(ctx context.Context, r *nwv1.VMOperationRequest) ([]fieldDefault, error) {
	if r.Spec.Requester != nil {
		return nil, nil
	}
	u, err := requestUser(ctx)
	if err != nil {
		return nil, err
	}
	return []fieldDefault{{field: "spec.requester", pointer: "/spec/requester", value: u, text: u.Username}}, nil
}

func (v *vmOperationRequests) now() metav1.Time {
	if v.clock == nil {
		return metav1.Now()
	}
	return metav1.NewTime(v.clock.Now())
}

func (v *vmOperationRequests) create(ctx context.Context, r *nwv1.VMOperationRequest) (admission.Warnings, error) {
	u, err := requestUser(ctx)
	if err != nil {
		return nil, err
	}
	if _, set := r.Annotations[nwv1.AnnotationApprove]; set {
		return nil, field.Forbidden(field.NewPath("metadata", "annotations").Key(nwv1.AnnotationApprove),
			"a request is approved by an administrator once it is made, never by the request itself")
	}
	if r.Spec.Requester == nil || !sameUser(*r.Spec.Requester, u) {
		return nil, field.Invalid(field.NewPath("spec", "requester"), requesterName(r),
			"is written by Nodewright's admission webhook: the user who creates the request, "+u.Username+", as the API server authenticated them")
	}
	policy, err := v.policy(ctx)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := v.reader.Get(ctx, client.ObjectKey{Name: r.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", r.Namespace, err)
	}
	rules, why := selfservice.Offered(policy, r.Spec.Operation, r.Namespace, ns.Labels)
	if rules == nil {
		return nil, field.Forbidden(field.NewPath("spec", "operation"), why)
	}
	if why := selfservice.Permits(rules, r); why != "" {
		return nil, fmt.Errorf("%s", why)
	}
	checks, err := selfservice.Checks(r.Spec.Operation, r.Namespace, r.Spec.VM)
	if err != nil {
		return nil, err
	}
	decisions, err := selfservice.Authorize(ctx, v.client, u, checks)
	if err != nil {
		return nil, err
	}
	if d := selfservice.Denied(decisions); d != nil {
		return nil, field.Forbidden(field.NewPath("spec", "operation"), fmt.Sprintf("%s may not %s on VirtualMachine %s: the API server denied %s (%s)",
			u.Username, r.Spec.Operation, r.Spec.VM, d.Check, selfservice.Summary(decisions)))
	}
	if _, _, err := selfservice.Subject(ctx, v.reader, r, v.now().Time); err != nil {
		return nil, err
	}
	var reqs nwv1.VMOperationRequestList
	if err := v.reader.List(ctx, &reqs, client.InNamespace(r.Namespace)); err != nil {
		return nil, fmt.Errorf("reading the namespace's VMOperationRequests: %w", err)
	}
	if n := selfservice.Queued(reqs.Items, r.Spec.Operation); n >= int(rules.MaxQueued) {
		return nil, field.Forbidden(field.NewPath("spec", "operation"), fmt.Sprintf("namespace %s has %d unfinished %s requests, the most SelfServicePolicy %s allows (maxQueued %d): wait for one to end",
			r.Namespace, n, r.Spec.Operation, policy.Name, rules.MaxQueued))
	}
	details := make([]audit.Detail, 0, len(decisions)+1)
	for i, d := range decisions {
		details = append(details, audit.Detail{Name: fmt.Sprintf("accessCheck%d", i+1), Value: d.String()})
	}
	if r.Spec.Reason != "" {
		details = append(details, audit.Detail{Name: "reason", Value: r.Spec.Reason})
	}
	v.decisions.record(ctx, r, "VMOperationRequest", Authorized, fmt.Sprintf("%s of VirtualMachine %s: %s", r.Spec.Operation, r.Spec.VM, selfservice.Summary(decisions)), details...)
	return nil, nil
}

// requesterName is the request's spec.requester.username, for a refusal.
func requesterName(r *nwv1.VMOperationRequest) string {
	if r.Spec.Requester == nil {
		return ""
	}
	return r.Spec.Requester.Username
}

// policy reads the SelfServicePolicy; nil when there is none.
func (v *vmOperationRequests) policy(ctx context.Context) (*nwv1.SelfServicePolicy, error) {
	p := &nwv1.SelfServicePolicy{}
	if err := v.reader.Get(ctx, client.ObjectKey{Name: nwv1.SelfServicePolicyName}, p); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading SelfServicePolicy %s: %w", nwv1.SelfServicePolicyName, err)
	}
	return p, nil
}

// update refuses an approval that does not name the operation, is the requester's own, or
// comes once the request started or ended. Withdrawing one, or leaving it, is allowed.
func (v *vmOperationRequests) update(ctx context.Context, old, r *nwv1.VMOperationRequest) (admission.Warnings, error) {
	approve, set := r.Annotations[nwv1.AnnotationApprove]
	if before, was := old.Annotations[nwv1.AnnotationApprove]; !set || (was && before == approve) {
		return nil, nil
	}
	path := field.NewPath("metadata", "annotations").Key(nwv1.AnnotationApprove)
	u, err := requestUser(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case approve != string(r.Spec.Operation):
		return nil, field.Invalid(path, approve, fmt.Sprintf("an approval names the request's operation, %s", r.Spec.Operation))
	case r.Spec.Requester != nil && u.Username == r.Spec.Requester.Username:
		return nil, field.Forbidden(path, fmt.Sprintf("%s made this request: a request is approved by someone else", u.Username))
	case old.Status.Phase == nwv1.VMOperationRunning || !selfservice.Unfinished(old.Status.Phase):
		return nil, field.Forbidden(path, fmt.Sprintf("the request is %s: a request is approved before it starts", old.Status.Phase))
	}
	return nil, nil
}

// admitSelfServicePolicy refuses what the CRD's schema cannot check: a maintenance window the
// engine's parser refuses, and a namespace selector that is not one.
func admitSelfServicePolicy(_ context.Context, p *nwv1.SelfServicePolicy) (admission.Warnings, error) {
	if s := p.Spec.NamespaceSelector; s != nil {
		path := field.NewPath("spec", "namespaceSelector")
		if errs := metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, path); len(errs) > 0 {
			return nil, errs.ToAggregate()
		}
	}
	var errs []string
	for _, op := range p.Spec.Operations {
		if op.MaintenanceWindow == nil {
			continue
		}
		if _, err := workflow.ParseWindow(op.MaintenanceWindow, "spec.operations["+string(op.Operation)+"].maintenanceWindow"); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil, nil
}
