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
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sizedRecord is record i with its message padded so that its entry at seq, after prev, is a
// line of exactly n bytes (without the newline).
func sizedRecord(t testing.TB, i int, seq uint64, prev Hash, n int) Record {
	t.Helper()
	r := testRecord(i)
	r.Message = ""
	base := len(newEntry(seq, prev, &r, nil).line)
	if n < base {
		t.Fatalf("a line of %d bytes cannot hold a record; the smallest is %d", n, base)
	}
	r.Message = strings.Repeat("x", n-base)
	if got := len(newEntry(seq, prev, &r, nil).line); got != n {
		t.Fatalf("sized the line to %d bytes, want %d", got, n)
	}
	return r
}

// The reader's limit is on the line without its newline: an entry of exactly MaxLineBytes
// verifies, one byte more is malformed, and the report names the size and the limit.
func TestVerifierLineLimit(t *testing.T) {
	r0 := testRecord(0)
	first := newEntry(0, Hash{}, &r0, nil)
	for _, c := range []struct {
		size int
		ok   bool
	}{{MaxLineBytes, true}, {MaxLineBytes + 1, false}, {2 << 20, false}} {
		r := sizedRecord(t, 1, 1, first.Hash, c.size)
		second := newEntry(1, first.Hash, &r, nil)
		stream := append(append(append(bytes.Clone(first.line), '\n'), second.line...), '\n')
		report := verifyBytes(t, stream, VerifyOptions{})
		if report.OK != c.ok {
			t.Errorf("a line of %d bytes: OK %v, want %v: %v", c.size, report.OK, c.ok, report.Problems)
			continue
		}
		if c.ok {
			continue
		}
		p := report.Problems[0]
		if len(report.Problems) != 1 || p.Kind != ProblemMalformed || p.Line != 2 ||
			!strings.Contains(p.Message, strconv.Itoa(c.size)+" bytes") || !strings.Contains(p.Message, strconv.Itoa(MaxLineBytes)) {
			t.Errorf("a line of %d bytes: %v, want one malformed line 2 naming its size and the limit", c.size, report.Problems)
		}
	}
}

