package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBackoffDoublesToItsCapWithJitter(t *testing.T) {
	lo, hi := 100*time.Millisecond, 2*time.Second
	for _, c := range []struct {
		n        int
		u        float64
		min, max time.Duration
	}{
		{1, 0, 50 * time.Millisecond, 50 * time.Millisecond},
		{1, 0.999, 99 * time.Millisecond, 100 * time.Millisecond},
		{2, 0, 100 * time.Millisecond, 100 * time.Millisecond},
		{3, 0.5, 300 * time.Millisecond, 300 * time.Millisecond},
		{5, 0.999, 1599 * time.Millisecond, 1600 * time.Millisecond},
		{6, 0, time.Second, time.Second}, // 3.2s capped at 2s, then its upper half
		{6, 0.999, 1999 * time.Millisecond, 2 * time.Second},
		{1000, 0.999, 1999 * time.Millisecond, 2 * time.Second}, // no overflow however long it fails
	} {
		if got := backoff(c.n, lo, hi, c.u); got < c.min || got > c.max {
			t.Errorf("backoff(%d, u=%v) = %v, want %v..%v", c.n, c.u, got, c.min, c.max)
		}
	}
	if got := backoff(70, time.Second, time.Duration(1<<62), 0.5); got <= 0 {
		t.Errorf("a huge cap overflowed: %v", got)
	}
}

