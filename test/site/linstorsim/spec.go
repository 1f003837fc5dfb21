package linstorsim

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// document is LINSTOR's own description of its REST API, as LINBIT publishes it
// (testdata/README.md says where it comes from). It is compiled into this package only, which
// only tests import.
//
//go:embed testdata/rest_v1_openapi.yaml
var document []byte

// spec is the loaded document and a router that finds each request's operation in it.
type spec struct {
	doc    *openapi3.T
	router routers.Router
	// server is the document's own server (http://localhost:3370): requests are routed as if
	// addressed to it, whatever address the stand-in listens on.
	server *url.URL
}

var (
	specOnce   sync.Once
	loaded     *spec
	loadFailed error
)

// loadSpec loads the document once. kin-openapi loads all of it; of its validation only the
// examples fail, two request examples the document gets wrong (POST /v1/nodes writes the node
// type "SATELLITE" and the encryption type "Plain" where its own enums say "Satellite" and
// "PLAIN"; POST /v1/physical-storage/{node} omits the required device_paths), so the document
// is validated with example validation turned off. Examples are never used to validate a
// request or a response.
func loadSpec() (*spec, error) {
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(document)
		if err != nil {
			loadFailed = fmt.Errorf("loading LINSTOR's OpenAPI document: %w", err)
			return
		}
		if err := doc.Validate(context.Background(), openapi3.DisableExamplesValidation()); err != nil {
			loadFailed = fmt.Errorf("LINSTOR's OpenAPI document does not validate: %w", err)
			return
		}
		if len(doc.Servers) == 0 {
			loadFailed = errors.New("LINSTOR's OpenAPI document names no server")
			return
		}
		server, err := url.Parse(doc.Servers[0].URL)
		if err != nil {
			loadFailed = fmt.Errorf("the document's server %q: %w", doc.Servers[0].URL, err)
			return
		}
		router, err := gorillamux.NewRouter(doc)
		if err != nil {
			loadFailed = fmt.Errorf("routing LINSTOR's OpenAPI document: %w", err)
			return
		}
		loaded = &spec{doc: doc, router: router, server: server}
	})
	return loaded, loadFailed
}

// bearerOnly checks the document's one security scheme, bearerAuth: a request that claims it
// carries "Authorization: Bearer <token>". The document also allows no authentication ({}),
// which is what a client authenticated by its TLS certificate sends; the stand-in plays no
// authentication beyond the TLS handshake, so any token is taken.
func bearerOnly(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecurityScheme == nil || in.SecurityScheme.Type != "http" || !strings.EqualFold(in.SecurityScheme.Scheme, "bearer") {
		return fmt.Errorf("security scheme %q is not played", in.SecuritySchemeName)
	}
	auth := in.RequestValidationInput.Request.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "Bearer ") || len(auth) == len("Bearer ") {
		return errors.New("no bearer token")
	}
	return nil
}

// checked is a request found in the document and validated against it.
type checked struct {
	input     *openapi3filter.RequestValidationInput
	operation string
	params    map[string]string
	body      []byte
}

// checkRequest finds the request's operation and validates the request against it. body is
// the request's body, already read.
func (s *spec) checkRequest(ctx context.Context, r *http.Request, body []byte) (*checked, error) {
	routed := r.Clone(ctx)
	routed.URL.Scheme, routed.URL.Host, routed.Host = s.server.Scheme, s.server.Host, s.server.Host
	routed.Body = io.NopCloser(bytes.NewReader(body))
	routed.ContentLength = int64(len(body))
	route, params, err := s.router.FindRoute(routed)
	if err != nil {
		return nil, fmt.Errorf("%s %s is not an operation of LINSTOR's REST API: %w", r.Method, r.URL.Path, err)
	}
	input := &openapi3filter.RequestValidationInput{
		Request:    routed,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			// The handler reads what the client sent, not the document's defaults.
			SkipSettingDefaults: true,
			AuthenticationFunc:  bearerOnly,
			MultiError:          true,
		},
	}
	if err := openapi3filter.ValidateRequest(ctx, input); err != nil {
		return nil, fmt.Errorf("request %s %s (%s) breaks LINSTOR's OpenAPI document: %w", r.Method, r.URL.RequestURI(), route.Operation.OperationID, err)
	}
	return &checked{input: input, operation: route.Operation.OperationID, params: params, body: body}, nil
}