// Log.Append refuses a record whose line the verifier would refuse, and writes nothing of the
// call that carried it: the operator can never write a trail its own verifier rejects.
func TestAppendRefusesLinesOverTheLimit(t *testing.T) {
	dir := t.TempDir()
	l, _ := openTestLog(t, dir, FileSinkOptions{}, 100)
	ctx := context.Background()
	if _, err := l.Append(ctx, testRecord(0)); err != nil {
		t.Fatal(err)
	}
	head := func() Hash { t.Helper(); return lastEntry(t, dir).Hash }
	atLimit := sizedRecord(t, 1, 1, head(), MaxLineBytes)
	if res, err := l.Append(ctx, atLimit); err != nil || res[0].Seq != 1 {
		t.Fatalf("a line of exactly %d bytes: %v %v", MaxLineBytes, res, err)
	}
	if n := len(lastEntry(t, dir).line); n != MaxLineBytes {
		t.Fatalf("the stored line is %d bytes, want %d", n, MaxLineBytes)
	}

	sizeBefore := trailBytes(t, dir)
	over := sizedRecord(t, 2, 2, head(), MaxLineBytes+1)
	for _, records := range [][]Record{{over}, {testRecord(3), over, testRecord(4)}} {
		_, err := l.Append(ctx, records...)
		if !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), strconv.Itoa(MaxLineBytes+1)+" bytes") ||
			!strings.Contains(err.Error(), strconv.Itoa(MaxLineBytes)) {
			t.Fatalf("%d records, one a line of %d bytes: err %v, want ErrLineTooLong naming the size and the limit", len(records), MaxLineBytes+1, err)
		}
		var which *RecordError
		if !errors.As(err, &which) || records[which.Index].ID != over.ID || which.Of != len(records) {
			t.Fatalf("%d records: the error %v does not say which one is refused", len(records), err)
		}
		if got := trailBytes(t, dir); got != sizeBefore {
			t.Fatalf("a refused append wrote %d bytes", got-sizeBefore)
		}
	}
	// The refused call left no trace in the chain: the next record takes seq 2, and the records
	// that came with the refused one can still be appended.
	if res, err := l.Append(ctx, testRecord(3), testRecord(4)); err != nil || res[0] != (Appended{Seq: 2}) || res[1] != (Appended{Seq: 3}) {
		t.Fatalf("after the refusals: %v %v", res, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if r := verifyDir(t, dir); !r.OK || r.Records != 4 || r.Entries != 5 {
		t.Fatalf("the trail does not verify: %+v", r)
	}
}

func lastEntry(t *testing.T, dir string) Entry {
	t.Helper()
	files, err := ChainFiles(dir)
	if err != nil || len(files) == 0 {
		t.Fatalf("no trail in %s: %v", dir, err)
	}
	data, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	lines := splitLines(data)
	e, err := ParseLine(bytes.TrimSuffix(lines[len(lines)-1], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func trailBytes(t *testing.T, dir string) int64 {
	t.Helper()
	files, err := ChainFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += info.Size()
	}
	return n
}

// The receiver keeps only what verifies, so it refuses a line over the limit with 422 (not
// 413: the body is within its limit, and a shipper that halved its batch would send the same
// line again), naming the limit; a line at the limit is stored.
func TestReceiverLineLimit(t *testing.T) {
	recv, err := OpenReceiver(t.TempDir(), ReceiverOptions{PublicKeys: []ed25519.PublicKey{testSigner(t).PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = recv.Close() }()
	srv := httptest.NewServer(recv)
	defer srv.Close()

	over := sizedRecord(t, 0, 0, Hash{}, 2<<20)
	tooLong := newEntry(0, Hash{}, &over, nil)
	status, head, text := post(t, srv.URL, "", BatchContentType, "0", append(tooLong.line, '\n'))
	if status != http.StatusUnprocessableEntity || head.Next != 0 || !strings.Contains(text, strconv.Itoa(MaxLineBytes)) ||
		!strings.Contains(text, strconv.Itoa(len(tooLong.line))+" bytes") {
		t.Fatalf("a record of %d bytes: %d %s %q, want 422 naming its size and the limit", len(tooLong.line), status, head, text)
	}
	atLimit := sizedRecord(t, 0, 0, Hash{}, MaxLineBytes)
	fits := newEntry(0, Hash{}, &atLimit, nil)
	if status, head, text := post(t, srv.URL, "", BatchContentType, "0", append(fits.line, '\n')); status != http.StatusOK || head.Next != 1 {
		t.Fatalf("a record of exactly %d bytes: %d %s %q", MaxLineBytes, status, head, text)
	}
}

// The log, the shipper, the receiver and the verifier agree on the limit: a record whose line
// is exactly MaxLineBytes long reaches the receiver's copy, which verifies.
func TestALineAtTheLimitIsShipped(t *testing.T) {
	local := t.TempDir()
	l, _ := openTestLog(t, local, FileSinkOptions{}, 100)
	ctx := context.Background()
	if _, err := l.Append(ctx, testRecord(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, sizedRecord(t, 1, 1, lastEntry(t, local).Hash, MaxLineBytes), testRecord(2)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	remote := t.TempDir()
	recv, srv := openTestReceiver(t, remote, ReceiverOptions{PublicKeys: []ed25519.PublicKey{testSigner(t).PublicKey()}})
	shipper, _ := startShipper(t, local, fastShipping(srv.URL, "limit"))
	eventually(t, 2*time.Minute, "the receiver holds the trail", func() bool {
		return recv.Head().Next == 4 && shipper.Status().Delivered == 4
	})
	if r := verifyDir(t, remote); !r.OK || r.Records != 3 {
		t.Fatalf("the copy: %+v", r)
	}
}

// With batches larger than a line may be (MaxBatchBytes is a library option), a line over the
// limit in the shipper's files is still never sent: the entries before it are, and then the
// shipper reports the line, naming its size and the limit, instead of posting what the
// receiver can only refuse (422) again and again.
func TestShipperNeverSendsALineOverTheLimit(t *testing.T) {
	local := t.TempDir()
	r0 := testRecord(0)
	e0 := newEntry(0, Hash{}, &r0, nil)
	over := sizedRecord(t, 1, 1, e0.Hash, MaxLineBytes+1)
	e1 := newEntry(1, e0.Hash, &over, nil)
	r2 := testRecord(2)
	e2 := newEntry(2, e1.Hash, &r2, nil)
	var stream []byte
	for _, e := range []Entry{e0, e1, e2} {
		stream = append(append(stream, e.line...), '\n')
	}
	if err := os.WriteFile(filepath.Join(local, "audit-00000001.jsonl"), stream, 0o600); err != nil {
		t.Fatal(err)
	}
	const batchBytes = 4 << 20 // holds the three lines

	c := &chainReader{dir: local}
	defer c.close()
	b, err := c.batch(shipPosition{}, 100, batchBytes)
	if err != nil || b.entries != 1 || !bytes.Equal(b.body, append(bytes.Clone(e0.line), '\n')) {
		t.Fatalf("the batch before the long line: %d entries, %v; want entry 0 alone", b.entries, err)
	}
	if _, err := c.batch(b.end, 100, batchBytes); err == nil || !strings.Contains(err.Error(), strconv.Itoa(len(e1.line))+" bytes") ||
		!strings.Contains(err.Error(), strconv.Itoa(MaxLineBytes)) {
		t.Fatalf("the batch at the long line: %v, want an error naming its size and the limit", err)
	}

	remote := t.TempDir()
	recv, err := OpenReceiver(remote, ReceiverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var refused []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		recv.ServeHTTP(rec, r)
		if rec.Code >= 400 {
			mu.Lock()
			refused = append(refused, rec.Code)
			mu.Unlock()
		}
		copyAnswer(w, rec)
	}))
	t.Cleanup(func() {
		srv.Close()
		_ = recv.Close()
	})
	opts := fastShipping(srv.URL, "long")
	opts.MaxBatchBytes = batchBytes
	shipper, _ := startShipper(t, local, opts)
	eventually(t, 2*time.Minute, "the shipper reports a failure", func() bool { return shipper.Status().LastError != "" })
	st := shipper.Status()
	if !strings.Contains(st.LastError, strconv.Itoa(len(e1.line))+" bytes") || !strings.Contains(st.LastError, strconv.Itoa(MaxLineBytes)) {
		t.Errorf("LastError %q does not name the line's size and the limit", st.LastError)
	}
	mu.Lock()
	if len(refused) > 0 {
		t.Errorf("the receiver refused requests %v: the long line was sent", refused)
	}
	mu.Unlock()
	if !strings.Contains(st.LastError, "audit file ") {
		t.Errorf("LastError %q is not about the local file", st.LastError)
	}
	eventually(t, 2*time.Minute, "the receiver holds the entry before the long line", func() bool { return recv.Head().Next == 1 })
}

// A refused call is rolled back whole even when it crossed a checkpoint (CheckpointEvery 2)
// and carried records the chain already held: the checkpoint it made is neither written nor
// published, the next record takes the seq the refused call started at and is signed when its
// own turn comes, the records the chain held before the call are still known, and the trail
// verifies.
func TestARefusedAppendIsRolledBackAcrossACheckpoint(t *testing.T) {
	dir := t.TempDir()
	sink, err := OpenFileSink(dir, FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var published [][]byte
	l := NewLog(sink, testSigner(t), sink.State(), LogOptions{CheckpointEvery: 2, OnCheckpoint: func(line []byte) {
		mu.Lock()
		defer mu.Unlock()
		published = append(published, line)
	}})
	ctx := context.Background()
	r := testRecord
	over := sizedRecord(t, 9, 3, Hash{}, MaxLineBytes+1)
	dup := func(seq uint64) Appended { return Appended{Seq: seq, Duplicate: true} }
	for _, c := range []struct {
		name    string
		refused []Record // a call refused for its last record
		then    []Record // the call after it
		want    []Appended
	}{
		{"nothing refused yet", nil, []Record{r(0)}, []Appended{{Seq: 0}}},
		// r1 would be seq 1, a checkpoint seq 2, r2 seq 3.
		{"across a checkpoint", []Record{r(1), r(2), over}, []Record{r(1)}, []Appended{{Seq: 1}}}, // and a checkpoint, seq 2
		// r0 and r1 are held; r3 twice is one record; r4 would be seq 4, a checkpoint seq 5.
		{"with records already held", []Record{r(0), r(3), r(3), r(1), r(4), r(0), over}, []Record{r(2), r(0)}, []Appended{{Seq: 3}, dup(0)}},
		// r3 would be seq 4 and a checkpoint seq 5; the long record comes just after them.
		{"right after a checkpoint", []Record{r(3), over}, []Record{r(3), r(1)}, []Appended{{Seq: 4}, dup(1)}}, // and a checkpoint, seq 5
		{"after the refusals", nil, []Record{r(5), r(4), r(3)}, []Appended{{Seq: 6}, {Seq: 7}, dup(4)}},        // and a checkpoint, seq 8
	} {
		if c.refused != nil {
			before := trailBytes(t, dir)
			_, err := l.Append(ctx, c.refused...)
			var refused *RecordError
			if !errors.As(err, &refused) || !errors.Is(err, ErrLineTooLong) || refused.Index != len(c.refused)-1 {
				t.Fatalf("%s: %v, want the last record refused as too long", c.name, err)
			}
			if got := trailBytes(t, dir); got != before {
				t.Fatalf("%s: the refused call wrote %d bytes", c.name, got-before)
			}
		}
		if res, err := l.Append(ctx, c.then...); err != nil || !slices.Equal(res, c.want) {
			t.Fatalf("%s, then: %v %v, want %v", c.name, res, err, c.want)
		}
	}
	if err := l.Close(); err != nil { // nothing unsigned: no checkpoint to add
		t.Fatal(err)
	}
	report := verifyDir(t, dir)
	if !report.OK || report.Records != 6 || report.Checkpoints != 3 || report.Entries != 9 || report.Unsigned != 0 {
		t.Fatalf("the trail: %+v", report)
	}
	// Only the checkpoints the trail holds were published.
	files, _ := ChainFiles(dir)
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := splitLines(data)
	mu.Lock()
	defer mu.Unlock()
	if len(published) != 3 {
		t.Fatalf("published %d checkpoints, want the three at seq 2, 5 and 8", len(published))
	}
	for i, seq := range []int{2, 5, 8} {
		if !bytes.Equal(append(published[i], '\n'), lines[seq]) {
			t.Errorf("published checkpoint %d is not the trail's line of seq %d", i, seq)
		}
	}
	// A log opened on the trail knows the same records.
	l2, _ := openTestLog(t, dir, FileSinkOptions{}, 2)
	defer func() { _ = l2.Close() }()
	if res, err := l2.Append(ctx, r(0), r(1), r(2), r(3), r(4), r(5)); err != nil || slices.ContainsFunc(res, func(a Appended) bool { return !a.Duplicate }) {
		t.Fatalf("reopened: %v %v, want every record a duplicate", res, err)
	}
}
