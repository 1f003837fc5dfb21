package fleetsim

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// ServeHTTP answers one request to the member, as its kube-apiserver would.
func (m *Member) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The delay is taken as the request arrives: a request counted is slowed, or not, by
	// what was set before it was counted.
	m.mu.Lock()
	slow := m.slow
	who := m.authenticate(r)
	m.mu.Unlock()
	m.sim.requests.Add(1)
	m.requests.Add(1)
	if strings.TrimSuffix(r.URL.Path, "/") == "/readyz" {
		m.readyz.Add(1)
	}
	if r.Method == http.MethodGet {
		m.getsMu.Lock()
		if m.gets == nil {
			m.gets = map[string]int64{}
		}
		m.gets[r.URL.Path]++
		m.getsMu.Unlock()
	}
	if !m.waitThawed(r.Context()) {
		return
	}
	if slow > 0 {
		t := time.NewTimer(slow)
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	if who == nobody {
		writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/readyz" || path == "/livez" || path == "/healthz":
		if !m.readOnly(w, r) {
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte("ok"))
	case path == "/version":
		if m.readOnly(w, r) {
			m.serveVersion(w)
		}
	case path == "/api":
		if m.readOnly(w, r) {
			writeJSON(w, http.StatusOK, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
				ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}}})
		}
	case path == "/apis":
		if m.readOnly(w, r) {
			writeJSON(w, http.StatusOK, groupList())
		}
	case strings.HasPrefix(path, "/api/"):
		version, rest, _ := strings.Cut(strings.TrimPrefix(path, "/api/"), "/")
		m.serveGroupVersion(w, r, who, schema.GroupVersion{Version: version}, rest)
	case strings.HasPrefix(path, "/apis/"):
		parts := strings.SplitN(strings.TrimPrefix(path, "/apis/"), "/", 3)
		if len(parts) == 1 {
			m.serveGroup(w, r, parts[0])
			return
		}
		rest := ""
		if len(parts) == 3 {
			rest = parts[2]
		}
		m.serveGroupVersion(w, r, who, schema.GroupVersion{Group: parts[0], Version: parts[1]}, rest)
	default:
		writeStatus(w, notFound())
	}
}

// caller is who a request comes from.
type caller int

const (
	// nobody: no token the member accepts (401, as on an API server without anonymous
	// access).
	nobody caller = iota
	// hub: a token of the hub, which reads (Token, IssueToken).
	hub
	// admin: the member's administrator, who may also write (Admin).
	admin
)

// authenticate says who the request's bearer token is, with m.mu held.
func (m *Member) authenticate(r *http.Request) caller {
	given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nobody
	}
	given = strings.TrimSpace(given)
	is := func(token string) bool { return subtle.ConstantTimeCompare([]byte(given), []byte(token)) == 1 }
	if is(m.admin) {
		return admin
	}
	if is(m.token) {
		return hub
	}
	for _, token := range m.issued {
		if is(token) {
			return hub
		}
	}
	return nobody
}

// readOnly answers 405 to anything but a read of a non-resource path.
func (m *Member) readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method))
	return false
}

func (m *Member) serveVersion(w http.ResponseWriter) {
	m.mu.Lock()
	v := m.version
	m.mu.Unlock()
	major, minor, _ := parseGitVersion(v) // checked when set
	writeJSON(w, http.StatusOK, &version.Info{Major: major, Minor: minor, EmulationMajor: major, EmulationMinor: minor,
		MinCompatibilityMajor: major, MinCompatibilityMinor: previousMinor(minor), GitVersion: v,
		GitCommit: "0000000000000000000000000000000000000000", GitTreeState: "clean", BuildDate: "2025-11-11T00:00:00Z",
		GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH})
}

