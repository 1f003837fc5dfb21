package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// stampRequester writes who asked into the object's requested-by annotation: on create, the
// user the API server authenticated; on update, the value the object already had, whatever
// the request says, so that no one can forge or rewrite it. It reports whether it changed
// the object.
func stampRequester(ctx context.Context, obj runtime.Object) (bool, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return false, err
	}
	o, ok := obj.(client.Object)
	if !ok {
		return false, fmt.Errorf("%T has no metadata", obj)
	}
	want, keep := "", false
	switch req.Operation {
	case admissionv1.Create:
		want, keep = req.UserInfo.Username, true
	case admissionv1.Update:
		want, keep, err = oldRequester(req)
		if err != nil {
			return false, err
		}
	default:
		return false, nil
	}
	annotations := o.GetAnnotations()
	have, had := annotations[nwv1.AnnotationRequestedBy]
	if have == want && had == keep {
		return false, nil
	}
	if !keep {
		delete(annotations, nwv1.AnnotationRequestedBy)
	} else {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[nwv1.AnnotationRequestedBy] = want
	}
	o.SetAnnotations(annotations)
	return true, nil
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
