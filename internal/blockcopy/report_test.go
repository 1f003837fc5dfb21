package blockcopy

import (
	"strings"
	"testing"
)

func TestLatestProgress(t *testing.T) {
	cases := []struct {
		name string
		log  string
		want *ProgressReport
	}{
		{"no log", "", nil},
		{"the last progress line", `{"phase":"copy","bytesDone":1,"bytesTotal":8}` + "\n" + `{"phase":"copy","bytesDone":4,"bytesTotal":8}` + "\n",
			&ProgressReport{Phase: PhaseCopy, BytesDone: 4, BytesTotal: 8}},
		{"the result after it is no progress", `{"phase":"verify","bytesDone":8,"bytesTotal":8}` + "\n" + `{"status":"ok","bytesTotal":8}`,
			&ProgressReport{Phase: PhaseVerify, BytesDone: 8, BytesTotal: 8}},
		{"a cut first line and junk", `ytesDone":3,"bytesTotal":8}` + "\nnot json\n" + `{"phase":"copy","bytesDone":5,"bytesTotal":8}`,
			&ProgressReport{Phase: PhaseCopy, BytesDone: 5, BytesTotal: 8}},
		{"no total", `{"phase":"copy","bytesDone":5,"bytesTotal":0}`, nil},
	}
	for _, c := range cases {
		got := LatestProgress([]byte(c.log))
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// FuzzLatestProgress: a pod's log is anyone's text; reading it never panics, and what it
// returns is a progress line with a phase and a total.
func FuzzLatestProgress(f *testing.F) {
	f.Add([]byte(`{"phase":"copy","bytesDone":4,"bytesTotal":8}` + "\n"))
	f.Add([]byte(`{"status":"ok","bytesTotal":8}`))
	f.Add([]byte(strings.Repeat("{", 100)))
	f.Fuzz(func(t *testing.T, log []byte) {
		if p := LatestProgress(log); p != nil && (p.Phase == "" || p.BytesTotal <= 0) {
			t.Fatalf("%q read as %+v", log, p)
		}
	})
}
