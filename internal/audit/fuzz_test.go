package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"
)

func FuzzParseLine(f *testing.F) {
	for _, l := range buildChain(f, 3, 2) {
		f.Add(bytes.TrimSuffix(l, []byte("\n")))
	}
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`{"v":1,"seq":01}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		if e, ok := parseCanonical(bytes.Clone(line), new(Record)); ok {
			// The fast reader is strict: what it accepts is exactly the canonical encoding.
			body := appendBody(nil, &e)
			if got := appendHash(body[:len(body)-1], e.Hash); !bytes.Equal(got, line) {
				t.Fatalf("parseCanonical accepted a non-canonical line:\n%q\ncanonical:\n%q", line, got)
			}
		}
		e, err := ParseLine(line)
		if err != nil {
			return
		}
		if canonical := newEntry(e.Seq, e.Prev, e.Record, e.Checkpoint); !bytes.Equal(canonical.line, line) || canonical.Hash != e.Hash {
			t.Fatalf("ParseLine accepted %q, whose canonical form is %q", line, canonical.line)
		}
	})
}

// FuzzVerify: arbitrary bytes never panic the verifier, and verify only if they are a chain,
// as checked here independently of the verifier's own bookkeeping.
func FuzzVerify(f *testing.F) {
	lines := buildChain(f, 6, 3)
	f.Add(join(lines))
	f.Add(join(lines[:4]))
	f.Add(join(append(cloneLines(lines[:2]), lines[3:]...)))
	f.Add([]byte("\n\n"))
	pub := testSigner(f).PublicKey()
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Verify(VerifyOptions{PublicKeys: []ed25519.PublicKey{pub}}, Input{Name: "fuzz", Reader: bytes.NewReader(data)})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			return
		}
		var prev Hash
		var n uint64
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				t.Fatalf("verified a stream ending without a newline")
			}
			e, err := ParseLine(data[:i])
			if err != nil {
				t.Fatalf("verified a stream with a bad line %d: %v", n+1, err)
			}
			if e.Seq != n || e.Prev != prev {
				t.Fatalf("verified a broken chain at line %d: seq %d prev %s, want %d %s", n+1, e.Seq, e.Prev, n, prev)
			}
			if c := e.Checkpoint; c != nil && (c.Size != e.Seq || c.Head != e.Prev || !ed25519.Verify(pub, c.signedMessage(), c.Signature)) {
				t.Fatalf("verified a bad checkpoint at line %d", n+1)
			}
			prev, n, data = e.Hash, n+1, data[i+1:]
		}
		if n != r.Entries {
			t.Fatalf("the report counts %d entries, the stream has %d", r.Entries, n)
		}
	})
}

// FuzzVerifyJunkLine: a line that is not an entry, put anywhere into a good chain, is reported
// once, as itself, and nothing else is: the entries after it are judged against the last one
// read.
func FuzzVerifyJunkLine(f *testing.F) {
	lines := buildChain(f, 8, 3)
	f.Add(uint8(3), []byte("not an entry"))
	f.Add(uint8(0), []byte(`{"v":1,"seq":4}`))
	f.Add(uint8(11), []byte(`{"v":2,"seq":4,"prev":"x"}`))
	f.Add(uint8(5), []byte(""))
	f.Fuzz(func(t *testing.T, at uint8, junk []byte) {
		if bytes.IndexByte(junk, '\n') >= 0 {
			return
		}
		_, err := ParseLine(junk)
		if le := (*LineError)(nil); err == nil || errors.As(err, &le) && le.HasSeq {
			return // an entry, or readable enough to claim a seq: judged as that entry, not as junk
		}
		pos := int(at) % (len(lines) + 1)
		stream := join(append(append(cloneLines(lines[:pos]), append(junk, '\n')), lines[pos:]...))
		r, err := Verify(VerifyOptions{PublicKeys: []ed25519.PublicKey{testSigner(t).PublicKey()}}, Input{Name: "fuzz", Reader: bytes.NewReader(stream)})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Problems) != 1 || r.Problems[0].Line != pos+1 || r.Problems[0].Seq != nil || r.Entries != uint64(len(lines)) {
			t.Fatalf("junk on line %d: %d entries of %d, problems %v", pos+1, r.Entries, len(lines), r.Problems)
		}
	})
}

// FuzzAppendVerifies: whatever a record holds, Log.Append either refuses it or writes a line
// the verifier reads back as that record.
func FuzzAppendVerifies(f *testing.F) {
	f.Add("alice", "moved \"x\"\n", "pvc", "web\x00\xff", int64(1798000000), int64(5), int64(-3))
	f.Add("", "", "", "", int64(-62135596800), int64(0), int64(0))
	f.Add("bob", "é☃", "k", "v", int64(253402300800), int64(999999999), int64(1)) // year 10000
	f.Fuzz(func(t *testing.T, actor, message, name, value string, sec, nsec, generation int64) {
		var buf bytes.Buffer
		l := NewLog(NewWriterSink(&buf), testSigner(t), ChainState{}, LogOptions{})
		subject := Subject{APIVersion: "v1", Kind: "ConfigMap", Namespace: name, Name: value, UID: "u", Generation: generation}
		rec := Transition(subject, actor, "Act", name, value, "Reason", message, "", time.Unix(sec, nsec), Detail{Name: name, Value: value})
		_, appendErr := l.Append(context.Background(), rec)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := Verify(VerifyOptions{PublicKeys: []ed25519.PublicKey{testSigner(t).PublicKey()}}, Input{Name: "fuzz", Reader: bytes.NewReader(buf.Bytes())})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			t.Fatalf("appended (err %v), and the verifier refuses it: %v\n%q", appendErr, r.Problems, buf.Bytes())
		}
		if appendErr == nil && r.Records != 1 {
			t.Fatalf("appended, but the trail holds %d records", r.Records)
		}
		if appendErr != nil && buf.Len() != 0 {
			t.Fatalf("refused (%v), yet written: %q", appendErr, buf.Bytes())
		}
	})
}
