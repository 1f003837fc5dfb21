package audit

import (
	"bytes"
	"crypto/ed25519"
	"testing"
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
