package audit

import (
	"bytes"
	"crypto/ed25519"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// post sends a batch as a shipper would, with first as the first seq header ("" leaves it out).
func post(t *testing.T, url, token, contentType, first string, body []byte) (int, ChainHead, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if first != "" {
		req.Header.Set(FirstSeqHeader, first)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return roundTrip(t, req)
}

func getHead(t *testing.T, url, token string) (int, ChainHead, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return roundTrip(t, req)
}

// roundTrip returns the status, the head if the answer has one, and the answer's text.
func roundTrip(t *testing.T, req *http.Request) (int, ChainHead, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := parseHeadAnswer(body)
	return resp.StatusCode, head, string(body)
}

func lineHash(t *testing.T, line []byte) Hash {
	t.Helper()
	e, err := ParseLine(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	return e.Hash
}

func TestReceiverProtocol(t *testing.T) {
	lines := buildChain(t, 30, 10) // checkpoints at seq 10, 21, 32; 33 lines
	pub := testSigner(t).PublicKey()
	dir := t.TempDir()
	recv, err := OpenReceiver(dir, ReceiverOptions{PublicKeys: []ed25519.PublicKey{pub}, MaxFileBytes: 4 << 10, MaxBodyBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(recv)
	defer srv.Close()

	head5 := ChainHead{Next: 5, Head: lineHash(t, lines[4])}
	// Entries made to fit this chain at seq 5: a checkpoint signed by a key the receiver does not
	// know, and a record whose ID is already at seq 0.
	other, err := LoadSigner(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	cp := &Checkpoint{Size: 5, Head: head5.Head, Time: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	other.sign(cp)
	foreignCheckpoint := newEntry(5, head5.Head, nil, cp)
	first, err := ParseLine(bytes.TrimSuffix(lines[0], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	again := newEntry(5, head5.Head, first.Record, nil)
	tampered := cloneLines(lines[5:8])
	tampered[1] = bytes.Replace(tampered[1], []byte("StepSucceeded"), []byte("StepSucceedeD"), 1)

	cases := []struct {
		name        string
		contentType string
		first       string
		body        []byte
		status      int
		head        ChainHead // the head in the answer, and after it
		says        string
	}{
		{"the first batch", BatchContentType, "0", join(lines[:5]), http.StatusOK, head5, ""},
		{"the same batch again, as after a lost answer", BatchContentType, "0", join(lines[:5]), http.StatusConflict, head5, "continues at seq 5"},
		{"a batch beyond the head", BatchContentType, "7", join(lines[7:9]), http.StatusConflict, head5, "starts at seq 7"},
		{"a line edited", BatchContentType, "5", join(tampered), http.StatusUnprocessableEntity, head5, "hash-mismatch"},
		{"a line missing", BatchContentType, "5", join(append(cloneLines(lines[5:6]), lines[7:9]...)), http.StatusUnprocessableEntity, head5, "gap"},
		{"a header that lies about the first line", BatchContentType, "5", join(lines[6:9]), http.StatusUnprocessableEntity, head5, "gap"},
		{"a torn last line", BatchContentType, "5", bytes.TrimSuffix(join(lines[5:8]), []byte("\n")), http.StatusUnprocessableEntity, head5, "torn-line"},
		{"a checkpoint by an unknown key", BatchContentType, "5", append(foreignCheckpoint.Line(), '\n'), http.StatusUnprocessableEntity, head5, "unknown-key"},
		{"a record already held", BatchContentType, "5", append(again.Line(), '\n'), http.StatusUnprocessableEntity, head5, "duplicate-id"},
		{"another chain", BatchContentType, "5", join(buildOtherChain(t, 8)[5:7]), http.StatusUnprocessableEntity, head5, "prev-mismatch"},
		{"an empty batch", BatchContentType, "5", nil, http.StatusUnprocessableEntity, head5, "no lines"},
		{"a seq with a leading zero", BatchContentType, "05", join(lines[5:8]), http.StatusBadRequest, head5, "not a sequence number"},
		{"no first seq", BatchContentType, "", join(lines[5:8]), http.StatusBadRequest, head5, "not a sequence number"},
		{"not JSON Lines", "text/plain", "5", join(lines[5:8]), http.StatusUnsupportedMediaType, ChainHead{}, BatchContentType},
		{"a body over the limit", BatchContentType, "5", bytes.Repeat([]byte("x"), 33<<10), http.StatusRequestEntityTooLarge, ChainHead{}, "at most"},
		{"the rest, across files", BatchContentType + "; charset=utf-8", "5", join(lines[5:]), http.StatusOK, ChainHead{Next: 33, Head: lineHash(t, lines[32])}, ""},
	}
	for _, c := range cases {
		status, head, text := post(t, srv.URL, "", c.contentType, c.first, c.body)
		if status != c.status || head != c.head || !strings.Contains(text, c.says) {
			t.Errorf("%s: %d %s %q, want %d %s and %q", c.name, status, head, text, c.status, c.head, c.says)
		}
		if c.status == http.StatusOK {
			continue
		}
		// A refusal stores nothing.
		if _, now, _ := getHead(t, srv.URL, ""); c.head != (ChainHead{}) && now != c.head {
			t.Errorf("%s: the head moved to %s", c.name, now)
		}
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL, nil)
	if status, _, _ := roundTrip(t, req); status != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d", status)
	}

	// The copy is the chain, byte for byte, in several files, and a reopened receiver stands
	// where the closed one did.
	if err := recv.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := ChainFiles(dir)
	var copied []byte
	for _, f := range files {
		data, _ := os.ReadFile(f)
		copied = append(copied, data...)
	}
	if len(files) < 2 || !bytes.Equal(copied, join(lines)) {
		t.Fatalf("%d files; the copy differs from the chain", len(files))
	}
	if r := verifyDir(t, dir); !r.OK || r.Entries != 33 {
		t.Fatalf("%+v", r)
	}
	reopened, err := OpenReceiver(dir, ReceiverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reopened.Close() }()
	if got := reopened.Head(); got.Next != 33 || got.Head != lineHash(t, lines[32]) {
		t.Fatalf("reopened at %s", got)
	}
}

// buildOtherChain is a chain of the same shape under another key: same seqs, other hashes.
func buildOtherChain(t *testing.T, n int) [][]byte {
	t.Helper()
	var buf bytes.Buffer
	other, err := LoadSigner(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog(NewWriterSink(&buf), other, ChainState{}, LogOptions{CheckpointEvery: 4})
	for i := range n {
		r := testRecord(i)
		r.Message = "other " + strconv.Itoa(i)
		if _, err := l.Append(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return splitLines(buf.Bytes())
}

func TestReceiverRequiresItsToken(t *testing.T) {
	recv, err := OpenReceiver(t.TempDir(), ReceiverOptions{Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = recv.Close() }()
	srv := httptest.NewServer(recv)
	defer srv.Close()
	lines := buildChain(t, 3, 10)
	for _, token := range []string{"", "s3cre", "s3cret2"} {
		status, _, text := getHead(t, srv.URL, token)
		if status != http.StatusUnauthorized || strings.Contains(text, "head") {
			t.Errorf("GET with %q: %d %s", token, status, text)
		}
		if status, _, _ := post(t, srv.URL, token, BatchContentType, "0", join(lines)); status != http.StatusUnauthorized {
			t.Errorf("POST with %q: %d", token, status)
		}
	}
	if status, head, _ := post(t, srv.URL, "s3cret", BatchContentType, "0", join(lines)); status != http.StatusOK || head.Next != uint64(len(lines)) {
		t.Fatalf("with the token: %d %s", status, head)
	}
}

func TestHeadAnswerIsReadStrictly(t *testing.T) {
	zero := strings.Repeat("0", 64)
	one := strings.Repeat("0", 63) + "1"
	for _, c := range []struct {
		answer string
		ok     bool
	}{
		{`{"next":0,"head":"` + zero + `"}`, true},
		{`{"next":7,"head":"` + one + `","error":"x","later":true}`, true},
		{`{"next":7}`, false},
		{`{"head":"` + one + `"}`, false},
		{`{"next":-1,"head":"` + one + `"}`, false},
		{`{"next":7,"head":"` + strings.ToUpper(one[:62]) + `AB"}`, false},
		{`{"next":7,"head":"` + one[:62] + `"}`, false},
		{`{"next":0,"head":"` + one + `"}`, false}, // empty, yet a head
		{`<html>`, false},
	} {
		_, _, err := parseHeadAnswer([]byte(c.answer))
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v", c.answer, err)
		}
	}
}

// copyAnswer passes on an answer a handler recorded.
func copyAnswer(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}
