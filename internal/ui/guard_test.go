package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/ui"
)

// TestOnlyTheUsersOwnPageGetsThrough checks the local server's protection against other web
// pages in the same browser and other users of the machine: the page and its assets carry no
// secret and are served to anyone who names a loopback host; every API call needs the token in
// its header (a cookie or the old query parameter is no token), comes from the page's own
// origin, and names a loopback host. The page's own request reaches the cluster as the user,
// and a webhook's refusal comes back field by field.
func TestOnlyTheUsersOwnPageGetsThrough(t *testing.T) {
	startOperator(t)
	ns := env.Namespace(t)
	const token = "s3cret-token"
	handler, err := ui.NewHandler(userConfig(), ui.Options{Token: token, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	base, _ := url.Parse(srv.URL)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	type req struct {
		name, method, path, body string
		host, origin, fetchSite  string
		navigate                 bool   // a top-level navigation, as the browser marks it
		header                   string // the X-Nodewright-Token header
		cookie                   string // a cookie of the old scheme
		want                     int
	}
	post := `{"vmName":"nope","volumeName":"root","storageClassName":"x"}`
	for _, r := range []req{
		{name: "the page, without a token", method: "GET", path: "/", want: http.StatusOK},
		{name: "its script, without a token", method: "GET", path: "/static/app.js", want: http.StatusOK},
		{name: "the page opened from a file or another site", method: "GET", path: "/", fetchSite: "cross-site", navigate: true, want: http.StatusOK},
		{name: "the page fetched by another site", method: "GET", path: "/", fetchSite: "cross-site", want: http.StatusForbidden},
		{name: "the old query token sets no cookie", method: "GET", path: "/?token=" + token, want: http.StatusOK},
		{name: "the API without the token", method: "GET", path: "/api/trail", want: http.StatusUnauthorized},
		{name: "the API with a wrong token", method: "GET", path: "/api/trail", header: "guess", want: http.StatusUnauthorized},
		{name: "a cookie is no token", method: "GET", path: "/api/trail", cookie: "nodewright-ui-" + base.Port() + "=" + token, want: http.StatusUnauthorized},
		{name: "the query is no token", method: "GET", path: "/api/trail?token=" + token, want: http.StatusUnauthorized},
		{name: "a rebound host name", method: "GET", path: "/", host: "evil.example:" + base.Port(), want: http.StatusMisdirectedRequest},
		{name: "a rebound host name, with the token", method: "GET", path: "/api/trail", header: token, host: "evil.example:" + base.Port(), want: http.StatusMisdirectedRequest},
		{name: "the events of another origin", method: "GET", path: "/api/events", header: token, origin: "http://127.0.0.1:1", want: http.StatusForbidden},
		{name: "a cross-site fetch", method: "GET", path: "/api/trail", header: token, fetchSite: "cross-site", want: http.StatusForbidden},
		{name: "a same-site page on another port", method: "GET", path: "/api/trail", header: token, fetchSite: "same-site", want: http.StatusForbidden},
		{name: "a change without the token", method: "POST", path: "/api/migrations", body: post, want: http.StatusUnauthorized},
		{name: "a change from another origin", method: "POST", path: "/api/migrations", body: post, header: token, origin: "http://localhost:9", want: http.StatusForbidden},
		{name: "a cancel without the token", method: "DELETE", path: "/api/migrations/" + ns + "/x", want: http.StatusUnauthorized},
		{name: "the events with the token", method: "GET", path: "/api/events", header: token, fetchSite: "same-origin", want: http.StatusOK},
		{name: "the page's own change reaches admission", method: "POST", path: "/api/migrations", body: post, header: token, origin: srv.URL, fetchSite: "same-origin", want: http.StatusForbidden},
	} {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			hr, err := http.NewRequestWithContext(ctx, r.method, srv.URL+r.path, strings.NewReader(r.body))
			if err != nil {
				t.Fatal(err)
			}
			if r.host != "" {
				hr.Host = r.host
			}
			if r.origin != "" {
				hr.Header.Set("Origin", r.origin)
			}
			if r.fetchSite != "" {
				hr.Header.Set("Sec-Fetch-Site", r.fetchSite)
			}
			if r.navigate {
				hr.Header.Set("Sec-Fetch-Mode", "navigate")
				hr.Header.Set("Sec-Fetch-Dest", "document")
			}
			if r.header != "" {
				hr.Header.Set("X-Nodewright-Token", r.header)
			}
			if r.cookie != "" {
				hr.Header.Set("Cookie", r.cookie)
			}
			res, err := noRedirect.Do(hr)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = res.Body.Close() }()
			if res.StatusCode != r.want {
				body, _ := io.ReadAll(res.Body)
				t.Fatalf("status %d, want %d: %s", res.StatusCode, r.want, body)
			}
			if set := res.Header.Values("Set-Cookie"); len(set) > 0 {
				t.Errorf("Set-Cookie %q: the UI sets no cookie", set)
			}
			if r.path == "/api/events" && r.want == http.StatusOK {
				// A stream: its first event says who the page acts as.
				lines := bufio.NewScanner(res.Body)
				var got []string
				for lines.Scan() && len(got) < 2 {
					got = append(got, lines.Text())
				}
				if len(got) < 2 || got[0] != "event: hello" || !strings.Contains(got[1], `"user":"`+user+`"`) {
					t.Errorf("the stream starts with %q", got)
				}
				return
			}
			body, _ := io.ReadAll(res.Body)
			switch r.name {
			case "the page, without a token":
				if strings.Contains(string(body), token) {
					t.Error("the page carries the token")
				}
				if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
					t.Errorf("Content-Security-Policy %q", csp)
				}
				if rp := res.Header.Get("Referrer-Policy"); rp != "no-referrer" {
					t.Errorf("Referrer-Policy %q", rp)
				}
			case "the page's own change reaches admission":
				var answer struct {
					Errors []struct{ Field, Message string }
				}
				if err := json.Unmarshal(body, &answer); err != nil || len(answer.Errors) != 1 ||
					answer.Errors[0].Field != "spec.vmName" || !strings.Contains(answer.Errors[0].Message, `VirtualMachine "nope" not found`) {
					t.Errorf("answer %s (%v)", body, err)
				}
			}
		})
	}
}

// TestRunListensOnlyOnLoopback refuses addresses another machine could reach, before
// listening.
func TestRunListensOnlyOnLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.168.1.10:8080", "[::]:0"} {
		err := ui.Run(context.Background(), userConfig(), ui.Options{Addr: addr, Out: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Run on %s: %v; want a refusal naming loopback", addr, err)
		}
	}
}
