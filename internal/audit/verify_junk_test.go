package audit

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// A line that cannot be read is reported once, as itself; the entries after it are judged
// against the last entry that could be read, so that a junk line put in between two entries
// does not make the next one "out of order", and a junk line in place of entries does not make
// them a gap.
func TestUnreadableLinesAreReportedOnce(t *testing.T) {
	base := buildChain(t, 30, 10) // checkpoints at seq 10, 21, 32; 33 lines
	junk := []byte("not an entry\n")
	type want struct {
		kind ProblemKind
		line int
		seq  int64 // -1: no seq
	}
	cases := []struct {
		name   string
		mutate func(l [][]byte) [][]byte
		want   []want
	}{
		{"a junk line put in", func(l [][]byte) [][]byte {
			return append(l[:6], append([][]byte{junk}, l[6:]...)...)
		}, []want{{ProblemMalformed, 7, -1}}},
		{"two junk lines put in", func(l [][]byte) [][]byte {
			return append(l[:6], append([][]byte{junk, junk}, l[6:]...)...)
		}, []want{{ProblemMalformed, 7, -1}, {ProblemMalformed, 8, -1}}},
		{"an entry turned into junk", func(l [][]byte) [][]byte { l[6] = junk; return l }, []want{{ProblemMalformed, 7, -1}}},
		{"two entries turned into junk", func(l [][]byte) [][]byte { l[6], l[7] = junk, junk; return l }, []want{{ProblemMalformed, 7, -1}, {ProblemMalformed, 8, -1}}},
		{"a junk line put in before a broken link", func(l [][]byte) [][]byte {
			l[5] = rehash(bytes.Replace(l[5], []byte("StepSucceeded"), []byte("StepSucceedes"), 1))
			return append(l[:6], append([][]byte{junk}, l[6:]...)...)
		}, []want{{ProblemMalformed, 7, -1}, {ProblemPrevMismatch, 8, 6}}},
		{"entries turned into junk and one more deleted", func(l [][]byte) [][]byte {
			l[6], l[7] = junk, junk
			return append(l[:8], l[9:]...)
		}, []want{{ProblemMalformed, 7, -1}, {ProblemMalformed, 8, -1}, {ProblemGap, 9, 9}}},
		{"the first entry turned into junk", func(l [][]byte) [][]byte { l[0] = junk; return l }, []want{{ProblemMalformed, 1, -1}}},
		{"a junk line before the first entry", func(l [][]byte) [][]byte { return append([][]byte{junk}, l...) }, []want{{ProblemMalformed, 1, -1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := verifyBytes(t, join(c.mutate(cloneLines(base))), VerifyOptions{})
			var got []want
			for _, p := range r.Problems {
				w := want{p.Kind, p.Line, -1}
				if p.Seq != nil {
					w.seq = int64(*p.Seq)
				}
				got = append(got, w)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("problems %v, want %v:\n%v", got, c.want, r.Problems)
			}
		})
	}
}

// Every problem reads "FILE:LINE seq N: KIND: MESSAGE"; a line whose seq cannot be read says
// "seq ?", so that a script splits every line the same way.
func TestProblemLineFormat(t *testing.T) {
	seven := uint64(7)
	for _, c := range []struct {
		p    Problem
		want string
	}{
		{Problem{Kind: ProblemGap, File: "a.jsonl", Line: 8, Seq: &seven, Message: "m"}, "a.jsonl:8 seq 7: gap: m"},
		{Problem{Kind: ProblemMalformed, File: "a.jsonl", Line: 3, Message: "m"}, "a.jsonl:3 seq ?: malformed: m"},
		{Problem{Kind: ProblemTornLine, File: "a.jsonl", Line: 9, Message: "m"}, "a.jsonl:9 seq ?: torn-line: m"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}

	// Every kind the verifier reports, on a damaged stream, has that shape.
	lines := buildChain(t, 30, 10)
	lastCP := mustCheckpoint(t, lines[len(lines)-1])
	damaged := cloneLines(lines[:20])
	damaged[3] = []byte("junk\n")
	damaged[5] = bytes.Replace(damaged[5], []byte("StepSucceeded"), []byte("StepSucceedes"), 1)
	damaged = append(damaged[:8], damaged[9:]...)
	damaged = append(damaged, []byte(`{"v":1,"seq":20,"pr`))
	r := verifyBytes(t, join(damaged), VerifyOptions{Trusted: lastCP})
	shape := regexp.MustCompile(`^audit\.jsonl:[1-9][0-9]* seq ([0-9]+|\?): [a-z-]+: .+`)
	kinds := map[ProblemKind]bool{}
	for _, p := range r.Problems {
		kinds[p.Kind] = true
		if !shape.MatchString(p.String()) {
			t.Errorf("%q does not read FILE:LINE seq N: KIND: MESSAGE", p)
		}
	}
	for _, k := range []ProblemKind{ProblemMalformed, ProblemHashMismatch, ProblemGap, ProblemTornLine, ProblemTruncated} {
		if !kinds[k] {
			t.Errorf("no %s among %v: the test does not test it", k, r.Problems)
		}
	}
}

// A trail cut short of the trusted checkpoint is reported where the missing entries belong:
// just after the last line of the last file, with the first missing seq.
func TestTruncatedIsPlacedAtTheEnd(t *testing.T) {
	lines := buildChain(t, 30, 10) // 33 lines, the trusted checkpoint is seq 32
	trusted := mustCheckpoint(t, lines[len(lines)-1])
	for _, c := range []struct {
		name     string
		stream   []byte
		line     int
		seq      uint64
		saysWhat string
	}{
		{"the end cut", join(lines[:30]), 31, 30, "the trail ends at seq 29"},
		{"the end cut inside a line", append(join(lines[:12]), lines[12][:40]...), 14, 12, "the trail ends at seq 11"},
		{"wiped", nil, 1, 0, "the trail is empty"},
	} {
		r := verifyBytes(t, c.stream, VerifyOptions{Trusted: trusted})
		p := r.Problems[len(r.Problems)-1]
		if r.OK || p.Kind != ProblemTruncated || p.File != "audit.jsonl" || p.Line != c.line || p.Seq == nil || *p.Seq != c.seq ||
			!strings.Contains(p.Message, c.saysWhat) || !strings.Contains(p.Message, "seq 0..31") {
			t.Errorf("%s: %v, want truncated at audit.jsonl:%d seq %d saying %q and the trusted checkpoint's seq 0..31", c.name, r.Problems, c.line, c.seq, c.saysWhat)
		}
	}
}

// An empty trail is a valid, empty chain (a new trail's first file is empty): it verifies, with
// a note that says only a trusted checkpoint tells it from a wiped one.
func TestEmptyTrail(t *testing.T) {
	r := verifyBytes(t, nil, VerifyOptions{})
	if !r.OK || r.Entries != 0 || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "no entries") ||
		!strings.Contains(r.Warnings[0], "trusted checkpoint") {
		t.Fatalf("an empty trail: %+v", r)
	}
}

func mustCheckpoint(t *testing.T, line []byte) *Checkpoint {
	t.Helper()
	e, err := ParseLine(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil || e.Checkpoint == nil {
		t.Fatalf("not a checkpoint line: %v", err)
	}
	return e.Checkpoint
}
