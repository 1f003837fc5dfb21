package audit

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// A long chain, mutated at random many times: every mutation must be detected. The newest
// checkpoint counts as published elsewhere (Trusted), which is what makes a cut at the very
// end detectable; see docs/audit.md on the unsigned window.
func TestRandomMutationsAreDetected(t *testing.T) {
	base := buildChain(t, 2000, 250)
	last, err := ParseLine(bytes.TrimSuffix(base[len(base)-1], []byte("\n")))
	if err != nil || last.Checkpoint == nil {
		t.Fatalf("the chain does not end with a checkpoint: %v", err)
	}
	opts := VerifyOptions{Trusted: last.Checkpoint}
	if r := verifyBytes(t, join(base), opts); !r.OK {
		t.Fatalf("the unmodified chain does not verify: %v", r.Problems)
	}
	iterations := 400
	if testing.Short() || raceEnabled {
		iterations = 60
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for it := range iterations {
		lines := cloneLines(base)
		var what string
		switch rng.IntN(6) {
		case 0: // one byte of one field changed to another printable byte
			i := rng.IntN(len(lines))
			line := lines[i]
			j := rng.IntN(len(line) - 1)
			old := line[j]
			for line[j] == old {
				line[j] = byte(0x20 + rng.IntN(0x5f))
			}
			what = "edit a byte"
		case 1:
			i := rng.IntN(len(lines))
			lines = append(lines[:i], lines[i+1:]...)
			what = "delete a line"
		case 2:
			i := rng.IntN(len(lines))
			lines = append(lines[:i+1], append([][]byte{lines[i]}, lines[i+1:]...)...)
			what = "duplicate a line"
		case 3:
			i, j := rng.IntN(len(lines)), rng.IntN(len(lines))
			for j == i {
				j = rng.IntN(len(lines))
			}
			lines[i], lines[j] = lines[j], lines[i]
			what = "swap two lines"
		case 4:
			lines = lines[:rng.IntN(len(lines))]
			what = "truncate at a line"
		case 5:
			data := join(lines)
			lines = [][]byte{data[:rng.IntN(len(data))]}
			what = "truncate at a byte"
		}
		if r := verifyBytes(t, join(lines), opts); r.OK {
			t.Fatalf("iteration %d: %s went undetected", it, what)
		}
	}
}
