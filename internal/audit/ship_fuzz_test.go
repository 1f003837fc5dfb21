package audit

import (
	"bytes"
	"crypto/ed25519"
	"strconv"
	"testing"
)

// FuzzReceiverBatch: whatever a client posts, the receiver accepts it only if the copy with it
// appended still verifies as one chain, and it stores exactly the lines posted. A body is a run
// of a real chain's lines with some bytes cut out at one place and others put in: small inputs
// for the fuzzer (which also minimises quickly) that still reach every check of a batch.
func FuzzReceiverBatch(f *testing.F) {
	lines := buildChain(f, 12, 4)
	const held = 5 // the receiver holds lines[:held]
	keys := []ed25519.PublicKey{testSigner(f).PublicKey()}
	v := newVerifier(VerifyOptions{})
	if _, err := v.run([]Input{{Name: "held", Reader: bytes.NewReader(join(lines[:held]))}}); err != nil {
		f.Fatal(err)
	}
	head, ids := ChainHead{Next: v.expect, Head: v.head}, v.ids
	f.Add(uint8(held), uint8(len(lines)), uint16(0), uint16(0), []byte(nil))            // the rest: accepted
	f.Add(uint8(held), uint8(1), uint16(0), uint16(0), []byte(nil))                     // one entry: accepted
	f.Add(uint8(held+1), uint8(3), uint16(0), uint16(0), []byte(nil))                   // a gap
	f.Add(uint8(0), uint8(held), uint16(0), uint16(0), []byte(nil))                     // already held
	f.Add(uint8(held), uint8(2), uint16(400), uint16(1), []byte("X"))                   // an edit
	f.Add(uint8(held), uint8(2), uint16(0), uint16(0), []byte("{\"v\":1,\"seq\":5}\n")) // a line put in
	f.Add(uint8(held), uint8(2), uint16(1<<15), uint16(1), []byte(nil))                 // the last newline cut
	f.Fuzz(func(t *testing.T, from, count uint8, at, cut uint16, insert []byte) {
		first := min(int(from), len(lines))
		base := join(lines[first:min(first+int(count), len(lines))])
		pos := min(int(at), len(base))
		end := min(pos+int(cut), len(base))
		body := append(append(bytes.Clone(base[:pos]), insert...), base[end:]...)
		entries, err := checkBatch(head, ids, keys, bytes.Clone(body))
		if err != nil {
			return
		}
		var stored []byte
		for _, e := range entries {
			stored = append(append(stored, e.Line()...), '\n')
		}
		if !bytes.Equal(stored, body) {
			t.Fatalf("accepted %q but would store %q", body, stored)
		}
		r, err := Verify(VerifyOptions{PublicKeys: keys}, Input{Name: "copy", Reader: bytes.NewReader(append(join(lines[:held]), body...))})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK || r.Entries != uint64(held+len(entries)) {
			t.Fatalf("accepted a batch after which the copy does not verify: %v", r.Problems)
		}
	})
}

// FuzzShipAnswer: a receiver's answer and a first-seq header are read without panicking, and
// what is accepted means one thing (it encodes back to itself).
func FuzzShipAnswer(f *testing.F) {
	f.Add(encodeHeadAnswer(ChainHead{Next: 7, Head: Hash{1}}, "refused"), "7")
	f.Add([]byte(`{"next":0,"head":"`+Hash{}.String()+`"}`), "0")
	f.Add([]byte(`{"next":18446744073709551615,"head":"`+Hash{255}.String()+`","error":"\u0000"}`), "18446744073709551615")
	f.Add([]byte(`{"next":1e3,"head":null}`), "+1")
	f.Fuzz(func(t *testing.T, answer []byte, header string) {
		if h, problem, err := parseHeadAnswer(answer); err == nil {
			again, problemAgain, err := parseHeadAnswer(encodeHeadAnswer(h, problem))
			if err != nil || again != h || problemAgain != problem {
				t.Fatalf("%q read as %s %q, which reads back as %s %q (%v)", answer, h, problem, again, problemAgain, err)
			}
		}
		if n, err := parseFirstSeq(header); err == nil && strconv.FormatUint(n, 10) != header {
			t.Fatalf("header %q read as %d", header, n)
		}
	})
}
