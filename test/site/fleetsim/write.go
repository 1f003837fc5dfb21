package fleetsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// maxBody is the largest request body a write takes, as a kube-apiserver's limit is 3 MiB.
const maxBody = 3 << 20

// serveWrite answers a write of the member's administrator: create (POST to the
// collection), update (PUT to the object or its status) and delete (DELETE of the object),
// of JSON bodies, and patch, as a kube-apiserver does for these kinds:
//   - a create fails with AlreadyExists, an update or delete of a missing object NotFound;
//   - an update naming a resourceVersion other than the stored one fails with Conflict; one
//     naming none is Invalid for a custom resource or a CustomResourceDefinition, and
//     unconditional for the built-in kinds; a merge patch naming one is its precondition;
//   - a write that changes nothing writes nothing: no new resourceVersion, no watch event;
//   - for a kind with a status subresource, a create drops the status, an update keeps the
//     stored status and a status update changes the status alone;
//   - the UID and creation time are kept; the generation starts at 1 and is bumped by a
//     change of a custom resource outside its metadata and status, or of a built-in kind's
//     (or a CustomResourceDefinition's) spec.
//
// A PATCH is a JSON merge patch or a server-side apply, both applied as a merge patch (patch).
// A DELETE removes the object at once: no finalizers, no preconditions, no propagation. No
// deletecollection, no dry run, no defaulting, no validation beyond the kind, name and
// namespace: the simulator stores what it is given.
func (m *Member) serveWrite(w http.ResponseWriter, r *http.Request, req request) {
	var (
		o   *object
		err error
	)
	switch {
	case r.Method == http.MethodPost && req.name == "":
		o, err = m.create(r, req)
	case r.Method == http.MethodPut && req.name != "":
		o, err = m.update(r, req)
	case r.Method == http.MethodPatch && req.name != "":
		o, err = m.patch(r, req)
	case r.Method == http.MethodDelete && req.name != "" && req.subresource == "":
		err = m.delete(req)
	default:
		err = apierrors.NewMethodNotSupported(req.res.gvr.GroupResource(), r.Method)
	}
	switch {
	case err != nil:
		writeStatus(w, err)
	case o == nil:
		writeJSON(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess,
			Details: &metav1.StatusDetails{Name: req.name, Group: req.res.gvr.Group, Kind: req.res.gvr.Resource}})
	default:
		code := http.StatusOK
		if r.Method == http.MethodPost {
			code = http.StatusCreated
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write(o.json)
	}
}

// readBody reads the request's object: of the request's kind, in its namespace.
func readBody(r *http.Request, req request) (*unstructured.Unstructured, error) {
	if mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mediaType != "application/json" && mediaType != "" {
		return nil, unsupportedMediaType(mediaType, "application/json")
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, apierrors.NewBadRequest("reading the body: " + err.Error())
	}
	if len(data) > maxBody {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxBody))
	}
	u := &unstructured.Unstructured{}
	if err := utiljson.Unmarshal(data, &u.Object); err != nil {
		return nil, apierrors.NewBadRequest("the body is not a JSON object: " + err.Error())
	}
	want := req.res.gvr.GroupVersion().WithKind(req.res.kind)
	if gvk := u.GroupVersionKind(); gvk != want {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the body is a %s; this resource takes a %s", gvk, want))
	}
	switch ns := u.GetNamespace(); {
	case !req.res.namespaced && ns != "":
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s is cluster-scoped: metadata.namespace must be empty, not %q", req.res.kind, ns))
	case req.res.namespaced && ns == "":
		u.SetNamespace(req.namespace)
	case req.res.namespaced && ns != req.namespace:
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if req.name != "" && u.GetName() != req.name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", u.GetName(), req.name))
	}
	if u.GetName() == "" {
		return nil, invalid(req.res, "", field.Required(field.NewPath("metadata", "name"), "the simulator does not generate names"))
	}
	return u, nil
}

func invalid(res *resource, name string, err *field.Error) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: res.gvr.Group, Kind: res.kind}, name, field.ErrorList{err})
}

// hasStatus says the kind has a status subresource.
func (r *resource) hasStatus() bool {
	for _, sub := range r.subresources {
		if sub.Name == r.gvr.Resource+"/status" {
			return true
		}
	}
	return false
}

