package linstor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
)

// Client calls one LINSTOR controller. It is safe for concurrent use.
type Client struct {
	api     *lapi.Client
	http    *http.Client
	base    *url.URL
	timeout time.Duration
}

// New returns a client for the controller cfg names. It does not reach the controller: the
// first call does (Version checks that it answers and speaks a REST API this client reads).
func New(cfg Config) (*Client, error) {
	transport, base, err := cfg.HTTPTransport()
	if err != nil {
		return nil, err
	}
	var next http.RoundTripper = transport
	if cfg.TokenFile != "" {
		next = bearer{file: cfg.TokenFile, next: next}
	}
	if cfg.Transport != nil {
		next = cfg.Transport(next)
	}
	hc := &http.Client{Transport: recorder{next: next}}
	timeout := cfg.RequestTimeout
	if timeout == 0 {
		timeout = DefaultRequestTimeout
	}
	// golinstor also reads LS_* environment variables (controllers, credentials, a bearer
	// token file); the options below override every one of them, so the configuration is
	// the only source, and its request logging is off.
	api, err := lapi.NewClient(
		lapi.BaseURL(base),
		lapi.HTTPClient(hc),
		lapi.BasicAuth(&lapi.BasicAuthCfg{}),
		lapi.BearerToken(""),
		lapi.Log(nil),
		lapi.UserAgent("nodewright"),
	)
	if err != nil {
		return nil, fmt.Errorf("LINSTOR client: %w", err)
	}
	return &Client{api: api, http: hc, base: base, timeout: timeout}, nil
}

// bearer sends the token of a file with every request, read at each one: a projected
// ServiceAccount token is renewed in place by the kubelet.
type bearer struct {
	file string
	next http.RoundTripper
}

// maxToken bounds what is read of the token file.
const maxToken = 64 << 10

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := readToken(b.file)
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Header.Set("Authorization", "Bearer "+token)
	return b.next.RoundTrip(out)
}

func readToken(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("the bearer token for LINSTOR: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return "", fmt.Errorf("the bearer token for LINSTOR: %s: %w", file, err)
	}
	token := strings.TrimSpace(string(data))
	switch {
	case len(data) > maxToken:
		return "", fmt.Errorf("the bearer token for LINSTOR: %s is larger than %d bytes", file, maxToken)
	case token == "":
		return "", fmt.Errorf("the bearer token for LINSTOR: %s is empty", file)
	case strings.ContainsAny(token, " \t\r\n"):
		return "", fmt.Errorf("the bearer token for LINSTOR: %s holds more than one word", file)
	}
	return token, nil
}

// answer is what LINSTOR answered to a request that failed: the transport records it before
// golinstor reads it, since golinstor keeps nothing of a 404's body.
type answer struct {
	status   int
	messages []Message
	body     string
}

type answerKey struct{}

// recorder is the HTTP transport: it records the status and messages of an error answer for
// the call that made the request.
type recorder struct{ next http.RoundTripper }

// maxAnswer bounds how much of an error answer is read.
const maxAnswer = 1 << 20

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	slot, _ := req.Context().Value(answerKey{}).(*answer)
	if slot == nil {
		return resp, nil
	}
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	slot.status = resp.StatusCode
	if readErr != nil {
		slot.body = "unreadable: " + readErr.Error()
		return resp, nil
	}
	slot.messages = decodeMessages(body)
	slot.body = strings.TrimSpace(string(body))
	if len(slot.body) > 512 {
		slot.body = slot.body[:512] + "..."
	}
	return resp, nil
}

// decodeMessages reads LINSTOR's answer: a list of ApiCallRc, which its server writes for
// every error, or a single one, as its OpenAPI document declares some.
func decodeMessages(body []byte) []Message {
	var list []lapi.ApiCallRc
	if err := json.Unmarshal(body, &list); err == nil {
		return messages(list)
	}
	var one lapi.ApiCallRc
	if err := json.Unmarshal(body, &one); err == nil && one.Message != "" {
		return messages([]lapi.ApiCallRc{one})
	}
	return nil
}

// call runs fn, one golinstor call, within the request timeout, and gives its failure the
// operation's name and what LINSTOR answered.
func (c *Client) call(ctx context.Context, op string, fn func(context.Context) error) error {
	ctx, cancel, limit := c.bound(ctx)
	defer cancel()
	slot := &answer{}
	if err := fn(context.WithValue(ctx, answerKey{}, slot)); err != nil {
		return newError(op, slot, limit, err)
	}
	return nil
}

// bound gives ctx the request timeout unless it ends sooner, and says which limit applies.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc, time.Duration) {
	limit := c.timeout
	if deadline, ok := ctx.Deadline(); ok {
		if left := time.Until(deadline); left < limit {
			return ctx, func() {}, left.Round(time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	return ctx, cancel, limit
}

// get reads a list golinstor does not decode whole (the resource view's replication_states)
// with this client's own HTTP client: GET path?query into out.
func (c *Client) get(ctx context.Context, op, path string, query url.Values, out any) error {
	ctx, cancel, limit := c.bound(ctx)
	defer cancel()
	u := c.base.ResolveReference(&url.URL{Path: path, RawQuery: query.Encode()})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return &Error{Op: op, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nodewright")
	slot := &answer{}
	resp, err := c.http.Do(req.WithContext(context.WithValue(ctx, answerKey{}, slot)))
	if err != nil {
		return newError(op, nil, limit, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		if slot.status == 0 {
			slot.status = resp.StatusCode
		}
		return newError(op, slot, limit, fmt.Errorf("status %d", resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxList+1))
	if err != nil {
		return newError(op, nil, limit, err)
	}
	if len(body) > maxList {
		return &Error{Op: op, Reason: fmt.Sprintf("the answer is larger than the %d bytes this client reads", maxList)}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return &Error{Op: op, Reason: "the answer does not decode: " + err.Error(), Err: err}
	}
	return nil
}

// maxList bounds a list read whole: the resource view of a few hundred volumes is some MiB.
const maxList = 64 << 20
