package ui_test

import (
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
// pages in the same browser: no token, no page; a rebound host name, another origin or a
// missing token header on a change is refused; the page's own request reaches the cluster as
// the user, and a webhook's refusal comes back field by field.
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
	cookie := &http.Cookie{Name: "nodewright-ui-" + base.Port(), Value: token}

	type req struct {
		name, method, path, body string
		host, origin, fetchSite  string
		cookie, header           bool
		want                     int
	}
	post := `{"vmName":"nope","volumeName":"root","storageClassName":"x"}`
	for _, r := range []req{
		{name: "no token", method: "GET", path: "/", want: http.StatusUnauthorized},
		{name: "wrong token", method: "GET", path: "/?token=guess", want: http.StatusUnauthorized},
		{name: "the printed URL sets the cookie", method: "GET", path: "/?token=" + token, want: http.StatusSeeOther},
		{name: "the page with the cookie", method: "GET", path: "/", cookie: true, want: http.StatusOK},
		{name: "a rebound host name", method: "GET", path: "/", cookie: true, host: "evil.example:" + base.Port(), want: http.StatusMisdirectedRequest},
		{name: "the events of another origin", method: "GET", path: "/api/events", cookie: true, origin: "http://127.0.0.1:1", want: http.StatusForbidden},
		{name: "a cross-site fetch", method: "GET", path: "/api/trail", cookie: true, fetchSite: "cross-site", want: http.StatusForbidden},
		{name: "a same-site page on another port", method: "GET", path: "/api/trail", cookie: true, fetchSite: "same-site", want: http.StatusForbidden},
		{name: "a change without the token header", method: "POST", path: "/api/migrations", body: post, cookie: true, want: http.StatusForbidden},
		{name: "a change from another origin", method: "POST", path: "/api/migrations", body: post, cookie: true, header: true, origin: "http://localhost:9", want: http.StatusForbidden},
		{name: "a cancel without the cookie", method: "DELETE", path: "/api/migrations/" + ns + "/x", header: true, want: http.StatusUnauthorized},
		{name: "the page's own change reaches admission", method: "POST", path: "/api/migrations", body: post, cookie: true, header: true, origin: srv.URL, want: http.StatusForbidden},
	} {
		t.Run(r.name, func(t *testing.T) {
			hr, err := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader(r.body))
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
			if r.cookie {
				hr.AddCookie(cookie)
			}
			if r.header {
				hr.Header.Set("X-Nodewright-Token", token)
			}
			res, err := noRedirect.Do(hr)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = res.Body.Close() }()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != r.want {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, r.want, body)
			}
			switch r.name {
			case "the printed URL sets the cookie":
				set := res.Header.Get("Set-Cookie")
				if !strings.Contains(set, cookie.Name+"="+token) || !strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") {
					t.Errorf("Set-Cookie %q", set)
				}
				if loc := res.Header.Get("Location"); loc != "/" {
					t.Errorf("redirected to %q; the token must leave the address bar", loc)
				}
			case "the page with the cookie":
				if !strings.Contains(string(body), `name="nodewright-token" content="`+token+`"`) {
					t.Error("the page does not carry the token its scripts send")
				}
				if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
					t.Errorf("Content-Security-Policy %q", csp)
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
