package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// writeTrail generates a key pair with keygen and writes a signed trail of n records.
func writeTrail(t *testing.T, n int) (dir, pubFile string) {
	t.Helper()
	dir = t.TempDir()
	privFile, pubFile := filepath.Join(dir, "key.pem"), filepath.Join(dir, "key.pub")
	var out, errOut bytes.Buffer
	if code := run([]string{"keygen", "--private-key", privFile, "--public-key", pubFile}, &out, &errOut); code != exitOK {
		t.Fatalf("keygen: %d %s", code, errOut.String())
	}
	if code := run([]string{"keygen", "--private-key", privFile, "--public-key", pubFile}, &out, &errOut); code != exitBadInput {
		t.Fatalf("keygen overwrote a key: %d", code)
	}
	priv, err := os.ReadFile(privFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.LoadSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	trail := filepath.Join(dir, "trail")
	sink, err := audit.OpenFileSink(trail, audit.FileSinkOptions{MaxFileBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	l := audit.NewLog(sink, signer, sink.State(), audit.LogOptions{CheckpointEvery: 10})
	for i := range n {
		r := audit.Transition(audit.Subject{Kind: "VMVolumeMigration", Name: "m", UID: "u"}, "operator", "Step", "Copy", "Repoint", "StepSucceeded", "", strconv.Itoa(i), time.Now())
		if _, err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return trail, pubFile
}

func TestVerifyExitCodesAndOutput(t *testing.T) {
	trail, pub := writeTrail(t, 60)
	var out, errOut bytes.Buffer
	if code := run([]string{"verify", "--public-key", pub, trail}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "OK: ") {
		t.Fatalf("intact trail: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	files, _ := audit.ChainFiles(trail)
	if len(files) < 2 {
		t.Fatalf("want a rotated trail, got %d files", len(files))
	}
	// The last line of the trail, kept aside, becomes a trusted checkpoint.
	last := lastLine(t, files[len(files)-1])
	trusted := filepath.Join(t.TempDir(), "checkpoint")
	if err := os.WriteFile(trusted, last, 0o600); err != nil {
		t.Fatal(err)
	}
	// Cut the newest file off entirely: only the trusted checkpoint can tell.
	out.Reset()
	code := run(append([]string{"verify", "--json", "--public-key", pub, "--trusted-checkpoint", trusted}, files[:len(files)-1]...), &out, &errOut)
	var report audit.Report
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if code != exitTampered || report.OK || report.Problems[0].Kind != audit.ProblemTruncated {
		t.Fatalf("truncation: exit %d, %+v", code, report)
	}
	// An edited byte is named with its file, line and seq.
	data, _ := os.ReadFile(files[0])
	if err := os.WriteFile(files[0], bytes.Replace(data, []byte("StepSucceeded"), []byte("StepSucceedeD"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, trail}, &out, &errOut); code != exitTampered ||
		!strings.Contains(out.String(), "FAIL "+files[0]+":1 seq 0: hash-mismatch") {
		t.Fatalf("edit: exit %d\n%s", code, out.String())
	}
	for _, bad := range [][]string{
		{"verify", trail},
		{"verify", "--public-key", pub},
		{"verify", "--public-key", filepath.Join(trail, "missing"), trail},
		{"verify", "--public-key", pub, filepath.Join(trail, "missing")},
		{"verify", "--public-key", files[0], trail},
		{"frobnicate"},
		{},
	} {
		if code := run(bad, &out, &errOut); code != exitBadInput {
			t.Errorf("%q: exit %d, want %d", bad, code, exitBadInput)
		}
	}
}

func lastLine(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	return lines[len(lines)-1]
}

// selfSignedCert writes a certificate for 127.0.0.1 that is its own CA, and its key.
func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodewright-audit test receiver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// A trail shipped with `ship` to `serve` over TLS with a token arrives whole: `verify` passes
// on the copy, which is the trail byte for byte.
func TestServeAndShip(t *testing.T) {
	trail, pub := writeTrail(t, 60)
	tmp := t.TempDir()
	certFile, keyFile := selfSignedCert(t, tmp)
	tokenFile := filepath.Join(tmp, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(tmp, "copy")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var serveOut, serveErr testenv.SyncBuffer
	served := make(chan int, 1)
	go func() {
		served <- runContext(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--dir", remote, "--tls-cert", certFile,
			"--tls-key", keyFile, "--token-file", tokenFile, "--public-key", pub, "--max-file-bytes", "4096"}, &serveOut, &serveErr)
	}()
	listening := regexp.MustCompile(`on (https://127\.0\.0\.1:\d+/)`)
	var url string
	for deadline := time.Now().Add(2 * time.Minute); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := listening.FindStringSubmatch(serveOut.String()); m != nil {
			url = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start: %s%s", serveOut.String(), serveErr.String())
		}
	}

	// Without the token, nothing: not even where the copy stands.
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(certFile)
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", resp.StatusCode)
	}

	var out, errOut bytes.Buffer
	if code := run([]string{"ship", "--dir", trail, "--url", url, "--ca", certFile, "--token-file", tokenFile, "--until-delivered"}, &out, &errOut); code != exitOK {
		t.Fatalf("ship: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	files, _ := audit.ChainFiles(trail)
	var local []byte
	for _, f := range files {
		data, _ := os.ReadFile(f)
		local = append(local, data...)
	}
	n := bytes.Count(local, []byte("\n"))
	if want := "the receiver holds " + strconv.Itoa(n) + " entries; 0 of " + strconv.Itoa(n); !strings.Contains(out.String(), want) {
		t.Fatalf("ship said %q, want %q", out.String(), want)
	}
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, remote}, &out, &errOut); code != exitOK {
		t.Fatalf("verify the copy: exit %d\n%s", code, out.String())
	}
	copied, _ := audit.ChainFiles(remote)
	var got []byte
	for _, f := range copied {
		data, _ := os.ReadFile(f)
		got = append(got, data...)
	}
	if len(copied) < 2 || !bytes.Equal(got, local) {
		t.Fatalf("the copy (%d files) differs from the trail", len(copied))
	}
	// Shipped again: nothing to send, nothing sent twice.
	out.Reset()
	if code := run([]string{"ship", "--dir", trail, "--url", url, "--ca", certFile, "--token-file", tokenFile, "--until-delivered"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "holds "+strconv.Itoa(n)+" entries") {
		t.Fatalf("shipping again: exit %d\n%s", code, out.String())
	}

	cancel()
	if code := <-served; code != exitOK {
		t.Fatalf("serve: exit %d\n%s", code, serveErr.String())
	}
	if !strings.Contains(serveErr.String(), "401 Unauthorized") {
		t.Errorf("the refused request was not logged: %q", serveErr.String())
	}

	for _, bad := range [][]string{
		{"serve", "--listen", "127.0.0.1:0"},
		{"serve", "--dir", remote},
		{"serve", "--listen", "127.0.0.1:0", "--dir", remote, "--tls-cert", certFile},
		{"serve", "--listen", "127.0.0.1:0", "--dir", remote, "--client-ca", certFile},
		{"serve", "--listen", "127.0.0.1:0", "--dir", remote, "--token-file", filepath.Join(tmp, "missing")},
		{"ship", "--dir", trail},
		{"ship", "--url", url},
		{"ship", "--dir", filepath.Join(tmp, "missing"), "--url", url},
		{"ship", "--dir", trail, "--url", "http://127.0.0.1:1/", "--token-file", tokenFile},
	} {
		if code := run(bad, &out, &errOut); code != exitBadInput {
			t.Errorf("%q: exit %d, want %d", bad, code, exitBadInput)
		}
	}
	out.Reset()
	if run([]string{"help"}, &out, &errOut); !strings.Contains(out.String(), "nodewright-audit serve") || !strings.Contains(out.String(), "Shipping to an HTTP endpoint") {
		t.Errorf("help: %s", out.String())
	}
}

// The text report is one "FAIL FILE:LINE seq N: KIND: MESSAGE" line per problem listed, the
// same shape for every kind, and nothing else starts with FAIL: the count of the problems not
// listed is a note.
func TestVerifyReportLines(t *testing.T) {
	trail, pub := writeTrail(t, 20)
	files, _ := audit.ChainFiles(trail)
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	// 1100 junk lines in the middle of the first file, and its end cut.
	damaged := filepath.Join(t.TempDir(), "audit-00000001.jsonl")
	junk := bytes.Repeat([]byte("junk\n"), 1100)
	if err := os.WriteFile(damaged, bytes.Join([][]byte{bytes.Join(lines[:4], nil), junk, bytes.Join(lines[4:8], nil)}, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	trusted := filepath.Join(t.TempDir(), "checkpoint.jsonl")
	if err := os.WriteFile(trusted, lines[10], 0o600); err != nil { // seq 10, the first checkpoint
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run([]string{"verify", "--public-key", pub, "--trusted-checkpoint", trusted, damaged}, &out, &errOut)
	if code != exitTampered {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	failLine := regexp.MustCompile(`^FAIL (\S+):(\d+) seq (\d+|\?): ([a-z-]+): .+$`)
	var fails []string
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if !strings.HasPrefix(l, "FAIL") {
			continue
		}
		m := failLine.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("%q does not read FAIL FILE:LINE seq N: KIND: MESSAGE", l)
			continue
		}
		fails = append(fails, m[4])
		if m[1] != damaged {
			t.Errorf("%q: not in %s", l, damaged)
		}
	}
	for i, kind := range fails {
		if kind != string(audit.ProblemMalformed) {
			t.Errorf("problem %d is %s, want only the junk lines, each once (malformed)", i+1, kind)
		}
	}
	if len(fails) != 1000 {
		t.Errorf("%d FAIL lines, want the first 1000 problems", len(fails))
	}
	for _, want := range []string{
		"\nnote: 101 more problems not listed: a report lists the first 1000\n",
		"\nTAMPERED OR DAMAGED (1101 problems): 8 entries",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, tail(out.String(), 5))
		}
	}
	// The truncation is the 1101st problem, not listed; alone, it is placed after the file's end.
	cut := filepath.Join(t.TempDir(), "audit-00000001.jsonl")
	if err := os.WriteFile(cut, bytes.Join(lines[:8], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, "--trusted-checkpoint", trusted, cut}, &out, &errOut); code != exitTampered ||
		!strings.HasPrefix(out.String(), "FAIL "+cut+":9 seq 8: truncated: the trusted checkpoint covers seq 0..9 but the trail ends at seq 7: entries 8..9 deleted from the end\n") {
		t.Errorf("a cut trail: exit %d\n%s", code, out.String())
	}
}

// An empty trail file is a valid, empty chain; only a trusted checkpoint tells a wiped trail
// from a new one. A folder without any trail file is not a trail at all.
func TestVerifyEmptyTrail(t *testing.T) {
	trail, pub := writeTrail(t, 3)
	files, _ := audit.ChainFiles(trail)
	trusted := filepath.Join(t.TempDir(), "checkpoint.jsonl")
	if err := os.WriteFile(trusted, lastLine(t, files[len(files)-1]), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyDir := t.TempDir()
	empty := filepath.Join(emptyDir, "audit-00000001.jsonl")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"verify", "--public-key", pub, empty}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "note: no entries: an empty trail is a valid chain; only a trusted checkpoint (--trusted-checkpoint) tells it from a wiped one\n") {
		t.Errorf("an empty trail: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, "--trusted-checkpoint", trusted, emptyDir}, &out, &errOut); code != exitTampered ||
		!strings.HasPrefix(out.String(), "FAIL "+empty+":1 seq 0: truncated: the trusted checkpoint covers seq 0..2 but the trail is empty: it was wiped, or these are not its files\n") {
		t.Errorf("an empty trail against a trusted checkpoint: exit %d\n%s", code, out.String())
	}
	errOut.Reset()
	if code := run([]string{"verify", "--public-key", pub, t.TempDir()}, &out, &errOut); code != exitBadInput ||
		!strings.Contains(errOut.String(), "no audit-*.jsonl files") {
		t.Errorf("an empty folder: exit %d\n%s", code, errOut.String())
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// A trail whose oldest files were removed can start after the trusted checkpoint's last
// entry: with --allow-partial that is a note that it was not checked, not truncated, and the
// help of --trusted-checkpoint says so.
func TestTrustedCheckpointBeforeAPartialTrail(t *testing.T) {
	trail, pub := writeTrail(t, 60)
	files, _ := audit.ChainFiles(trail)
	first, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(first, []byte("\n"))
	trusted := filepath.Join(t.TempDir(), "checkpoint.jsonl")
	if err := os.WriteFile(trusted, lines[10], 0o600); err != nil { // seq 10, the first checkpoint
		t.Fatal(err)
	}
	if e, err := audit.ParseLine(bytes.TrimSuffix(lines[10], []byte("\n"))); err != nil || e.Checkpoint == nil || len(lines) < 13 {
		t.Fatalf("line 11 of the first file is not a checkpoint: %v", err)
	}
	rest := files[1:] // the first file, seq 0..10 and more, removed
	var out, errOut bytes.Buffer
	code := run(append([]string{"verify", "--public-key", pub, "--trusted-checkpoint", trusted, "--allow-partial"}, rest...), &out, &errOut)
	if code != exitOK || !strings.Contains(out.String(), "note: the trusted checkpoint's last entry, seq 9, is not among the entries read, so it was not checked\n") {
		t.Fatalf("a partial trail after the trusted checkpoint: exit %d\n%s%s", code, out.String(), errOut.String())
	}

	out.Reset()
	errOut.Reset()
	run([]string{"verify", "-h"}, &out, &errOut)
	help := regexp.MustCompile(`(?m)^  -trusted-checkpoint string\n((?:    \s*\S.*\n)+)`).FindStringSubmatch(errOut.String())
	if help == nil || !strings.Contains(help[1], "--allow-partial") || !strings.Contains(help[1], "note") {
		t.Errorf("the help of --trusted-checkpoint does not say what --allow-partial makes of a trail that starts after it:\n%s", errOut.String())
	}
}
