package ui

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// tokenHeader carries the token on every call of the page to the API. The page has it from
// the fragment of the URL it was opened with (which browsers never send to a server) and keeps
// it in its tab's sessionStorage (which is per origin, so per port). A page of another origin
// cannot set the header without a CORS preflight, which this server never grants. There is no
// cookie: browsers send a cookie of 127.0.0.1 to every port of it, so to every other local web
// server the user visits.
const tokenHeader = "X-Nodewright-Token"

// guard lets a request through only if it is addressed to a loopback host name (a page of
// another site that rebinds its DNS name to 127.0.0.1 still sends its own name) and comes
// from the page's own origin; and, for anything but the page and its static assets, which
// carry no secret, only if it carries the token in its header.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")

		if !loopbackHost(r.Host) {
			http.Error(w, "this server answers only to 127.0.0.1, ::1 or localhost", http.StatusMisdirectedRequest)
			return
		}
		public := publicPath(r)
		// Opening the page is a navigation, perhaps from the file `ui` opened the browser with
		// or from a link elsewhere: it reveals nothing and does nothing, and the page cannot
		// be framed. Everything else must come from the page's own origin.
		opening := public && topLevelNavigation(r)
		if !opening && !sameOrigin(r) {
			http.Error(w, "requests from other web pages are refused", http.StatusForbidden)
			return
		}
		if !public && !s.validToken(r.Header.Get(tokenHeader)) {
			http.Error(w, "missing or wrong "+tokenHeader+": open the URL that `kubectl nodewright ui` printed, with its #token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// publicPath is the page and its static assets, which carry no secret.
func publicPath(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	return p == "/" || (strings.HasPrefix(p, "/static/") && path.Clean(p) == p)
}

// topLevelNavigation is the browser opening a page in a tab, as its fetch metadata says.
func topLevelNavigation(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" && r.Header.Get("Origin") == ""
}

func (s *server) validToken(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

// loopbackHost accepts the Host header of a request to this machine by a loopback name.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin refuses a request that a browser says comes from another origin: Origin, when
// sent, must be this server's own, and Sec-Fetch-Site, when sent, must not be cross-site or
// same-site (another port of 127.0.0.1 is the same site, but not the same origin).
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Scheme == "http" && strings.EqualFold(u.Host, r.Host)
}