func (m *Member) create(r *http.Request, req request) (*object, error) {
	u, err := readBody(r, req)
	if err != nil {
		return nil, err
	}
	var stored *object
	err = m.store.write(req.res, u.GetNamespace(), u.GetName(), false, func(rv uint64, prev *object) (*object, error) {
		if prev != nil {
			return nil, apierrors.NewAlreadyExists(req.res.gvr.GroupResource(), u.GetName())
		}
		o, err := created(req.res, u, rv)
		stored = o
		return o, err
	})
	return stored, err
}

// created is u as a create stores it at the version rv.
func created(res *resource, u *unstructured.Unstructured, rv uint64) (*object, error) {
	if res.hasStatus() {
		unstructured.RemoveNestedField(u.Object, "status")
	}
	u.SetUID(uuid.NewUUID())
	u.SetCreationTimestamp(metav1.Now().Rfc3339Copy())
	if !res.noGeneration {
		u.SetGeneration(1)
	}
	return encodeWrite(res, u, rv)
}

func (m *Member) update(r *http.Request, req request) (*object, error) {
	u, err := readBody(r, req)
	if err != nil {
		return nil, err
	}
	return m.change(req, nil, func(old *unstructured.Unstructured, rv string) (*unstructured.Unstructured, error) {
		v := u.GetResourceVersion()
		if v == "" && req.res.conditional {
			return nil, invalid(req.res, u.GetName(), field.Invalid(field.NewPath("metadata", "resourceVersion"), 0, "must be specified for an update"))
		}
		if v != "" && v != rv {
			return nil, conflict(req.res, u.GetName())
		}
		return u, nil
	})
}

// change changes the stored object of the request to what next makes of it (given the
// stored object and its resourceVersion), as an update or a patch does: for the status
// subresource only the status changes; for a kind with one, the rest changes and the status
// stays. When the object is missing, it is made by create, if given (a server-side apply),
// and is otherwise NotFound.
func (m *Member) change(req request, create func() (*unstructured.Unstructured, error),
	next func(old *unstructured.Unstructured, rv string) (*unstructured.Unstructured, error)) (*object, error) {
	var stored *object
	err := m.store.write(req.res, req.namespace, req.name, false, func(rv uint64, prev *object) (*object, error) {
		if prev == nil {
			if create == nil {
				return nil, apierrors.NewNotFound(req.res.gvr.GroupResource(), req.name)
			}
			u, err := create()
			if err != nil {
				return nil, err
			}
			o, err := created(req.res, u, rv)
			stored = o
			return o, err
		}
		old := &unstructured.Unstructured{}
		if err := utiljson.Unmarshal(prev.json, &old.Object); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		u, err := next(old.DeepCopy(), fmt.Sprint(prev.rv))
		if err != nil {
			return nil, err
		}
		status := req.subresource == "status"
		out := u
		switch {
		case status:
			out = old.DeepCopy()
			out.Object["status"] = u.Object["status"]
			if u.Object["status"] == nil {
				delete(out.Object, "status")
			}
		case req.res.hasStatus():
			if s, ok := old.Object["status"]; ok {
				out.Object["status"] = s
			} else {
				delete(out.Object, "status")
			}
		}
		out.SetUID(old.GetUID())
		out.SetCreationTimestamp(old.GetCreationTimestamp())
		out.SetGeneration(old.GetGeneration())
		out.SetResourceVersion(old.GetResourceVersion())
		out.SetManagedFields(nil)
		if reflect.DeepEqual(old.Object, out.Object) {
			stored = prev
			return prev, nil // no change: no new version, as etcd is not written
		}
		if !status && !req.res.noGeneration && generationChanges(req.res, old, out) {
			out.SetGeneration(old.GetGeneration() + 1)
		}
		o, err := encodeWrite(req.res, out, rv)
		stored = o
		return o, err
	})
	return stored, err
}

