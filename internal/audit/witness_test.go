package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// witnessSigner is the witness's fixed key, not the trail's.
func witnessSigner(t testing.TB) *Signer {
	t.Helper()
	s, err := LoadSigner(bytes.Repeat([]byte{5}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// answerWitnessed reads the witnessed checkpoint an answer carries.
func answerWitnessed(t *testing.T, text string, h ChainHead) *Witnessed {
	t.Helper()
	w, err := parseAnswerWitnessed([]byte(text), h)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A witness countersigns the newest checkpoint of its copy once it stored and verified it,
// hands it back in every answer, and countersigns it again when it reopens its copy.
func TestReceiverCountersignsItsCheckpoints(t *testing.T) {
	lines := buildChain(t, 12, 5) // checkpoints at seq 5 and 11; 14 lines with the closing one
	trailKey, witness := testSigner(t).PublicKey(), witnessSigner(t)
	if _, err := OpenReceiver(t.TempDir(), ReceiverOptions{Witness: witness}); err == nil || !strings.Contains(err.Error(), "public keys") {
		t.Fatalf("a witness without the trail's keys: %v", err)
	}
	dir := t.TempDir()
	recv, err := OpenReceiver(dir, ReceiverOptions{PublicKeys: []ed25519.PublicKey{trailKey}, Witness: witness})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	witnessKeys := []ed25519.PublicKey{witness.PublicKey()}

	// Records only: nothing to countersign yet.
	status, head, text := post(t, srv.URL, "", BatchContentType, "0", join(lines[:4]))
	if status != http.StatusOK || answerWitnessed(t, text, head) != nil || recv.Witnessed() != nil {
		t.Fatalf("records only: %d %s", status, text)
	}
	// Up to the second checkpoint: that one is countersigned.
	status, head, text = post(t, srv.URL, "", BatchContentType, "4", join(lines[4:13]))
	w := answerWitnessed(t, text, head)
	if status != http.StatusOK || w == nil || w.Entry.Seq != 11 || !bytes.Equal(append(bytes.Clone(w.Entry.Line()), '\n'), lines[11]) {
		t.Fatalf("two checkpoints: %d %s", status, text)
	}
	if err := w.VerifyWitness(witnessKeys); err != nil {
		t.Fatal(err)
	}
	if err := w.VerifyCheckpoint([]ed25519.PublicKey{trailKey}); err != nil {
		t.Fatal(err)
	}
	if err := w.VerifyWitness([]ed25519.PublicKey{trailKey}); err == nil {
		t.Fatal("the countersignature verified with the trail's key")
	}
	// Every answer that states the head carries it, refusals included.
	for _, got := range []func() (int, ChainHead, string){
		func() (int, ChainHead, string) { return getHead(t, srv.URL, "") },
		func() (int, ChainHead, string) { return post(t, srv.URL, "", BatchContentType, "0", join(lines[:2])) },
	} {
		_, h, text := got()
		if again := answerWitnessed(t, text, h); again == nil || !bytes.Equal(again.Line(), w.Line()) {
			t.Errorf("an answer without the witnessed checkpoint: %s", text)
		}
	}
	// Reopened, it countersigns its newest checkpoint again.
	if err := recv.Close(); err != nil {
		t.Fatal(err)
	}
	reopened, err := OpenReceiver(dir, ReceiverOptions{PublicKeys: []ed25519.PublicKey{trailKey}, Witness: witness})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reopened.Close() }()
	if again := reopened.Witnessed(); again == nil || again.Entry.Hash != w.Entry.Hash || again.VerifyWitness(witnessKeys) != nil {
		t.Fatalf("reopened: %+v", again)
	}
	// Reopened with other trail keys, it countersigns nothing it cannot check.
	if err := reopened.Close(); err != nil {
		t.Fatal(err)
	}
	other, err := OpenReceiver(dir, ReceiverOptions{PublicKeys: []ed25519.PublicKey{witness.PublicKey()}, Witness: witness})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close() }()
	if got := other.Witnessed(); got != nil {
		t.Fatalf("countersigned a checkpoint by a key it was not given: %s", got.Line())
	}
}

// The shipper hands each new witnessed checkpoint to OnWitnessed, once.
func TestShipperHandsBackWitnessedCheckpoints(t *testing.T) {
	src := t.TempDir()
	sink, err := OpenFileSink(src, FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := NewLog(sink, testSigner(t), sink.State(), LogOptions{})
	for i := range 3 {
		if _, err := log.Append(t.Context(), testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := log.Checkpoint(t.Context()); err != nil {
		t.Fatal(err)
	}
	recv, err := OpenReceiver(t.TempDir(), ReceiverOptions{PublicKeys: []ed25519.PublicKey{testSigner(t).PublicKey()}, Witness: witnessSigner(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = recv.Close() }()
	srv := httptest.NewServer(recv)
	defer srv.Close()
	var mu sync.Mutex
	var handed []*Witnessed
	shipper, err := NewShipper(src, ShipperOptions{URL: srv.URL, PollInterval: 10 * time.Millisecond, OnWitnessed: func(w *Witnessed) {
		mu.Lock()
		defer mu.Unlock()
		handed = append(handed, w)
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- shipper.Start(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %+v", what, shipper.Status())
			}
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(handed) }
	waitFor("the first witnessed checkpoint", func() bool { return count() == 1 })
	// More records and a checkpoint: a second one. Caught up in between, the shipper looks
	// every 10ms and hands nothing twice.
	for i := 3; i < 5; i++ {
		if _, err := log.Append(t.Context(), testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := log.Checkpoint(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor("the second witnessed checkpoint", func() bool { return count() >= 2 && shipper.Status().CaughtUp })
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handed) != 2 || handed[0].Entry.Seq != 3 || handed[1].Entry.Seq != 6 {
		t.Fatalf("handed back %d: %+v", len(handed), handed)
	}
}

// A witnessed checkpoint's line is read strictly: one canonical encoding, around a checkpoint
// entry that is canonical and hashes to its hash.
func TestParseWitnessed(t *testing.T) {
	lines := buildChain(t, 3, 10)
	cp, err := ParseLine(bytes.TrimSuffix(lines[3], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	w, err := witnessSigner(t).Countersign(cp, time.Date(2026, 11, 21, 12, 0, 1, 500, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := witnessSigner(t).Countersign(mustParse(t, lines[0]), time.Now()); err == nil {
		t.Fatal("countersigned a record")
	}
	good := string(w.Line())
	got, err := ParseWitnessed([]byte(good + "\n"))
	if err != nil || !bytes.Equal(got.Line(), w.Line()) || got.Entry.Hash != cp.Hash || !got.Time.Equal(w.Time) {
		t.Fatalf("round trip: %v %+v", err, got)
	}
	keys := []ed25519.PublicKey{witnessSigner(t).PublicKey()}
	if err := got.VerifyWitness(keys); err != nil {
		t.Fatal(err)
	}
	record := strings.Replace(good, string(cp.Line()), string(bytes.TrimSuffix(lines[0], []byte("\n"))), 1)
	for name, line := range map[string]string{
		"not JSON":                   "witnessed",
		"another version":            strings.Replace(good, `{"v":1,"witnessed"`, `{"v":2,"witnessed"`, 1),
		"no countersignature":        good[:strings.Index(good, `,"witness":`)] + "}",
		"whitespace inside":          strings.Replace(good, `,"witness":`, `, "witness":`, 1),
		"members reordered":          strings.Replace(good, `{"keyId":"`+w.KeyID+`","time"`, `{"time"`, 1),
		"a record, not a checkpoint": record,
		"the entry edited":           strings.Replace(good, `"size":3`, `"size":4`, 1),
		"a time not in UTC":          strings.Replace(good, `"time":"2026-11-21T12:00:01.0000005Z"`, `"time":"2026-11-21T13:00:01.0000005+01:00"`, 1),
		"too long":                   good + strings.Repeat(" ", MaxWitnessedBytes),
	} {
		if line == good {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if _, err := ParseWitnessed([]byte(line)); err == nil {
			t.Errorf("%s: parsed %.200q", name, line)
		}
	}
	// Read, but its countersignature does not verify: another time, or another checkpoint.
	for name, line := range map[string]string{
		"another time": strings.Replace(good, `"time":"2026-11-21T12:00:01.0000005Z"`, `"time":"2026-11-21T12:00:02.0000005Z"`, 1),
		"another key":  strings.Replace(good, `"keyId":"`+w.KeyID+`"`, `"keyId":"`+KeyID(testSigner(t).PublicKey())+`"`, 1),
	} {
		parsed, err := ParseWitnessed([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := parsed.VerifyWitness(keys); err == nil {
			t.Errorf("%s: the countersignature verified", name)
		}
	}
}

func mustParse(t *testing.T, line []byte) Entry {
	t.Helper()
	e, err := ParseLine(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Verified against a witnessed checkpoint, a trail must reach it with its head: a rewrite
// re-signed with the trail's own key is a fork, a cut one is truncated, and the witnessed
// checkpoint itself must carry a countersignature by a witness key and the trail key's
// signature.
func TestVerifyAgainstAWitnessedCheckpoint(t *testing.T) {
	lines := buildChain(t, 12, 5) // checkpoints at seq 5 and 11; the closing one at 13
	other := buildOtherChain(t, 12)
	w, err := witnessSigner(t).Countersign(mustParse(t, lines[11]), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	witnessKeys := []ed25519.PublicKey{witnessSigner(t).PublicKey()}
	trailKeys := []ed25519.PublicKey{testSigner(t).PublicKey(), otherKey(t)}
	check := func(data []byte) *Report {
		t.Helper()
		r, err := Verify(VerifyOptions{PublicKeys: trailKeys, Witnessed: w, WitnessKeys: witnessKeys}, Input{Name: "trail", Reader: bytes.NewReader(data)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := check(join(lines)); !r.OK {
		t.Fatalf("the trail itself: %+v", r.Problems)
	}
	// Another chain of the same shape, signed by a key the verifier also trusts.
	if r := check(join(other)); r.OK || !hasProblem(r, ProblemFork, 10, "the witness's checkpoint (witness key "+w.KeyID) {
		t.Fatalf("a rewrite: %+v", r.Problems)
	}
	if r := check(join(lines[:9])); r.OK || !hasProblem(r, ProblemTruncated, 9, "the witness's checkpoint") {
		t.Fatalf("cut: %+v", r.Problems)
	}
	for name, opts := range map[string]VerifyOptions{
		"no witness key":          {PublicKeys: trailKeys, Witnessed: w},
		"another witness key":     {PublicKeys: trailKeys, Witnessed: w, WitnessKeys: trailKeys},
		"the trail key not given": {PublicKeys: []ed25519.PublicKey{otherKey(t)}, Witnessed: w, WitnessKeys: witnessKeys},
	} {
		if _, err := Verify(opts, Input{Name: "trail", Reader: bytes.NewReader(join(lines))}); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

// otherKey is the key buildOtherChain signs with.
func otherKey(t *testing.T) ed25519.PublicKey {
	t.Helper()
	s, err := LoadSigner(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s.PublicKey()
}

func hasProblem(r *Report, kind ProblemKind, seq uint64, says string) bool {
	for _, p := range r.Problems {
		if p.Kind == kind && p.Seq != nil && *p.Seq == seq && strings.Contains(p.Message, says) {
			return true
		}
	}
	return false
}

// FuzzParseWitnessed: whatever ParseWitnessed accepts is exactly its canonical encoding,
// around a checkpoint entry ParseLine accepts, and nothing panics it.
func FuzzParseWitnessed(f *testing.F) {
	lines := buildChain(f, 3, 10)
	cp, err := ParseLine(bytes.TrimSuffix(lines[3], []byte("\n")))
	if err != nil {
		f.Fatal(err)
	}
	w, err := witnessSigner(f).Countersign(cp, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(w.Line())
	f.Add([]byte(`{"v":1,"witnessed":{},"witness":{}}`))
	f.Add([]byte(`{"v":1,"witnessed":null,"witness":{"keyId":"","time":"2026-11-21T12:00:00Z","sig":""}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		got, err := ParseWitnessed(line)
		if err != nil {
			return
		}
		if !bytes.Equal(got.Line(), bytes.TrimSpace(line)) || got.Entry.Checkpoint == nil {
			t.Fatalf("accepted %q, whose canonical form is %q", line, got.Line())
		}
		if _, err := ParseLine(got.Entry.Line()); err != nil {
			t.Fatalf("accepted an entry ParseLine refuses: %v", err)
		}
		_ = got.VerifyWitness([]ed25519.PublicKey{witnessSigner(t).PublicKey()})
	})
}