// parseGitVersion reads "v1.34.2" (any suffix after the patch) into "1" and "34".
func parseGitVersion(v string) (major, minor string, err error) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if !strings.HasPrefix(v, "v") || len(parts) < 3 {
		return "", "", fmt.Errorf("%q is not a Kubernetes version like v1.34.2", v)
	}
	for _, p := range parts[:2] {
		if _, err := strconv.ParseUint(p, 10, 16); err != nil {
			return "", "", fmt.Errorf("%q is not a Kubernetes version like v1.34.2", v)
		}
	}
	return parts[0], parts[1], nil
}

func previousMinor(minor string) string {
	n, _ := strconv.Atoi(minor)
	return strconv.Itoa(max(n-1, 0))
}

// serveGroup answers /apis/<group>.
func (m *Member) serveGroup(w http.ResponseWriter, r *http.Request, group string) {
	for _, gv := range groupVersions() {
		if gv.Group == group && group != "" {
			if m.readOnly(w, r) {
				writeJSON(w, http.StatusOK, apiGroup(gv))
			}
			return
		}
	}
	writeStatus(w, notFound())
}

// request is a parsed request for a resource.
type request struct {
	res             *resource
	namespace, name string
	subresource     string
}

// serveGroupVersion answers the group version's discovery document and its resources.
func (m *Member) serveGroupVersion(w http.ResponseWriter, r *http.Request, who caller, gv schema.GroupVersion, rest string) {
	served := false
	for _, v := range groupVersions() {
		served = served || v == gv
	}
	if !served {
		writeStatus(w, notFound())
		return
	}
	if rest == "" {
		if m.readOnly(w, r) {
			writeJSON(w, http.StatusOK, resourceList(gv))
		}
		return
	}
	req, ok := parseResourcePath(gv, rest)
	if !ok {
		writeStatus(w, notFound())
		return
	}
	if r.Method != http.MethodGet {
		if who != admin {
			writeStatus(w, forbidden(req, r))
			return
		}
		m.serveWrite(w, r, req)
		return
	}
	q := r.URL.Query()
	switch {
	case req.name != "":
		m.serveGet(w, r, req)
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		m.serveWatch(w, r, req)
	default:
		m.serveList(w, r, req)
	}
}

// parseResourcePath reads [namespaces/<ns>/]<resource>[/<name>[/<subresource>]].
func parseResourcePath(gv schema.GroupVersion, rest string) (request, bool) {
	segs := strings.Split(rest, "/")
	var req request
	if segs[0] == "namespaces" && len(segs) >= 3 {
		req.namespace, segs = segs[1], segs[2:]
	}
	req.res = resourceFor(gv, segs[0])
	switch {
	case req.res == nil, len(segs) > 3, req.namespace != "" && !req.res.namespaced:
		return req, false
	case len(segs) >= 2:
		req.name = segs[1]
		if req.res.namespaced && req.namespace == "" {
			return req, false
		}
	}
	if len(segs) == 3 {
		req.subresource = segs[2]
		found := false
		for _, sub := range req.res.subresources {
			found = found || sub.Name == req.res.gvr.Resource+"/"+req.subresource
		}
		// The status subresource reads as the object; the simulator serves no other.
		if !found || req.subresource != "status" {
			return req, false
		}
	}
	return req, true
}

// forbidden is the RBAC refusal of a write, as a member's read-only role for the hub gives.
func forbidden(req request, r *http.Request) error {
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[r.Method]
	if verb == "" {
		verb = strings.ToLower(r.Method)
	}
	if verb == "delete" && req.name == "" {
		verb = "deletecollection"
	}
	resource := req.res.gvr.Resource
	if req.subresource != "" {
		resource += "/" + req.subresource
	}
	why := fmt.Sprintf("User %q cannot %s resource %q in API group %q", "fleetsim:hub", verb, resource, req.res.gvr.Group)
	if req.namespace != "" {
		why += fmt.Sprintf(" in the namespace %q", req.namespace)
	} else {
		why += " at the cluster scope"
	}
	return apierrors.NewForbidden(req.res.gvr.GroupResource(), req.name, errors.New(why))
}

