package audit

import (
	"bytes"
	"crypto/ed25519"
	"testing"
)

func TestUnmodifiedChainVerifies(t *testing.T) {
	lines := buildChain(t, 250, 100)
	r := verifyBytes(t, join(lines), VerifyOptions{})
	if !r.OK || r.Records != 250 || r.Checkpoints != 3 || r.Unsigned != 0 || len(r.Warnings) != 0 {
		t.Fatalf("report %+v", r)
	}
	if r.LastCheckpoint.Size != 252 || r.LastCheckpoint.Line != 253 {
		t.Errorf("last checkpoint %+v, want size 252 on line 253", r.LastCheckpoint)
	}
}

// Each tampering kind is reported as itself, at the right line and sequence number.
func TestEachTamperingIsNamed(t *testing.T) {
	base := buildChain(t, 30, 10) // seq 10, 21, 32 are checkpoints; 33 lines
	signer := testSigner(t)
	otherPub, _, _ := ed25519.GenerateKey(nil)
	lastCP, err := ParseLine(bytes.TrimSuffix(base[len(base)-1], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func(l [][]byte) [][]byte
		opts   VerifyOptions
		kind   ProblemKind
		seq    int64
		line   int
	}{
		{"edited record", func(l [][]byte) [][]byte {
			l[5] = bytes.Replace(l[5], []byte("StepSucceeded"), []byte("StepSucceedes"), 1)
			return l
		}, VerifyOptions{}, ProblemHashMismatch, 5, 6},
		{"edited and rehashed", func(l [][]byte) [][]byte {
			l[5] = rehash(bytes.Replace(l[5], []byte("StepSucceeded"), []byte("StepSucceedes"), 1))
			return l
		}, VerifyOptions{}, ProblemPrevMismatch, 6, 7},
		{"deleted", func(l [][]byte) [][]byte { return append(l[:7], l[8:]...) }, VerifyOptions{}, ProblemGap, 8, 8},
		{"duplicated", func(l [][]byte) [][]byte {
			return append(l[:8], append([][]byte{l[7]}, l[8:]...)...)
		}, VerifyOptions{}, ProblemDuplicate, 7, 9},
		{"inserted", func(l [][]byte) [][]byte {
			forged := rehash(bytes.Replace(l[4], []byte(`"seq":4,`), []byte(`"seq":5,`), 1))
			return append(l[:5], append([][]byte{forged}, l[5:]...)...)
		}, VerifyOptions{}, ProblemConflict, 5, 7},
		{"reordered", func(l [][]byte) [][]byte { l[3], l[4] = l[4], l[3]; return l }, VerifyOptions{}, ProblemOutOfOrder, 3, 5},
		// The newest checkpoint was also published outside the stream; the records it covers,
		// and it, are cut from the end.
		{"truncated after the last checkpoint", func(l [][]byte) [][]byte { return l[:len(l)-3] },
			VerifyOptions{Trusted: lastCP.Checkpoint}, ProblemTruncated, 30, 31},
		{"truncated below the last checkpoint", func(l [][]byte) [][]byte { return l[:12] },
			VerifyOptions{Trusted: lastCP.Checkpoint}, ProblemTruncated, 12, 13},
		{"rewritten below a trusted checkpoint", func(l [][]byte) [][]byte {
			// Everything re-linked from seq 25 on, with the checkpoint dropped: only the trusted
			// checkpoint can tell.
			l = l[:len(l)-1]
			l[25] = rehash(bytes.Replace(l[25], []byte("StepSucceeded"), []byte("StepSucceedes"), 1))
			for i := 26; i < len(l); i++ {
				prev := bytes.TrimSuffix(l[i-1], []byte("\n"))
				hash := prev[len(prev)-hashSuffixLen+len(`,"hash":"`) : len(prev)-2]
				e, _ := ParseLine(bytes.TrimSuffix(l[i], []byte("\n")))
				l[i] = rehash(bytes.Replace(l[i], []byte(e.Prev.String()), hash, 1))
			}
			return l
		}, VerifyOptions{Trusted: func() *Checkpoint {
			c := &Checkpoint{Size: 32, Head: mustHead(t, base[31]), Time: lastCP.Checkpoint.Time}
			signer.sign(c)
			return c
		}()}, ProblemFork, 31, 32},
		{"re-linked under a checkpoint", func(l [][]byte) [][]byte {
			l[14] = rehash(bytes.Replace(l[14], []byte("StepSucceeded"), []byte("StepSucceedes"), 1))
			for i := 15; i <= 21; i++ {
				prev := bytes.TrimSuffix(l[i-1], []byte("\n"))
				hash := prev[len(prev)-hashSuffixLen+len(`,"hash":"`) : len(prev)-2]
				e, _ := ParseLine(bytes.TrimSuffix(l[i], []byte("\n")))
				l[i] = rehash(bytes.Replace(l[i], []byte(e.Prev.String()), hash, 1))
			}
			return l
		}, VerifyOptions{}, ProblemCheckpointMismatch, 21, 22},
		{"bad checkpoint signature", func(l [][]byte) [][]byte {
			i := bytes.Index(l[10], []byte(`"sig":"`)) + len(`"sig":"`)
			l[10][i] ^= 1
			l[10] = rehash(l[10])
			return l
		}, VerifyOptions{}, ProblemBadSignature, 10, 11},
		{"unknown key", func(l [][]byte) [][]byte { return l }, VerifyOptions{PublicKeys: []ed25519.PublicKey{otherPub}}, ProblemUnknownKey, 10, 11},
		{"unknown format version", func(l [][]byte) [][]byte {
			l[3] = []byte(`{"v":2,"seq":3,"whatever":true}` + "\n")
			return l
		}, VerifyOptions{}, ProblemUnknownVersion, -1, 4},
		{"malformed line", func(l [][]byte) [][]byte { l[2] = l[2][:40]; l[2] = append(l[2], '\n'); return l }, VerifyOptions{}, ProblemMalformed, -1, 3},
		{"non-canonical", func(l [][]byte) [][]byte {
			l[2] = rehash(bytes.Replace(l[2], []byte(`"actor":`), []byte(`"actor": `), 1))
			return l
		}, VerifyOptions{}, ProblemNonCanonical, 2, 3},
		{"torn last line", func(l [][]byte) [][]byte { l[len(l)-1] = l[len(l)-1][:50]; return l }, VerifyOptions{}, ProblemTornLine, -1, 33},
		{"missing start", func(l [][]byte) [][]byte { return l[3:] }, VerifyOptions{}, ProblemMissingStart, 3, 1},
		{"one record twice", func(l [][]byte) [][]byte {
			// The record of seq 2 re-appended as a new entry at the end, properly linked.
			e2, _ := ParseLine(bytes.TrimSuffix(l[2], []byte("\n")))
			last, _ := ParseLine(bytes.TrimSuffix(l[len(l)-1], []byte("\n")))
			again := newEntry(last.Seq+1, last.Hash, e2.Record, nil)
			return append(l, append(again.line, '\n'))
		}, VerifyOptions{}, ProblemDuplicateID, 33, 34},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := verifyBytes(t, join(c.mutate(cloneLines(base))), c.opts)
			if r.OK {
				t.Fatalf("verified OK")
			}
			found := false
			for _, p := range r.Problems {
				if p.Kind == c.kind && (c.seq < 0 || (p.Seq != nil && *p.Seq == uint64(c.seq))) && p.Line == c.line {
					found = true
				}
			}
			if !found {
				t.Errorf("want %s at seq %d line %d; got %v", c.kind, c.seq, c.line, r.Problems)
			}
		})
	}
}

func mustHead(t *testing.T, line []byte) Hash {
	t.Helper()
	e, err := ParseLine(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	return e.Hash
}

func TestUnsignedTailIsReported(t *testing.T) {
	lines := buildChain(t, 25, 10)
	r := verifyBytes(t, join(lines[:len(lines)-1]), VerifyOptions{}) // drop the final checkpoint
	if !r.OK || r.Unsigned != 5 || len(r.Warnings) != 1 {
		t.Fatalf("report %+v", r)
	}
}

func TestTrustedCheckpointMustVerify(t *testing.T) {
	lines := buildChain(t, 5, 10)
	e, err := ParseLine(bytes.TrimSuffix(lines[len(lines)-1], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	forged := *e.Checkpoint
	forged.Size++
	_, err = Verify(VerifyOptions{PublicKeys: []ed25519.PublicKey{testSigner(t).PublicKey()}, Trusted: &forged},
		Input{Name: "x", Reader: bytes.NewReader(join(lines))})
	if err == nil {
		t.Fatal("a forged trusted checkpoint was accepted")
	}
}
