package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/management"
)

// stampedAnnotation is an annotation that says who did something, as the API server
// authenticated them. Only the mutating webhook writes it: whatever a request says about it,
// the annotation ends up as the stamp's rule says, so that no one can forge, rewrite or remove
// it; the validating webhook refuses an object whose annotation differs from that (another
// mutating webhook that ran after ours changed it).
type stampedAnnotation struct {
	key string
	// want is the annotation's value after the request r that turns the stored object into
	// obj, and whether it is there at all.
	want func(r stampRequest, obj client.Object) (value string, present bool)
	// dropped ends "the request set KEY to VALUE ...; removed": why the annotation may not be
	// there.
	dropped string
	// meaning ends the refusal "is set by Nodewright's admission webhook to ...".
	meaning string
	// decision is the outcome recorded when a request tried to set, change or remove it.
	decision string
}

// requestedBy is the user who created the object, kept as it is through every update.
var requestedBy = stampedAnnotation{
	key: nwv1.AnnotationRequestedBy,
	want: func(r stampRequest, _ client.Object) (string, bool) {
		if r.create {
			return r.user, true
		}
		v, ok := r.old[nwv1.AnnotationRequestedBy]
		return v, ok
	},
	dropped:  "on an object created without it",
	meaning:  "the user who created the object",
	decision: RequesterKept,
}

// approvedBy is the user who set the approve annotation to its value: stamped when a request
// sets or changes it, kept while it stays, removed with it.
var approvedBy = stampedAnnotation{
	key:      nwv1.AnnotationApprovedBy,
	want:     stampedWith(nwv1.AnnotationApprove, nwv1.AnnotationApprovedBy),
	dropped:  "without setting " + nwv1.AnnotationApprove,
	meaning:  "the user who set " + nwv1.AnnotationApprove,
	decision: ApproverKept,
}

// acknowledgedBy is the user who set an OSVersionPolicy's acknowledge-fallback annotation to
// its value: stamped when a request sets or changes it, kept while it stays, removed with it,
// as approvedBy is.
var acknowledgedBy = stampedAnnotation{
	key:      nwv1.AnnotationAcknowledgedBy,
	want:     stampedWith(nwv1.AnnotationAcknowledgeFallback, nwv1.AnnotationAcknowledgedBy),
	dropped:  "without setting " + nwv1.AnnotationAcknowledgeFallback,
	meaning:  "the user who set " + nwv1.AnnotationAcknowledgeFallback,
	decision: AcknowledgerKept,
}

// stampedWith is the rule of an annotation (by) that names who set another (set): the
// request's user when the request sets or changes it, kept while it stays, removed with it.
func stampedWith(set, by string) func(r stampRequest, obj client.Object) (string, bool) {
	return func(r stampRequest, obj client.Object) (string, bool) {
		value, isSet := obj.GetAnnotations()[set]
		before, wasSet := r.old[set]
		switch {
		case !isSet:
			if wasSet {
				return "", false
			}
		case !wasSet || value != before:
			return r.user, true
		}
		v, ok := r.old[by]
		return v, ok
	}
}

// managementSetBy is the user who last set a NodewrightCluster's spec.management: stamped when
// it is created and whenever a request changes the mode, kept otherwise. Other kinds have no
// spec.management, and never get it.
var managementSetBy = stampedAnnotation{
	key: nwv1.AnnotationManagementSetBy,
	want: func(r stampRequest, obj client.Object) (string, bool) {
		if c, ok := obj.(*nwv1.NodewrightCluster); ok && (r.create || management.Requested(c) != r.oldManagement) {
			return r.user, true
		}
		v, ok := r.old[nwv1.AnnotationManagementSetBy]
		return v, ok
	},
	dropped:  "without setting spec.management",
	meaning:  "the user who last set spec.management",
	decision: ManagementSetterKept,
}

// stamps are the stamped annotations of every Nodewright object.
var stamps = []stampedAnnotation{requestedBy, approvedBy, acknowledgedBy, managementSetBy}

// stampRequest is what the stamps' rules read from an admission request.
type stampRequest struct {
	user   string
	create bool
	// old holds the stored object's annotations; nil on create.
	old map[string]string
	// oldManagement is the stored NodewrightCluster's spec.management (Observe when unset).
	oldManagement nwv1.ManagementMode
}

