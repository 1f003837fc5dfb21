package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// The ui subcommand serves the page on the loopback address it prints, with the token, and
// stops cleanly (exit 0) on cancellation.
func TestUIServesThePageItPrints(t *testing.T) {
	kubeconfig := env.Kubeconfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	out, outW := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--kubeconfig", kubeconfig, "ui", "--no-browser"},
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
	if url == "" {
		t.Fatal("the ui command printed no URL")
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Jar: jar, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Nodewright") {
		t.Fatalf("GET %s: %d\n%.300s", url, resp.StatusCode, body)
	}
	// Without the token, nothing.
	bare := url[:strings.Index(url, "?")]
	resp, err = http.Get(bare)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("GET %s without the token: %d, want a refusal", bare, resp.StatusCode)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d after cancellation, want 0", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the ui command did not stop")
	}
}
