// Package kubelite is a small Kubernetes API client: the requests the node agent makes (get,
// create, update, merge and apply patches, list and watch) on typed objects encoded with
// encoding/json, its configuration from a kubeconfig or a pod's service account, and the
// API server's errors as typed values. It exists so that the agent, one per node, links
// neither client-go nor controller-runtime, which would triple its memory (docs/agent.md).
package kubelite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// The content types of the patches the client sends.
const (
	MergePatchType = "application/merge-patch+json"
	ApplyPatchType = "application/apply-patch+yaml"
)

// Client makes requests to one API server.
type Client struct {
	base      *url.URL
	http      *http.Client
	userAgent string
}

// New returns a Client for cfg.
func New(cfg *Config) (*Client, error) {
	base, err := cfg.baseURL()
	if err != nil {
		return nil, err
	}
	hc, err := cfg.HTTPClient()
	if err != nil {
		return nil, err
	}
	ua := cfg.UserAgent
	if ua == "" {
		ua = "kubelite"
	}
	return &Client{base: base, http: hc, userAgent: ua}, nil
}

// HTTP is the client's http.Client: its TLS and credentials, for requests of other paths
// (/livez).
func (c *Client) HTTP() *http.Client { return c.http }

// URL is the absolute URL of path on the API server.
func (c *Client) URL(path string) string {
	u := *c.base
	u.Path += path
	return u.String()
}

// Resource names a kind of object of the API: its group (empty for the core group), version
// and resource (the plural in the URL).
type Resource struct {
	Group, Version, Resource string
}

// Path is the URL path of the object name of r in namespace (empty: cluster-scoped), or of the
// collection when name is empty; subresource, when given, follows (status).
func (r Resource) Path(namespace, name string, subresource ...string) string {
	var b strings.Builder
	if r.Group == "" {
		b.WriteString("/api/" + r.Version)
	} else {
		b.WriteString("/apis/" + r.Group + "/" + r.Version)
	}
	if namespace != "" {
		b.WriteString("/namespaces/" + url.PathEscape(namespace))
	}
	b.WriteString("/" + r.Resource)
	if name != "" {
		b.WriteString("/" + url.PathEscape(name))
	}
	for _, s := range subresource {
		b.WriteString("/" + s)
	}
	return b.String()
}

// Get reads the object at path into into.
func (c *Client) Get(ctx context.Context, path string, into any) error {
	return c.Do(ctx, http.MethodGet, path, nil, "", nil, into)
}

// Create posts obj to the collection at path; the object created is decoded into into, if
// not nil. obj must say its apiVersion and kind (a custom resource's decoder needs them).
func (c *Client) Create(ctx context.Context, path string, obj, into any) error {
	return c.send(ctx, http.MethodPost, path, nil, "application/json", obj, into)
}

// Update puts obj at path (an object, or its status subresource), with its resourceVersion:
// a Conflict when the object changed since it was read. obj must say its apiVersion and kind,
// as one read from the API server does.
func (c *Client) Update(ctx context.Context, path string, obj, into any) error {
	return c.send(ctx, http.MethodPut, path, nil, "application/json", obj, into)
}

// MergePatch sends patch (a JSON merge patch: MergePatch builds one) to path.
func (c *Client) MergePatch(ctx context.Context, path string, patch []byte, into any) error {
	return c.Do(ctx, http.MethodPatch, path, nil, MergePatchType, patch, into)
}

// Apply applies obj at path with server-side apply as fieldManager, forcing the ownership
// of the fields obj sets (taking them from other managers) when force.
func (c *Client) Apply(ctx context.Context, path string, obj any, fieldManager string, force bool, into any) error {
	q := url.Values{"fieldManager": {fieldManager}}
	if force {
		q.Set("force", "true")
	}
	return c.send(ctx, http.MethodPatch, path, q, ApplyPatchType, obj, into)
}

func (c *Client) send(ctx context.Context, method, path string, query url.Values, contentType string, obj, into any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding the request to %s: %w", path, err)
	}
	return c.Do(ctx, method, path, query, contentType, body, into)
}

// Do sends one request and decodes a successful answer into into (when not nil), which it
// clears first; an answer that is not a success is a *StatusError.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, contentType string, body []byte, into any) error {
	resp, err := c.request(ctx, method, path, query, contentType, body)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(resp, data)
	}
	if into == nil {
		return nil
	}
	// encoding/json leaves alone the fields the answer does not have: they must not keep what
	// into held before.
	if v := reflect.ValueOf(into); v.Kind() == reflect.Pointer && !v.IsNil() {
		v.Elem().SetZero()
	}
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// maxRetries is how many times a request is sent again when the server asks to be asked
// again later, as client-go's.
const maxRetries = 10

// request sends a request and returns the server's answer, whatever its status. An answer
// 429 Too Many Requests or 5xx with a Retry-After (the API server's "storage is
// (re)initializing", its max-in-flight limit) is waited out and asked again, up to
// maxRetries times, as client-go does.
func (c *Client) request(ctx context.Context, method, path string, query url.Values, contentType string, body []byte) (*http.Response, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	for attempt := 0; ; attempt++ {
		var r io.Reader
		if body != nil {
			r = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", c.userAgent)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		wait, again := retryAfter(resp)
		if !again || attempt == maxRetries {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
		sleep(ctx, wait)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// retryAfter says whether resp asks to be asked again, and after how long.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return 0, false
	}
	seconds, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || seconds < 0 {
		return 0, false
	}
	return time.Duration(seconds) * time.Second, true
}
