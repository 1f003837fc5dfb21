package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spectrocloud/nodewright/internal/ui"
)

// seenRequest is what another local web server saw of a request.
type seenRequest struct {
	target string
	header http.Header
}

// TestOtherLocalServersGetNoToken opens the UI, then follows a link from it to another web
// server on 127.0.0.1 (another port: the same site, as browsers count sites, but another
// origin): that server receives neither a cookie nor the token, the token has left the address
// bar, and a page of that server can neither read it nor call the UI.
func TestOtherLocalServersGetNoToken(t *testing.T) {
	startOperator(t)
	ns := env.Namespace(t)
	printed := startUI(t, ui.Options{Namespace: ns})
	token := printed[strings.Index(printed, "token=")+len("token="):]
	uiBase := printed[:len("http://")+strings.Index(printed[len("http://"):], "/")]

	var mu sync.Mutex
	var seen []seenRequest
	reported := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, seenRequest{target: r.URL.String(), header: r.Header.Clone()})
		mu.Unlock()
		switch r.URL.Path {
		case "/report":
			select {
			case reported <- r.URL.Query().Get("result"):
			default:
			}
		case "/favicon.ico":
			http.NotFound(w, r)
		default:
			// A page that tries the UI's API, with whatever credentials the browser has.
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><title>elsewhere</title><script>
fetch(%q, {credentials: 'include'})
  .then((r) => 'answered ' + r.status, (e) => 'blocked: ' + e)
  .then((result) => fetch('/report?result=' + encodeURIComponent(result)));
</script>`, uiBase+"/api/trail")
		}
	}))
	t.Cleanup(other.Close)
	if !strings.HasPrefix(other.URL, "http://127.0.0.1:") {
		t.Fatalf("the other server is at %s, not on 127.0.0.1", other.URL)
	}

	p := openPage(t, printed, laptopWidth, laptopHeight)
	if href, _ := evaluate[string](p, `location.href`); strings.Contains(href, token) {
		t.Errorf("the address bar still shows the token: %s", href)
	}
	// A reload keeps the page signed in: the tab keeps the token.
	p.do(chromedp.Reload())
	p.waitJS("the page to reconnect after a reload", `document.getElementById('conn').textContent.includes('Live')`)

	// Follow a link from the UI to the other server.
	p.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.assign(%q)`, other.URL+"/elsewhere")))
	var result string
	select {
	case result = <-reported:
	case <-time.After(patience):
		t.Fatal("the other server's page did not report")
	}
	if !strings.HasPrefix(result, "blocked") {
		t.Errorf("the other server's page called the UI's API: %s", result)
	}
	if stored, err := evaluate[string](p, `String(sessionStorage.getItem('nodewright-token'))`); err != nil || stored != "null" {
		t.Errorf("the other server's page reads the token from its storage: %q (%v)", stored, err)
	}
	if cookies, _ := evaluate[string](p, `document.cookie`); cookies != "" {
		t.Errorf("the other server's page sees cookies: %q", cookies)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the other server saw no request")
	}
	for _, r := range seen {
		if c := r.header.Get("Cookie"); c != "" {
			t.Errorf("the other server received a cookie with %s: %s", r.target, c)
		}
		if strings.Contains(r.target, token) {
			t.Errorf("the other server received the token in %s", r.target)
		}
		for name, values := range r.header {
			for _, v := range values {
				if strings.Contains(v, token) {
					t.Errorf("the other server received the token in %s: %s", name, v)
				}
			}
		}
	}
	t.Logf("the other server saw %d request(s); its page's call to the UI: %s", len(seen), result)
}