// format is how a response encodes objects.
type format int

const (
	fullObjects  format = iota
	metadataOnly        // PartialObjectMetadata(List)
)

// negotiate picks the first media type of Accept the member serves: JSON, as objects or, when
// asked for "as=PartialObjectMetadata" (a get or watch) or "as=PartialObjectMetadataList"
// (a list), as their metadata. Protobuf is not served: clients that ask for it list JSON
// after it. ok is false when nothing offered is served (406).
func negotiate(accept string, list bool) (f format, contentType string, ok bool) {
	if strings.TrimSpace(accept) == "" {
		return fullObjects, "application/json", true
	}
	for _, clause := range strings.Split(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(clause))
		if err != nil || (mediaType != "application/json" && mediaType != "*/*" && mediaType != "application/*") {
			continue
		}
		switch as := params["as"]; {
		case as == "":
			return fullObjects, "application/json", true
		case params["g"] != "meta.k8s.io" || (params["v"] != "v1" && params["v"] != "v1beta1"):
			continue
		case as == "PartialObjectMetadataList" && list, as == "PartialObjectMetadata" && !list:
			return metadataOnly, "application/json;as=" + as + ";g=meta.k8s.io;v=" + params["v"], true
		}
	}
	return 0, "", false
}

func notAcceptable() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotAcceptable,
		Reason: metav1.StatusReasonNotAcceptable, Message: "only the following media types are accepted: application/json"}}
}

// metadataOf is the object's PartialObjectMetadata, encoded. A list's items carry no kind
// and apiVersion, as the API server encodes them.
func metadataOf(o *object, listItem bool) ([]byte, error) {
	var doc struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(o.json, &doc); err != nil {
		return nil, err
	}
	if listItem {
		return json.Marshal(struct {
			Metadata json.RawMessage `json:"metadata"`
		}{doc.Metadata})
	}
	return json.Marshal(struct {
		Kind       string          `json:"kind"`
		APIVersion string          `json:"apiVersion"`
		Metadata   json.RawMessage `json:"metadata"`
	}{"PartialObjectMetadata", "meta.k8s.io/v1", doc.Metadata})
}

func encodeAs(o *object, f format) ([]byte, error) {
	if f == metadataOnly {
		return metadataOf(o, false)
	}
	return o.json, nil
}

func (m *Member) serveGet(w http.ResponseWriter, r *http.Request, req request) {
	f, contentType, ok := negotiate(r.Header.Get("Accept"), false)
	if !ok {
		writeStatus(w, notAcceptable())
		return
	}
	o := m.store.get(req.res, req.namespace, req.name)
	if o == nil {
		writeStatus(w, apierrors.NewNotFound(req.res.gvr.GroupResource(), req.name))
		return
	}
	data, err := encodeAs(o, f)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", contentType)
	_, _ = w.Write(data)
}

// selector is a list's or watch's label and field selectors.
type selector struct {
	labels labels.Selector
	fields fields.Selector
	// empty says neither selects: the API server then tells how many items remain.
	empty bool
}

// fieldLabels are the fields a selector may name; the API server refuses others with 400.
// Built-in kinds allow a few more (a Pod's spec.nodeName); the hub uses none of them.
var fieldLabels = map[string]bool{"metadata.name": true, "metadata.namespace": true}