// patch answers a JSON merge patch (RFC 7386) of the object or its status, and a server-side
// apply, which it takes as a merge patch of the object (creating it when missing): no field
// ownership, no conflicts, and a field the applied configuration no longer names stays.
// JSON patches and strategic merge patches are 415.
func (m *Member) patch(r *http.Request, req request) (*object, error) {
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	apply := mediaType == "application/apply-patch+yaml"
	if !apply && mediaType != "application/merge-patch+json" {
		return nil, unsupportedMediaType(mediaType, "application/merge-patch+json, application/apply-patch+yaml")
	}
	if apply && req.subresource != "" {
		return nil, apierrors.NewMethodNotSupported(req.res.gvr.GroupResource(), "apply to a subresource")
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, apierrors.NewBadRequest("reading the body: " + err.Error())
	}
	if len(data) > maxBody {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxBody))
	}
	if apply {
		if data, err = yaml.YAMLToJSON(data); err != nil {
			return nil, apierrors.NewBadRequest("the applied configuration is not YAML: " + err.Error())
		}
	}
	var p map[string]any
	if err := utiljson.Unmarshal(data, &p); err != nil {
		return nil, apierrors.NewBadRequest("the patch is not a JSON object: " + err.Error())
	}
	var create func() (*unstructured.Unstructured, error)
	if apply {
		create = func() (*unstructured.Unstructured, error) {
			u := &unstructured.Unstructured{Object: p}
			if want := req.res.gvr.GroupVersion().WithKind(req.res.kind); u.GroupVersionKind() != want {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("the applied configuration is a %s; this resource takes a %s", u.GroupVersionKind(), want))
			}
			if req.res.namespaced {
				u.SetNamespace(req.namespace)
			}
			if u.GetName() != req.name {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", u.GetName(), req.name))
			}
			return u, nil
		}
	}
	return m.change(req, create, func(old *unstructured.Unstructured, rv string) (*unstructured.Unstructured, error) {
		if v, _, _ := unstructured.NestedString(p, "metadata", "resourceVersion"); v != "" && v != rv {
			return nil, conflict(req.res, req.name) // the patch's precondition
		}
		merged, ok := mergePatch(old.Object, p).(map[string]any)
		if !ok {
			return nil, apierrors.NewBadRequest("the patch makes the object something other than a JSON object")
		}
		u := &unstructured.Unstructured{Object: merged}
		if u.GetName() != req.name || u.GetNamespace() != req.namespace || u.GroupVersionKind() != old.GroupVersionKind() {
			return nil, apierrors.NewBadRequest("the patch changes the object's kind, name or namespace")
		}
		return u, nil
	})
}

// conflict is the refusal of a write from a resourceVersion that is not the stored one.
func conflict(res *resource, name string) error {
	return apierrors.NewConflict(res.gvr.GroupResource(), name,
		errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// generationChanges says the change from old to next bumps the generation: for a custom
// resource, any change but to its metadata and status; for a built-in kind (and a
// CustomResourceDefinition), a change of its spec.
func generationChanges(res *resource, old, next *unstructured.Unstructured) bool {
	if !res.custom {
		return !reflect.DeepEqual(old.Object["spec"], next.Object["spec"])
	}
	for _, u := range []*unstructured.Unstructured{old, next} {
		for k := range u.Object {
			if k != "metadata" && k != "status" && !reflect.DeepEqual(old.Object[k], next.Object[k]) {
				return true
			}
		}
	}
	return false
}

// unsupportedMediaType is the 415 of a body the simulator does not read (protobuf, say).
func unsupportedMediaType(got, accepted string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of the request was in an unknown format (%s) - accepted media types include: %s", got, accepted)}}
}

// mergePatch applies the JSON merge patch p to the document doc (RFC 7386).
func mergePatch(doc, p any) any {
	pm, ok := p.(map[string]any)
	if !ok {
		return p
	}
	dm, ok := doc.(map[string]any)
	if !ok {
		dm = map[string]any{}
	}
	out := make(map[string]any, len(dm))
	for k, v := range dm {
		out[k] = v
	}
	for k, v := range pm {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = mergePatch(out[k], v)
	}
	return out
}

func (m *Member) delete(req request) error {
	err := m.store.write(req.res, req.namespace, req.name, true, func(rv uint64, prev *object) (*object, error) {
		data, err := withVersion(prev.json, rv)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		return &object{res: req.res, ns: prev.ns, name: prev.name, labels: prev.labels, rv: rv, json: data}, nil
	})
	if errors.Is(err, errNotFound) {
		return apierrors.NewNotFound(req.res.gvr.GroupResource(), req.name)
	}
	return err
}

// encodeWrite is the object as stored at the version rv: no managed fields.
func encodeWrite(res *resource, u *unstructured.Unstructured, rv uint64) (*object, error) {
	u.SetResourceVersion(fmt.Sprint(rv))
	u.SetManagedFields(nil)
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return &object{res: res, ns: u.GetNamespace(), name: u.GetName(), labels: u.GetLabels(), rv: rv, json: data}, nil
}
