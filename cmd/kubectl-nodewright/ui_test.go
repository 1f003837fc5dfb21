package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
)

// The ui subcommand serves the page on the loopback address it prints, with the token in the
// URL's fragment; the API answers only with that token in its header; it stops cleanly (exit
// 0) on cancellation. Without -n it shows every namespace, and the form starts with the
// kubeconfig context's namespace, as kubectl would use it; with -n, that namespace only.
func TestUIServesThePageItPrints(t *testing.T) {
	kubeconfig := env.Kubeconfig(t)
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = "apps"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		hello string
	}{
		{"the context's namespace for the form", nil, `"namespace":"","defaultNamespace":"apps"`},
		{"-n scopes the page", []string{"-n", "demo"}, `"namespace":"demo","defaultNamespace":"demo"`},
	} {
		t.Run(tc.name, func(t *testing.T) { testUI(t, kubeconfig, tc.args, tc.hello) })
	}
}

func testUI(t *testing.T, kubeconfig string, args []string, hello string) {
	ctx, cancel := context.WithCancel(context.Background())
	out, outW := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"--kubeconfig", kubeconfig, "ui", "--no-browser"}, args...),
			genericiooptions.IOStreams{In: strings.NewReader(""), Out: outW, ErrOut: io.Discard})
		_ = outW.Close()
	}()
	lines := bufio.NewScanner(out)
	var url string
	for lines.Scan() {
		if i := strings.Index(lines.Text(), "http://127.0.0.1:"); i >= 0 {
			url = strings.TrimSpace(lines.Text()[i:])
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	base, token, ok := strings.Cut(url, "#token=")
	if !ok || token == "" {
		t.Fatalf("the ui command printed %q, want a URL with #token=", url)
	}
	client := &http.Client{Timeout: patience}
	get := func(path, withToken string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+strings.TrimPrefix(path, "/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if withToken != "" {
			req.Header.Set("X-Nodewright-Token", withToken)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.Header.Get("Content-Type") == "text/event-stream" {
			// The stream's first event.
			s := bufio.NewScanner(resp.Body)
			var first []string
			for s.Scan() && len(first) < 2 {
				first = append(first, s.Text())
			}
			return resp, strings.Join(first, "\n")
		}
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	// The page carries no secret: it is served without the token.
	if resp, body := get("/", ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, "Nodewright") || strings.Contains(body, token) {
		t.Fatalf("GET %s: %d\n%.300s", base, resp.StatusCode, body)
	}
	// The API: nothing without the token's header.
	if resp, body := get("/api/events", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/events without the token: %d %s, want 401", resp.StatusCode, body)
	}
	if resp, body := get("/api/events", token); resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "event: hello\n") || !strings.Contains(body, hello) {
		t.Fatalf("GET /api/events with the token: %d %q; want a hello with %s", resp.StatusCode, body, hello)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d after cancellation, want 0", c)
		}
	case <-time.After(patience):
		t.Fatal("the ui command did not stop")
	}
}