func parseSelector(labelText, fieldText string) (selector, error) {
	l, err := labels.Parse(labelText)
	if err != nil {
		return selector{}, apierrors.NewBadRequest(err.Error())
	}
	f, err := fields.ParseSelector(fieldText)
	if err != nil {
		return selector{}, apierrors.NewBadRequest(err.Error())
	}
	for _, req := range f.Requirements() {
		if !fieldLabels[req.Field] {
			return selector{}, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return selector{labels: l, fields: f, empty: l.Empty() && f.Empty()}, nil
}

func (s selector) matches(o *object, namespace string) bool {
	if namespace != "" && o.ns != namespace {
		return false
	}
	return s.labels.Matches(labels.Set(o.labels)) && s.fields.Matches(fields.Set{"metadata.name": o.name, "metadata.namespace": o.ns})
}

// listKind is the kind of the resource's list.
func (r *resource) listKind() string { return r.kind + "List" }

func (m *Member) serveList(w http.ResponseWriter, r *http.Request, req request) {
	f, contentType, ok := negotiate(r.Header.Get("Accept"), true)
	if !ok {
		writeStatus(w, notAcceptable())
		return
	}
	q := r.URL.Query()
	sel, err := parseSelector(q.Get("labelSelector"), q.Get("fieldSelector"))
	if err != nil {
		writeStatus(w, err)
		return
	}
	var limit int
	if l := q.Get("limit"); l != "" {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("limit: %q is not a number", l)))
			return
		}
		limit = int(max(min(n, 1<<30), 0))
	}
	objs, listRV := m.store.snapshot(req.res)
	start := ""
	if token := q.Get("continue"); token != "" {
		if q.Get("resourceVersion") != "" && q.Get("resourceVersion") != "0" {
			writeStatus(w, apierrors.NewBadRequest("specifying resource version is not allowed when using continue"))
			return
		}
		rv, key, err := decodeContinue(token)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		if _, compacted := m.store.state(); rv < compacted {
			writeStatus(w, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."))
			return
		}
		// The page is of the objects as they are now, not as they were at rv (the API
		// server reads etcd at rv): the hub's reads do not tell the difference.
		start, listRV = key, rv
	}
	items := make([]json.RawMessage, 0, len(objs))
	var meta metav1.ListMeta
	lastKey := ""
	for i, o := range objs {
		if o.key() < start || !sel.matches(o, req.namespace) {
			continue
		}
		if limit > 0 && len(items) == limit {
			remaining := 0
			for _, rest := range objs[i:] {
				if rest.key() >= start && sel.matches(rest, req.namespace) {
					remaining++
				}
			}
			if remaining > 0 {
				if meta.Continue, err = encodeContinue(listRV, lastKey); err != nil {
					writeStatus(w, apierrors.NewInternalError(err))
					return
				}
				if sel.empty {
					n := int64(remaining)
					meta.RemainingItemCount = &n
				}
			}
			break
		}
		data := o.json
		if f == metadataOnly {
			if data, err = metadataOf(o, true); err != nil {
				writeStatus(w, apierrors.NewInternalError(err))
				return
			}
		}
		items = append(items, data)
		lastKey = o.key()
	}
	meta.ResourceVersion = strconv.FormatUint(listRV, 10)
	kind, apiVersion := req.res.listKind(), req.res.apiVersion()
	if f == metadataOnly {
		kind, apiVersion = "PartialObjectMetadataList", "meta.k8s.io/v1"
	}
	data, err := json.Marshal(struct {
		Kind       string            `json:"kind"`
		APIVersion string            `json:"apiVersion"`
		Metadata   metav1.ListMeta   `json:"metadata"`
		Items      []json.RawMessage `json:"items"`
	}{kind, apiVersion, meta, items})
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", contentType)
	_, _ = w.Write(data)
}

func notFound() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound,
		Reason: metav1.StatusReasonNotFound, Message: "the server could not find the requested resource", Details: &metav1.StatusDetails{}}}
}

// writeStatus answers with the error's Status, as the API server does.
func writeStatus(w http.ResponseWriter, err error) {
	var status metav1.Status
	var apiStatus apierrors.APIStatus
	if errors.As(err, &apiStatus) {
		status = apiStatus.Status()
	} else {
		status = apierrors.NewInternalError(err).Status()
	}
	status.Kind, status.APIVersion = "Status", "v1"
	writeJSON(w, int(status.Code), &status)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}