// readStampRequest reads the request's user and, on update, the stored object's annotations.
// ok is false for an operation the stamps do not apply to.
func readStampRequest(req admission.Request) (r stampRequest, ok bool, err error) {
	r.user = req.UserInfo.Username
	switch req.Operation {
	case admissionv1.Create:
		r.create = true
		return r, true, nil
	case admissionv1.Update:
		// Only what the stamps read: the annotations, and a NodewrightCluster's mode.
		var old struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Management nwv1.ManagementMode `json:"management"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return r, false, fmt.Errorf("reading the object being updated: %w", err)
		}
		r.old = old.Metadata.Annotations
		r.oldManagement = management.Requested(&nwv1.NodewrightCluster{Spec: nwv1.NodewrightClusterSpec{Management: old.Spec.Management}})
		return r, true, nil
	}
	return r, false, nil
}

// stampDecision is a request's try to set a stamped annotation, to record.
type stampDecision struct {
	to, message string
}

// stampPatches says how to make every stamped annotation of obj say what its rule says, as JSON
// patch operations (none when obj already does), and which of them the request tried to set.
func stampPatches(req admission.Request, obj client.Object) ([]jsonpatch.JsonPatchOperation, []stampDecision, error) {
	r, ok, err := readStampRequest(req)
	if err != nil || !ok {
		return nil, nil, err
	}
	annotations := obj.GetAnnotations()
	var patches []jsonpatch.JsonPatchOperation
	var decisions []stampDecision
	added := map[string]string{}
	for _, s := range stamps {
		want, keep := s.want(r, obj)
		have, had := annotations[s.key]
		if have == want && had == keep {
			continue
		}
		switch {
		case !keep:
			patches = append(patches, jsonpatch.NewOperation("remove", annotationPointer(s.key), nil))
		case annotations == nil:
			added[s.key] = want
		default:
			patches = append(patches, jsonpatch.NewOperation("add", annotationPointer(s.key), want))
		}
		if msg := s.message(have, had, r.old, want, keep); msg != "" {
			decisions = append(decisions, stampDecision{to: s.decision, message: msg})
		}
	}
	// Without annotations the stamps make the map, in one operation: two would each replace it.
	if len(added) > 0 {
		patches = append(patches, jsonpatch.NewOperation("add", "/metadata/annotations", added))
	}
	return patches, decisions, nil
}

// message says what the request tried to do to the annotation and what it got; empty when the
// request left it as the stored object had it.
func (s stampedAnnotation) message(have string, had bool, old map[string]string, want string, keep bool) string {
	before, wasSet := old[s.key]
	switch {
	case had == wasSet && have == before:
		return ""
	case had && keep:
		return fmt.Sprintf("the request set %s to %q; it stays %q", s.key, have, want)
	case had:
		return fmt.Sprintf("the request set %s to %q %s; removed", s.key, have, s.dropped)
	case keep:
		return fmt.Sprintf("the request removed %s; it stays %q", s.key, want)
	}
	return ""
}

// annotationPointer is the JSON pointer of the annotation key.
func annotationPointer(key string) string {
	return "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// checkStamps refuses an object whose stamped annotations are not what stampPatches would
// have written: another mutating webhook that ran after ours changed them.
func checkStamps(ctx context.Context, obj client.Object) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return err
	}
	r, ok, err := readStampRequest(req)
	if err != nil || !ok {
		return err
	}
	annotations := obj.GetAnnotations()
	for _, s := range stamps {
		want, keep := s.want(r, obj)
		if have, had := annotations[s.key]; have != want || had != keep {
			return fmt.Errorf("metadata.annotations[%s]: is set by Nodewright's admission webhook to %s and cannot be changed", s.key, s.meaning)
		}
	}
	return nil
}

// requester is the user who created obj, as stamped.
func requester(obj client.Object) string {
	return obj.GetAnnotations()[nwv1.AnnotationRequestedBy]
}

// approvesAWaitingStep refuses an approval of a workflow's step that does not wait (state
// Waiting in the stored object's status): a person approves a step when it is next and they
// have seen what came before, never ahead of time, and never on a new object (whose manifest
// may carry an old approval). Withdrawing an approval, or leaving it as it was, is always
// allowed. old is nil on create.
func approvesAWaitingStep(obj, old client.Object) error {
	type workflow interface{ GetWorkflowStatus() *nwv1.WorkflowStatus }
	approve, set := obj.GetAnnotations()[nwv1.AnnotationApprove]
	if _, isWorkflow := obj.(workflow); !set || !isWorkflow {
		return nil
	}
	field := fmt.Sprintf("metadata.annotations[%s]", nwv1.AnnotationApprove)
	if old == nil {
		return fmt.Errorf("%s: a step can be approved only while it waits for approval; this one has not started", field)
	}
	if before, wasSet := old.GetAnnotations()[nwv1.AnnotationApprove]; wasSet && before == approve {
		return nil
	}
	stored, ok := old.(workflow)
	if !ok {
		return nil
	}
	for _, s := range stored.GetWorkflowStatus().Steps {
		if s.Name == approve {
			if s.State == nwv1.StepWaiting {
				return nil
			}
			return fmt.Errorf("%s: step %q is %s; a step can be approved only while it waits for approval", field, approve, s.State)
		}
	}
	return fmt.Errorf("%s: there is no step %q; a step can be approved only while it waits for approval", field, approve)
}