func TestCursorFile(t *testing.T) {
	dir := t.TempDir()
	path := cursorFile(dir, "http")
	if _, ok, err := loadCursor(path, "https://a"); ok || err != nil {
		t.Fatalf("no cursor yet: %v %v", ok, err)
	}
	pos := shipPosition{file: "audit-00000003.jsonl", offset: 12345, next: 678, prev: Hash{1, 2, 3}}
	if err := saveCursor(path, "https://a", pos); err != nil {
		t.Fatal(err)
	}
	pos.next++
	if err := saveCursor(path, "https://a", pos); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := loadCursor(path, "https://a"); !ok || err != nil || got != pos {
		t.Fatalf("loaded %+v %v %v, want %+v", got, ok, err, pos)
	}
	if _, ok, err := loadCursor(path, "https://b"); ok || err != nil {
		t.Fatalf("a cursor for another endpoint was used: %v %v", ok, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
	if files, _ := ChainFiles(dir); len(files) != 0 {
		t.Fatalf("the cursor is listed as a chain file: %v", files)
	}
	for _, bad := range []string{
		`{"url":"https://a","file":"../x/audit-00000001.jsonl","offset":0,"next":0,"prev":"` + strings.Repeat("0", 64) + `"}`,
		`{"url":"https://a","file":"audit-00000001.jsonl","offset":-1,"next":0,"prev":"` + strings.Repeat("0", 64) + `"}`,
		`{"url":"https://a","file":"audit-00000001.jsonl","offset":0,"next":0,"prev":"00"}`,
		`{"url":`,
	} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := loadCursor(path, "https://a"); ok || err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// writeLog appends n records through a log on a FileSink in dir and closes it.
func writeLog(t *testing.T, dir string, maxFileBytes int64, from, n int) {
	t.Helper()
	l, _ := openTestLog(t, dir, FileSinkOptions{MaxFileBytes: maxFileBytes}, 10)
	for i := from; i < from+n; i++ {
		if _, err := l.Append(context.Background(), testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func dirLines(t *testing.T, dir string) [][]byte {
	t.Helper()
	files, err := ChainFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	if len(all) == 0 {
		return nil
	}
	return splitLines(all)
}

func TestChainReaderBatchesFollowTheFiles(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, 8<<10, 0, 40) // about 10 lines a file
	lines := dirLines(t, dir)
	files, _ := ChainFiles(dir)
	if len(files) < 4 {
		t.Fatalf("%d files, want several", len(files))
	}
	c := &chainReader{dir: dir}
	defer c.close()

	// Batches are bounded by entries and bytes, never cross a file, and join up to the chain.
	var got []byte
	pos := shipPosition{}
	for _, limit := range []struct{ entries, bytes int }{{3, 1 << 20}, {100, 1}, {100, 2000}, {100, 1 << 20}} {
		b, err := c.batch(pos, limit.entries, limit.bytes)
		if err != nil {
			t.Fatal(err)
		}
		if b.entries == 0 || b.entries > limit.entries || (b.entries > 1 && len(b.body) > limit.bytes) {
			t.Fatalf("limits %+v: %d entries, %d bytes", limit, b.entries, len(b.body))
		}
		if b.first != pos.next || b.end.file != filepath.Base(files[0]) && b.end.file != filepath.Base(files[1]) {
			t.Fatalf("batch %+v from %+v", b.end, pos)
		}
		got = append(got, b.body...)
		pos = b.end
	}
	for {
		b, err := c.batch(pos, 7, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if b.entries == 0 {
			pos = b.end
			break
		}
		if n := bytes.Count(b.body, []byte("\n")); n != b.entries {
			t.Fatalf("%d lines in a batch of %d", n, b.entries)
		}
		got = append(got, b.body...)
		pos = b.end
	}
	if !bytes.Equal(got, join(lines)) || pos.next != uint64(len(lines)) || pos.prev != lineHash(t, lines[len(lines)-1]) {
		t.Fatalf("the batches do not add up to the chain: end %+v, %d lines", pos, len(lines))
	}

	// A line being written (no newline yet) is not sent; once whole, it is.
	last := files[len(files)-1]
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	more := buildChainFrom(t, lines, 1)
	if _, err := f.Write(more[0][:100]); err != nil {
		t.Fatal(err)
	}
	if b, err := c.batch(pos, 100, 1<<20); err != nil || b.entries != 0 {
		t.Fatalf("a partial line was taken: %d %v", b.entries, err)
	}
	if _, err := f.Write(more[0][100:]); err != nil {
		t.Fatal(err)
	}
	if b, err := c.batch(pos, 100, 1<<20); err != nil || b.entries != 1 || !bytes.Equal(b.body, more[0]) {
		t.Fatalf("the completed line: %d %v", b.entries, err)
	}
	if n, err := c.localNext(); err != nil || n != uint64(len(lines))+1 {
		t.Fatalf("localNext %d %v", n, err)
	}

	// seek finds any entry, from the index or forward from a position, and the end.
	for _, target := range []uint64{0, 1, 9, 10, 11, 25, uint64(len(lines)), uint64(len(lines)) + 1} {
		for _, start := range []shipPosition{{}, {file: filepath.Base(files[0]), next: 0}} {
			p, err := c.seek(start, target)
			if err != nil {
				t.Fatalf("seek %d: %v", target, err)
			}
			all := append(cloneLines(lines), more[0])
			var want Hash
			if target > 0 {
				want = lineHash(t, all[target-1])
			}
			if p.next != target || p.prev != want || !c.holds(p) {
				t.Fatalf("seek %d from %+v: %+v", target, start, p)
			}
			if b, err := c.batch(p, 1, 1<<20); err != nil || (target <= uint64(len(lines)) && !bytes.Equal(b.body, all[target])) {
				t.Fatalf("the batch at seq %d: %v", target, err)
			}
		}
	}
	if _, err := c.seek(shipPosition{}, uint64(len(lines))+2); !errors.Is(err, errAheadOfLocal) {
		t.Fatalf("beyond the end: %v", err)
	}
	if c.holds(shipPosition{file: filepath.Base(files[1]), offset: 5, next: 12}) {
		t.Fatal("a place inside a line holds")
	}
	// After retention removed the oldest file, its entries cannot be sent.
	if err := os.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.seek(shipPosition{}, 2); !errors.Is(err, errNotHeldLocally) {
		t.Fatalf("a removed entry: %v", err)
	}
}

// buildChainFrom makes n more lines continuing lines, as a log would.
func buildChainFrom(t *testing.T, lines [][]byte, n int) [][]byte {
	t.Helper()
	last, err := ParseLine(bytes.TrimSuffix(lines[len(lines)-1], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	prev, seq := last.Hash, last.Seq+1
	for i := range n {
		r := testRecord(100000 + i)
		e := newEntry(seq, prev, &r, nil)
		out = append(out, append(bytes.Clone(e.Line()), '\n'))
		prev, seq = e.Hash, seq+1
	}
	return out
}

// startShipper runs a shipper until the returned stop is called.
func startShipper(t *testing.T, dir string, opts ShipperOptions) (*Shipper, func()) {
	t.Helper()
	s, err := NewShipper(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}
	t.Cleanup(stop)
	return s, stop
}

// eventually polls cond until it holds or the time is up, running meanwhile between polls.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool, meanwhile ...func()) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		for _, f := range meanwhile {
			f()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fastShipping polls and backs off in milliseconds. Its request limit is not short: tests
// that use it count every failed request, and a local request can take seconds on a busy
// machine.
func fastShipping(url, name string) ShipperOptions {
	return ShipperOptions{URL: url, Name: name, PollInterval: 10 * time.Millisecond,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, RequestTimeout: time.Minute}
}

func openTestReceiver(t *testing.T, dir string, opts ReceiverOptions) (*Receiver, *httptest.Server) {
	t.Helper()
	recv, err := OpenReceiver(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(recv)
	t.Cleanup(func() {
		srv.Close()
		_ = recv.Close()
	})
	return recv, srv
}

// A receiver that already holds part of the chain gets the rest, from its head; one that
// holds another chain, or more than there is here, gets nothing and the shipper says why.
func TestShipperResumesFromTheReceiversHead(t *testing.T) {
	local := t.TempDir()
	writeLog(t, local, 16<<10, 0, 60)
	lines := dirLines(t, local)

	recv, srv := openTestReceiver(t, t.TempDir(), ReceiverOptions{PublicKeys: []ed25519.PublicKey{testSigner(t).PublicKey()}})
	if status, _, text := post(t, srv.URL, "", BatchContentType, "0", join(lines[:23])); status != http.StatusOK {
		t.Fatalf("seeding the receiver: %d %s", status, text)
	}
	s, stop := startShipper(t, local, fastShipping(srv.URL, "resume"))
	eventually(t, 2*time.Minute, "the receiver catches up, and the shipper knows", func() bool {
		return recv.Head().Next == uint64(len(lines)) && s.Status().Delivered == uint64(len(lines))
	})
	stop()
	if st := s.Status(); st.Delivered != uint64(len(lines)) || st.Pending != 0 || st.Local != uint64(len(lines)) || st.Failures != 0 {
		t.Fatalf("status %+v", st)
	}
	if r := verifyDir(t, recv.dir); !r.OK || r.Entries != uint64(len(lines)) {
		t.Fatalf("%+v", r)
	}
	// The cursor points at the end, and a new shipper takes it up, confirms it with the
	// receiver and has nothing to send.
	peek, err := NewShipper(local, fastShipping(srv.URL, "resume"))
	if err != nil {
		t.Fatal(err)
	}
	peek.loadCursor()
	if !peek.hasPos || peek.pos.next != uint64(len(lines)) {
		t.Fatalf("cursor %+v", peek.pos)
	}
	again, stop := startShipper(t, local, fastShipping(srv.URL, "resume"))
	eventually(t, 2*time.Minute, "the restarted shipper is caught up", func() bool { return again.Status().CaughtUp })
	stop()
	if st := again.Status(); st.Delivered != uint64(len(lines)) || st.Pending != 0 || st.Failures != 0 || recv.Head().Next != uint64(len(lines)) {
		t.Fatalf("after a restart: %+v, receiver at %s", st, recv.Head())
	}

	for _, c := range []struct {
		name   string
		seed   [][]byte
		reason string
	}{
		{"another chain", buildOtherChain(t, 8), "another chain"},
		{"ahead of the local chain", append(cloneLines(lines), buildChainFrom(t, lines, 3)...), "beyond the local chain"},
	} {
		recv, srv := openTestReceiver(t, t.TempDir(), ReceiverOptions{})
		if status, _, text := post(t, srv.URL, "", BatchContentType, "0", join(c.seed)); status != http.StatusOK {
			t.Fatalf("%s: seeding: %d %s", c.name, status, text)
		}
		s, stop := startShipper(t, local, fastShipping(srv.URL, "refused"))
		eventually(t, 2*time.Minute, c.name+": the failure is reported", func() bool { return s.Status().ConsecutiveFailures >= 2 })
		stop()
		if st := s.Status(); !strings.Contains(st.LastError, c.reason) || recv.Head().Next != uint64(len(c.seed)) {
			t.Errorf("%s: status %+v, receiver at %s", c.name, st, recv.Head())
		}
	}
}

// A receiver that stores a batch and then fails the request (the answer lost, an error after
// the write) gets the next batch, not the same one again; one whose bodies are smaller than the
// shipper's batches gets smaller batches.
func TestShipperAfterAnAmbiguousFailure(t *testing.T) {
	local := t.TempDir()
	writeLog(t, local, 0, 0, 120)
	lines := dirLines(t, local)
	recv, err := OpenReceiver(t.TempDir(), ReceiverOptions{MaxBodyBytes: 20 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = recv.Close() }()
	var mu sync.Mutex // the handler runs on the server's goroutines
	var posts, storedThenFailed, conflicts int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			recv.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		posts++
		rec := httptest.NewRecorder()
		recv.ServeHTTP(rec, r)
		if rec.Code == http.StatusOK && posts%2 == 0 {
			storedThenFailed++
			http.Error(w, "stored, but the proxy says otherwise", http.StatusBadGateway)
			return
		}
		if rec.Code == http.StatusConflict {
			conflicts++
		}
		copyAnswer(w, rec)
	}))
	defer srv.Close()
	opts := fastShipping(srv.URL, "ambiguous")
	opts.MaxBatchEntries = 500
	s, stop := startShipper(t, local, opts)
	eventually(t, 2*time.Minute, "the shipper knows the receiver caught up", func() bool { return s.Status().Delivered == uint64(len(lines)) })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if storedThenFailed == 0 || conflicts != 0 {
		t.Fatalf("%d batches stored then failed, %d sent again", storedThenFailed, conflicts)
	}
	if st := s.Status(); st.Delivered != uint64(len(lines)) || st.Failures != uint64(storedThenFailed) {
		t.Fatalf("status %+v after %d failures", st, storedThenFailed)
	}
	if s.batchBytes > 20<<10 {
		t.Fatalf("batches of %d bytes to a receiver taking 20 KiB", s.batchBytes)
	}
	if r := verifyDir(t, recv.dir); !r.OK || r.Entries != uint64(len(lines)) {
		t.Fatalf("%+v", r)
	}
}

func TestShipperOptionsAreChecked(t *testing.T) {
	for _, opts := range []ShipperOptions{
		{URL: "ftp://x"},
		{URL: "https://"},
		{URL: "http://collector", BearerToken: "t"},
		{URL: "https://collector", Name: "Not_A_Name"},
		{URL: "https://collector", CA: []byte("not PEM")},
		{URL: "https://collector", ClientCert: []byte("x")},
	} {
		if _, err := NewShipper(t.TempDir(), opts); err == nil {
			t.Errorf("accepted %+v", opts)
		}
	}
}