// checkResponse validates an answer to a checked request.
//
// A success is validated as the document declares it, and a status the operation does not
// declare is an error. An error answer (4xx, 5xx) is validated against the document's
// ApiCallRc list schema, which is what LINSTOR's server writes for every error
// (ApiCallRcRestUtils.toResponse): where the operation declares the status with that schema,
// through the operation; where it declares components/responses/OperationFailed, a single
// ApiCallRc that the server never writes, or does not declare the status at all (most
// operations declare no 404, which LINSTOR answers for every object not found), against the
// schema directly.
func (s *spec) checkResponse(ctx context.Context, c *checked, status int, header http.Header, body []byte) error {
	if status >= 400 && !declaresList(c.input.Route.Operation, status) {
		list := s.doc.Components.Schemas["ApiCallRcList"]
		if list == nil || list.Value == nil {
			return errors.New("the document has no ApiCallRcList schema")
		}
		var value any
		if err := json.Unmarshal(body, &value); err != nil {
			return fmt.Errorf("response %d to %s is not JSON: %w", status, c.operation, err)
		}
		if err := list.Value.VisitJSON(value, openapi3.MultiErrors()); err != nil {
			return fmt.Errorf("response %d to %s breaks the document's ApiCallRcList schema: %w", status, c.operation, err)
		}
		return nil
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: c.input,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("response %d to %s breaks LINSTOR's OpenAPI document: %w", status, c.operation, err)
	}
	return nil
}

// declaresList reports whether the operation declares status with the ApiCallRcList schema.
func declaresList(op *openapi3.Operation, status int) bool {
	ref := op.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		return false
	}
	media := ref.Value.Content.Get("application/json")
	return media != nil && media.Schema != nil && media.Schema.Ref == "#/components/schemas/ApiCallRcList"
}

// ValidateJSON validates data against one of the document's schemas
// (components/schemas/<schema>), for tests that take their JSON from the document's shapes.
func ValidateJSON(schema string, data []byte) error {
	s, err := loadSpec()
	if err != nil {
		return err
	}
	ref := s.doc.Components.Schemas[schema]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("LINSTOR's OpenAPI document has no schema %q", schema)
	}
	var value any
	if err := json.Unmarshal(data, &value); err != nil {
		return err
	}
	return ref.Value.VisitJSON(value, openapi3.MultiErrors())
}

// Operation finds an operation in LINSTOR's OpenAPI document by its method and path, the path
// written as the document writes it ("/v1/resource-groups/{resource_group}"): its
// operationId, and the names of its path and query parameters. An error says when the
// document has no such path or no such method on it.
func Operation(method, path string) (id string, pathParams, queryParams []string, err error) {
	s, err := loadSpec()
	if err != nil {
		return "", nil, nil, err
	}
	item := s.doc.Paths.Value(path)
	if item == nil {
		return "", nil, nil, fmt.Errorf("LINSTOR's OpenAPI document has no path %s", path)
	}
	op := item.GetOperation(strings.ToUpper(method))
	if op == nil {
		return "", nil, nil, fmt.Errorf("LINSTOR's OpenAPI document has no %s %s", strings.ToUpper(method), path)
	}
	for _, params := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, p := range params {
			if p == nil || p.Value == nil {
				continue
			}
			switch p.Value.In {
			case openapi3.ParameterInPath:
				pathParams = append(pathParams, p.Value.Name)
			case openapi3.ParameterInQuery:
				queryParams = append(queryParams, p.Value.Name)
			}
		}
	}
	return op.OperationID, pathParams, queryParams, nil
}
