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
)

// stamp is what the mutating webhook does to the requested-by annotation.
type stamp struct {
	// patch sets (or, on an object that never had it, removes) the annotation; nil when the
	// object already carries what it should.
	patch *jsonpatch.JsonPatchOperation
	// message is set when the request itself tried to set another value: the decision to
	// keep the stamp is recorded.
	message string
}

// annotationPointer is the JSON pointer of the requested-by annotation.
var annotationPointer = "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(nwv1.AnnotationRequestedBy, "~", "~0"), "/", "~1")

// stampPatch says how to make the requested-by annotation say who asked: on create, the user
// the API server authenticated; on update, the value the object already had, whatever the
// request says, so that no one can forge or rewrite it.
func stampPatch(req admission.Request, obj client.Object) (stamp, error) {
	want, keep := "", false
	switch req.Operation {
	case admissionv1.Create:
		want, keep = req.UserInfo.Username, true
	case admissionv1.Update:
		var err error
		if want, keep, err = oldRequester(req); err != nil {
			return stamp{}, err
		}
	default:
		return stamp{}, nil
	}
	annotations := obj.GetAnnotations()
	have, had := annotations[nwv1.AnnotationRequestedBy]
	if have == want && had == keep {
		return stamp{}, nil
	}
	var st stamp
	switch {
	case !keep:
		st.patch = &jsonpatch.JsonPatchOperation{Operation: "remove", Path: annotationPointer}
	case annotations == nil:
		st.patch = &jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/annotations",
			Value: map[string]string{nwv1.AnnotationRequestedBy: want}}
	default:
		st.patch = &jsonpatch.JsonPatchOperation{Operation: "add", Path: annotationPointer, Value: want}
	}
	if had {
		st.message = fmt.Sprintf("the request set %s to %q; it stays %q", nwv1.AnnotationRequestedBy, have, want)
		if !keep {
			st.message = fmt.Sprintf("the request set %s to %q on an object created without it; removed", nwv1.AnnotationRequestedBy, have)
		}
	} else if req.Operation == admissionv1.Update {
		st.message = fmt.Sprintf("the request removed %s; it stays %q", nwv1.AnnotationRequestedBy, want)
	}
	return st, nil
}

// oldRequester reads the requested-by annotation of the object being updated.
func oldRequester(req admission.Request) (string, bool, error) {
	var old metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return "", false, fmt.Errorf("reading the object being updated: %w", err)
	}
	v, ok := old.Annotations[nwv1.AnnotationRequestedBy]
	return v, ok, nil
}

// checkRequester refuses an object whose requested-by annotation is not what stampRequester
// would have written: another mutating webhook that ran after ours changed it.
func checkRequester(ctx context.Context, obj client.Object) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return err
	}
	have, had := obj.GetAnnotations()[nwv1.AnnotationRequestedBy]
	want, keep := req.UserInfo.Username, true
	if req.Operation == admissionv1.Update {
		if want, keep, err = oldRequester(req); err != nil {
			return err
		}
	}
	if have != want || had != keep {
		return fmt.Errorf("metadata.annotations[%s]: is set by Nodewright's admission webhook to the user who created the object and cannot be changed", nwv1.AnnotationRequestedBy)
	}
	return nil
}

// requester is the user who created obj, as stamped.
func requester(obj client.Object) string {
	return obj.GetAnnotations()[nwv1.AnnotationRequestedBy]
}
