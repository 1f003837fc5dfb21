package ui

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// tokenHeader carries the token on the page's own API calls. A page of another origin cannot
// set it without a CORS preflight, which this server never grants.
const tokenHeader = "X-Nodewright-Token"

// guard lets a request through only if it is addressed to a loopback host name (a page of
// another site that rebinds its DNS name to 127.0.0.1 still sends its own name), proves the
// token (the URL's query once, then the cookie set from it), and, for anything but reading
// the page, comes from the page itself.
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
		if !sameOrigin(r) {
			http.Error(w, "requests from other web pages are refused", http.StatusForbidden)
			return
		}
		cookie := cookieName(r.Host)
		if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet {
			if !s.validToken(q) {
				http.Error(w, "wrong token: open the URL that `kubectl nodewright ui` printed", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookie, Value: s.opts.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			// Drop the token from the address bar and the history.
			clean := *r.URL
			query := clean.Query()
			query.Del("token")
			clean.RawQuery = query.Encode()
			http.Redirect(w, r, clean.RequestURI(), http.StatusSeeOther)
			return
		}
		c, err := r.Cookie(cookie)
		if err != nil || !s.validToken(c.Value) {
			http.Error(w, "not signed in: open the URL that `kubectl nodewright ui` printed, with its token", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !s.validToken(r.Header.Get(tokenHeader)) {
			http.Error(w, "missing "+tokenHeader+": changes come only from the UI's own page", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
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

// cookieName is per port: cookies ignore ports, and two UIs (two clusters) may run at once.
func cookieName(hostport string) string {
	_, port, err := net.SplitHostPort(hostport)
	if err != nil || port == "" {
		port = "80"
	}
	return "nodewright-ui-" + port
}
