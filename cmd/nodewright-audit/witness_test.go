package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// serving is a `serve` running in this process on a real socket.
type serving struct {
	stdout, stderr *testenv.SyncBuffer
	done           chan struct{}
	code           int
}

// startServe runs serve with args until the test ends, and returns it once it listens, with
// the port it printed. It fails the test if serve stops first.
func startServe(t *testing.T, args ...string) (*serving, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{stdout: &testenv.SyncBuffer{}, stderr: &testenv.SyncBuffer{}, done: make(chan struct{}), code: -1}
	go func() {
		defer close(s.done)
		s.code = runContext(ctx, append([]string{"serve"}, args...), s.stdout, s.stderr)
	}()
	// Registered after the callers' TempDirs, so it runs first: serve has stopped writing
	// into its folder before it is removed.
	t.Cleanup(func() { cancel(); <-s.done })
	listening := regexp.MustCompile(` on https?://[^/]*:(\d+)/ \(the copy holds`)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if m := listening.FindStringSubmatch(s.stdout.String()); m != nil {
			return s, m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not say where it listens: %q %q", s.stdout.String(), s.stderr.String())
		}
		select {
		case <-s.done:
			t.Fatalf("serve stopped: exit %d\n%s%s", s.code, s.stdout.String(), s.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// appendTrail appends records, one JSON line each, to the trail in dir with append.
func appendTrail(t *testing.T, dir, priv string, records ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	withStdin(strings.Join(records, "\n")+"\n", func() {
		if code := run([]string{"append", "--dir", dir, "--private-key", priv}, &out, &errOut); code != exitOK {
			t.Fatalf("append: exit %d\n%s", code, errOut.String())
		}
	})
}

// byActor is a record of the trail in the example: who did it, at a fixed time, so
// that the same actor is the same record (the same ID) in both trails.
func byActor(actor string, second int) string {
	return fmt.Sprintf(`{"time":"2026-11-21T10:00:%02dZ","actor":%q,"subject":{"kind":"Node","name":"edge-1"},"action":"Reboot","from":"Ready","to":"Rebooting","reason":"Maintenance"}`,
		second, actor)
}

// chainLines is the trail in dir, line by line.
func chainLines(t *testing.T, dir string) [][]byte {
	t.Helper()
	files, err := audit.ChainFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.SplitAfter(data, []byte("\n")) {
			if len(line) > 0 {
				lines = append(lines, line)
			}
		}
	}
	return lines
}

// The attack of issue 28, item 5: the operator holds the trail's signing key and may patch the
// checkpoint ConfigMap. A trail of alice, mallory and bob with its checkpoint at seq 3 is
// rewritten as alice, bob, carol and dave, with its checkpoint at seq 4, signed with the same
// key, and the new checkpoint published where the old one was. Verified against that
// checkpoint, the rewrite passes (what the operator publishes proves nothing against the
// operator). Verified against the checkpoint the witness countersigned (the receiver the trail
// was shipped to, with a key of its own), it is a fork at seq 2: the witness holds the trail
// as it was shipped, refuses the rewrite, and never countersigns it; a "witnessed" checkpoint
// the operator makes with its own key is refused.
func TestWitnessCatchesARewrittenTrail(t *testing.T) {
	priv, pub := keys(t)
	witnessPriv, witnessPub := keys(t)
	tmp := t.TempDir()
	trail, remote, witnessed := filepath.Join(tmp, "trail"), filepath.Join(tmp, "copy"), filepath.Join(tmp, "witnessed.jsonl")
	alice, mallory, bob, carol, dave := byActor("alice", 1), byActor("mallory", 2), byActor("bob", 3), byActor("carol", 4), byActor("dave", 5)
	appendTrail(t, trail, priv, alice, mallory, bob)

	// The witness must not share the trail's key, and must check the trail's signatures.
	var out, errOut bytes.Buffer
	for _, bad := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--dir", remote, "--witness-key", witnessPriv},
		{"serve", "--listen", "127.0.0.1:0", "--dir", remote, "--public-key", pub, "--witness-key", priv},
	} {
		errOut.Reset()
		if code := run(bad, &out, &errOut); code != exitBadInput || !strings.Contains(errOut.String(), "--witness-key") {
			t.Errorf("%q: exit %d, %q; want %d naming --witness-key", bad, code, errOut.String(), exitBadInput)
		}
	}

	_, port := startServe(t, "--listen", "127.0.0.1:0", "--dir", remote, "--public-key", pub, "--witness-key", witnessPriv)
	url := "http://127.0.0.1:" + port + "/"
	if code := run([]string{"ship", "--dir", trail, "--url", url, "--witnessed", witnessed, "--until-delivered"}, &out, &errOut); code != exitOK {
		t.Fatalf("ship: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	w, err := audit.ReadWitnessed(witnessed)
	if err != nil {
		t.Fatal(err)
	}
	original := chainLines(t, trail)
	if w.Entry.Seq != 3 || !bytes.Equal(append(w.Entry.Line(), '\n'), original[3]) {
		t.Fatalf("the witnessed checkpoint is seq %d %s, want the trail's checkpoint at seq 3 %s", w.Entry.Seq, w.Entry.Line(), original[3])
	}
	witnessedLine, _ := os.ReadFile(witnessed)

	// The rewrite, with the operator's key, in place of the trail, and its checkpoint
	// published in place of the old one.
	if err := os.RemoveAll(trail); err != nil {
		t.Fatal(err)
	}
	appendTrail(t, trail, priv, alice, bob, carol, dave)
	rewritten := chainLines(t, trail)
	if len(rewritten) != 5 || !bytes.Contains(rewritten[4], []byte(`"checkpoint":{"size":4,`)) || !bytes.Equal(rewritten[0], original[0]) {
		t.Fatalf("the rewrite is not alice/bob/carol/dave with its checkpoint at seq 4:\n%s", bytes.Join(rewritten, nil))
	}
	published := writeFile(t, filepath.Join(tmp, "published.jsonl"), string(rewritten[4]))
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, "--trusted-checkpoint", published, trail}, &out, &errOut); code != exitOK {
		t.Fatalf("against the checkpoint the operator published, the rewrite should pass (the operator holds the key): exit %d\n%s", code, out.String())
	}
	out.Reset()
	code := run([]string{"verify", "--public-key", pub, "--witnessed-checkpoint", witnessed, "--witness-public-key", witnessPub, trail}, &out, &errOut)
	if code != exitTampered || !regexp.MustCompile(`(?m)^FAIL \S+/audit-00000001\.jsonl:3 seq 2: fork: hashes to [0-9a-f]{64}, the witness's checkpoint \(witness key [0-9a-f]{16}, countersigned \S+\) says [0-9a-f]{64}: the chain was rewritten at or before seq 2$`).MatchString(out.String()) {
		t.Fatalf("against the witness's checkpoint: exit %d, want %d and a fork at seq 2\n%s", code, exitTampered, out.String())
	}
	// The original, still held by the witness, verifies against it.
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, "--witnessed-checkpoint", witnessed, "--witness-public-key", witnessPub, remote}, &out, &errOut); code != exitOK {
		t.Fatalf("the witness's copy against its checkpoint: exit %d\n%s", code, out.String())
	}

	// Shipped, the rewrite is refused: the witness's copy is another chain, and what the
	// witness hands back is still its checkpoint of the original.
	shipErr := &testenv.SyncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	shipped := make(chan int, 1)
	go func() {
		shipped <- runContext(ctx, []string{"ship", "--dir", trail, "--url", url, "--witnessed", witnessed, "--until-delivered"}, io.Discard, shipErr)
	}()
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(shipErr.String(), "the audit receiver's copy is another chain"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("shipping the rewrite: %s", shipErr.String())
		}
	}
	stop()
	if code := <-shipped; code != exitBadInput {
		t.Errorf("shipping the rewrite: exit %d, want %d (not delivered)", code, exitBadInput)
	}
	if again, _ := os.ReadFile(witnessed); !bytes.Equal(again, witnessedLine) {
		t.Errorf("the witness handed back %s, want its checkpoint of the original %s", again, witnessedLine)
	}
	if got := chainLines(t, remote); len(got) != 4 || !bytes.Equal(bytes.Join(got, nil), bytes.Join(original, nil)) {
		t.Errorf("the witness's copy changed:\n%s", bytes.Join(got, nil))
	}

	// A "witnessed" checkpoint of the rewrite, countersigned with the operator's key (it has
	// no other), is refused.
	pem, err := os.ReadFile(priv)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.LoadSigner(pem)
	if err != nil {
		t.Fatal(err)
	}
	last, err := audit.ParseLine(bytes.TrimSuffix(rewritten[4], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := signer.Countersign(last, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	forgedFile := writeFile(t, filepath.Join(tmp, "forged.jsonl"), string(forged.Line())+"\n")
	errOut.Reset()
	if code := run([]string{"verify", "--public-key", pub, "--witnessed-checkpoint", forgedFile, "--witness-public-key", witnessPub, trail}, &out, &errOut); code != exitBadInput ||
		!strings.Contains(errOut.String(), "not among the witness keys") {
		t.Errorf("a witnessed checkpoint countersigned by the operator's key: exit %d %q; want %d", code, errOut.String(), exitBadInput)
	}
	for _, bad := range [][]string{
		{"verify", "--public-key", pub, "--witnessed-checkpoint", witnessed, trail},
		{"verify", "--public-key", pub, "--witness-public-key", witnessPub, trail},
		{"verify", "--public-key", pub, "--witnessed-checkpoint", published, "--witness-public-key", witnessPub, trail},
		{"verify", "--public-key", witnessPub, "--witnessed-checkpoint", witnessed, "--witness-public-key", witnessPub, trail},
	} {
		if code := run(bad, &out, &errOut); code != exitBadInput {
			t.Errorf("%q: exit %d, want %d", bad, code, exitBadInput)
		}
	}
}

// Issue 28, item 9: a receiver reachable from other machines without authentication took a
// forged first batch, after which the real shipper was refused for good. Off loopback, serve
// now refuses to start without authentication, naming the flags; with a TLS certificate and a
// token, a forged batch from a client without the token is refused and stores nothing, and
// the real shipper is accepted.
func TestServeOffLoopbackNeedsAuthentication(t *testing.T) {
	trail, pub := writeTrail(t, 30)
	tmp := t.TempDir()
	certFile, keyFile := selfSignedCert(t, tmp)
	tokenFile := writeFile(t, filepath.Join(tmp, "token"), "s3cret\n")

	for _, args := range [][]string{
		{"--listen", "0.0.0.0:0"},
		{"--listen", ":0"},
		{"--listen", "[::]:0"},
		{"--listen", "0.0.0.0:0", "--token-file", tokenFile}, // a token in clear
		{"--listen", "0.0.0.0:0", "--tls-cert", certFile, "--tls-key", keyFile}, // TLS alone proves nothing of the client
	} {
		dir := filepath.Join(t.TempDir(), "copy")
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr testenv.SyncBuffer
		done := make(chan int, 1)
		go func() {
			done <- runContext(ctx, append([]string{"serve", "--dir", dir, "--public-key", pub}, args...), &stdout, &stderr)
		}()
		// It stops with an error, or says it listens.
		code := -1
		for deadline := time.Now().Add(2 * time.Minute); code == -1 && !strings.Contains(stdout.String(), "receiving into") && time.Now().Before(deadline); {
			select {
			case code = <-done:
			case <-time.After(10 * time.Millisecond):
			}
		}
		cancel()
		if code == -1 {
			<-done
			t.Errorf("%q: serve listened off loopback without authentication: %s", args, stdout.String())
			continue
		}
		for _, want := range []string{"off loopback", "--tls-cert", "--tls-key", "--client-ca", "--token-file"} {
			if code != exitBadInput || !strings.Contains(stderr.String(), want) {
				t.Errorf("%q: exit %d, %q; want %d naming %s", args, code, stderr.String(), exitBadInput, want)
			}
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%q: the refused receiver made its directory: %v", args, err)
		}
	}

	// Every interface, with TLS and a token.
	remote := filepath.Join(tmp, "copy")
	_, port := startServe(t, "--listen", "0.0.0.0:0", "--dir", remote, "--tls-cert", certFile, "--tls-key", keyFile,
		"--token-file", tokenFile, "--public-key", pub)
	url := "https://127.0.0.1:" + port + "/"
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(certFile)
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	request := func(method, token string, body []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if method == http.MethodPost {
			req.Header.Set("Content-Type", audit.BatchContentType)
			req.Header.Set(audit.FirstSeqHeader, "0")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		answer, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(answer)
	}
	// A forged chain: a trail of the forger's own, which would continue an empty copy.
	forgedTrail, _ := writeTrail(t, 5)
	forged := bytes.Join(chainLines(t, forgedTrail), nil)
	for _, token := range []string{"", "guessed"} {
		if status, answer := request(http.MethodPost, token, forged); status != http.StatusUnauthorized || strings.Contains(answer, `"next"`) {
			t.Errorf("a forged batch with token %q: %d %s; want 401 without the head", token, status, answer)
		}
	}
	if status, answer := request(http.MethodGet, "s3cret", nil); status != http.StatusOK || !strings.Contains(answer, `"next":0,`) {
		t.Fatalf("after the forged batches: %d %s; want an empty copy", status, answer)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"ship", "--dir", trail, "--url", url, "--ca", certFile, "--token-file", tokenFile, "--until-delivered"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), fmt.Sprintf("the receiver holds %d entries", len(chainLines(t, trail)))) {
		t.Fatalf("the real shipper: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if got, want := bytes.Join(chainLines(t, remote), nil), bytes.Join(chainLines(t, trail), nil); !bytes.Equal(got, want) {
		t.Fatal("the copy is not the trail")
	}
}
