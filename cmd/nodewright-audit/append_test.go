package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// keys makes a key pair with keygen.
func keys(t *testing.T) (privFile, pubFile string) {
	t.Helper()
	dir := t.TempDir()
	privFile, pubFile = filepath.Join(dir, "key.pem"), filepath.Join(dir, "key.pub")
	var out, errOut bytes.Buffer
	if code := run([]string{"keygen", "--private-key", privFile, "--public-key", pubFile}, &out, &errOut); code != exitOK {
		t.Fatalf("keygen: %d %s", code, errOut.String())
	}
	return privFile, pubFile
}

func scripted(i int) string {
	return fmt.Sprintf(`{"time":"2026-11-21T10:00:%02dZ","actor":"alice","subject":{"kind":"Node","name":"edge-%d"},"action":"Reboot",`+
		`"from":"Ready","to":"Rebooting","reason":"Maintenance","message":"kernel update\nstep %d","details":[{"name":"ticket","value":"OPS-%d"}]}`, i, i, i, i)
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withStdin runs f with append's standard input reading text.
func withStdin(text string, f func()) {
	defer func(saved io.Reader) { stdin = saved }(stdin)
	stdin = strings.NewReader(text)
	f()
}

// Records appended from files and standard input make a trail that verify accepts, as the
// operator's would; appended again, they are recognised and nothing is written.
func TestAppendMakesATrailVerifyAccepts(t *testing.T) {
	priv, pub := keys(t)
	tmp := t.TempDir()
	trail := filepath.Join(tmp, "trail")
	first := writeFile(t, filepath.Join(tmp, "first.jsonl"), scripted(0)+"\n\n"+scripted(1)+"\n")
	second := writeFile(t, filepath.Join(tmp, "second.jsonl"), scripted(2)) // no newline at the end
	var out, errOut bytes.Buffer
	withStdin(scripted(3)+"\n", func() {
		if code := run([]string{"append", "--dir", trail, "--private-key", priv, first, second, "-"}, &out, &errOut); code != exitOK {
			t.Fatalf("append: exit %d\n%s%s", code, out.String(), errOut.String())
		}
	})
	line := regexp.MustCompile(`^seq (\d+): appended: record [0-9a-f]{32} \((.+)\)$`)
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{first + ":1", first + ":3", second + ":1", "standard input:1"}
	if len(got) != len(want) {
		t.Fatalf("append printed\n%s\nwant one line for each of %v", out.String(), want)
	}
	for i, l := range got {
		if m := line.FindStringSubmatch(l); m == nil || m[1] != strconv.Itoa(i) || m[2] != want[i] {
			t.Errorf("line %d: %q, want seq %d appended from %s", i+1, l, i, want[i])
		}
	}

	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, trail}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "OK: 5 entries (4 records, 1 checkpoints), seq 0..4, 1 files") {
		t.Fatalf("verify: exit %d\n%s", code, out.String())
	}
	files, _ := audit.ChainFiles(trail)
	before, _ := os.ReadFile(files[0])
	// What the trail holds is what was given.
	lines := bytes.Split(bytes.TrimSuffix(before, []byte("\n")), []byte("\n"))
	e, err := audit.ParseLine(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	if r := e.Record; r.Actor != "alice" || r.Subject.Name != "edge-0" || r.Message != "kernel update\nstep 0" || len(r.Details) != 1 ||
		r.Details[0] != (audit.Detail{Name: "ticket", Value: "OPS-0"}) || !r.Time.Equal(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("the first record is %+v", r)
	}

	out.Reset()
	if code := run([]string{"append", "--dir", trail, "--private-key", priv, second, first}, &out, &errOut); code != exitOK ||
		!strings.HasPrefix(out.String(), "seq 2: already in the trail: record ") || strings.Contains(out.String(), "appended") {
		t.Fatalf("appending again: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if after, _ := os.ReadFile(files[0]); !bytes.Equal(after, before) {
		t.Fatalf("appending the same records again changed the trail")
	}
}

// Bad input is refused with where it is and what is wrong, and nothing is written: not even a
// record of the same input that was good.
func TestAppendRefusesBadInput(t *testing.T) {
	priv, pub := keys(t)
	tmp := t.TempDir()
	trail := filepath.Join(tmp, "trail")
	var out, errOut bytes.Buffer
	good := writeFile(t, filepath.Join(tmp, "good.jsonl"), scripted(0)+"\n")
	if code := run([]string{"append", "--dir", trail, "--private-key", priv, good}, &out, &errOut); code != exitOK {
		t.Fatalf("append: exit %d\n%s", code, errOut.String())
	}
	files, _ := audit.ChainFiles(trail)
	before, _ := os.ReadFile(files[0])

	// A line of the input within the limit, but not once the trail's members are added.
	huge := strings.Replace(scripted(5), "kernel update", strings.Repeat("x", audit.MaxLineBytes-50-len(scripted(5))+len("kernel update")), 1)
	for _, c := range []struct {
		name  string
		input string
		says  string
	}{
		{"not JSON", "reboot edge-1", "input.jsonl:2: not a record: "},
		{"an unknown member", `{"actor":"a","action":"x","subject":{"kind":"K","name":"n"},"colour":"red"}`, `input.jsonl:2: not a record: json: unknown field "colour"`},
		{"no actor", `{"action":"x","subject":{"kind":"K","name":"n"}}`, `input.jsonl:2: "actor" is required`},
		{"no subject name", `{"actor":"a","action":"x","subject":{"kind":"K"}}`, `input.jsonl:2: "subject.name" is required`},
		{"a number for a string", `{"actor":"a","action":"x","subject":{"kind":"K","name":"n","generation":"7"}}`, `input.jsonl:2: "subject.generation": a JSON string, where an integer is wanted`},
		{"a time that is not RFC 3339", `{"actor":"a","action":"x","subject":{"kind":"K","name":"n"},"time":"2026-11-21"}`, `input.jsonl:2: "time": "2026-11-21" is not an RFC 3339 time`},
		{"a year the trail cannot hold", `{"actor":"a","action":"x","subject":{"kind":"K","name":"n"},"time":"10000-01-01T00:00:00Z"}`, `input.jsonl:2: "time": "10000-01-01T00:00:00Z"`},
		{"two values on a line", `{"actor":"a","action":"x","subject":{"kind":"K","name":"n"}} {}`, "input.jsonl:2: not a record: more than one JSON value"},
		{"a record too long for a line", huge, "input.jsonl:2: audit record too long for one line of the trail: record "},
		{"a line too long to be a record", strings.Repeat(" ", audit.MaxLineBytes+1) + "{}", "input.jsonl: a line over 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			input := writeFile(t, filepath.Join(t.TempDir(), "input.jsonl"), scripted(1)+"\n"+c.input+"\n")
			errOut.Reset()
			if code := run([]string{"append", "--dir", trail, "--private-key", priv, input}, &out, &errOut); code != exitBadInput || !strings.Contains(errOut.String(), c.says) {
				t.Errorf("exit %d, stderr %q, want %d and %q", code, errOut.String(), exitBadInput, c.says)
			}
			if after, _ := os.ReadFile(files[0]); !bytes.Equal(after, before) {
				t.Errorf("the trail changed")
			}
		})
	}
	if files2, _ := audit.ChainFiles(trail); len(files2) != 1 {
		t.Errorf("files %v", files2)
	}
	for _, bad := range [][]string{
		{"append", "--private-key", priv, good},
		{"append", "--dir", trail, good},
		{"append", "--dir", trail, "--private-key", pub, good},                           // a public key
		{"append", "--dir", trail, "--private-key", filepath.Join(tmp, "missing"), good}, // no key
		{"append", "--dir", trail, "--private-key", priv, filepath.Join(tmp, "missing")},
		{"append", "--dir", trail, "--private-key", priv, writeFile(t, filepath.Join(tmp, "empty.jsonl"), "\n")},
		{"append", "--dir", good, "--private-key", priv, good}, // a file, not a folder
	} {
		if code := run(bad, &out, &errOut); code != exitBadInput {
			t.Errorf("%q: exit %d, want %d", bad, code, exitBadInput)
		}
	}
	if after, _ := os.ReadFile(files[0]); !bytes.Equal(after, before) {
		t.Errorf("the trail changed")
	}
}

// Trying it out without a cluster, as docs/audit.md shows: append a trail, serve a receiver on
// a loopback port it picks (--listen 127.0.0.1:0) and read the port from its output, ship the
// trail to it, and verify the copy.
func TestAppendServeShipVerify(t *testing.T) {
	priv, pub := keys(t)
	tmp := t.TempDir()
	trail, remote := filepath.Join(tmp, "trail"), filepath.Join(tmp, "copy")
	var records strings.Builder
	for i := range 30 {
		records.WriteString(scripted(i) + "\n")
	}
	var out, errOut bytes.Buffer
	withStdin(records.String(), func() {
		if code := run([]string{"append", "--dir", trail, "--private-key", priv}, &out, &errOut); code != exitOK {
			t.Fatalf("append: exit %d\n%s", code, errOut.String())
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	var serveOut, serveErr testenv.SyncBuffer
	served := make(chan struct{})
	serveCode := -1
	go func() {
		defer close(served)
		serveCode = runContext(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--dir", remote, "--public-key", pub}, &serveOut, &serveErr)
	}()
	// Registered after TempDir, so it runs first: serve has stopped writing into the folder
	// before it is removed, whatever failed.
	t.Cleanup(func() { cancel(); <-served })
	listening := regexp.MustCompile(`^receiving into ` + regexp.QuoteMeta(remote) + ` on http://127\.0\.0\.1:(\d+)/ \(the copy holds 0 entries\)\n$`)
	var port string
	for deadline := time.Now().Add(2 * time.Minute); port == ""; {
		if m := listening.FindStringSubmatch(serveOut.String()); m != nil {
			port = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not say where it listens: %q %q", serveOut.String(), serveErr.String())
		}
		select {
		case <-served:
			t.Fatalf("serve stopped: exit %d\n%s%s", serveCode, serveOut.String(), serveErr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	out.Reset()
	shipCtx, stopShip := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stopShip()
	if code := runContext(shipCtx, []string{"ship", "--dir", trail, "--url", "http://127.0.0.1:" + port + "/", "--until-delivered"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "the receiver holds 31 entries") {
		t.Fatalf("ship: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	cancel()
	<-served
	if serveCode != exitOK {
		t.Fatalf("serve: exit %d\n%s", serveCode, serveErr.String())
	}
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, remote}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "OK: 31 entries (30 records, 1 checkpoints)") {
		t.Fatalf("verify the copy: exit %d\n%s", code, out.String())
	}
}

// The usage states the line limit from the constant the code uses.
func TestUsageStatesTheLineLimit(t *testing.T) {
	var out, errOut bytes.Buffer
	run([]string{"help"}, &out, &errOut)
	if !strings.Contains(out.String(), "at most "+strconv.Itoa(audit.MaxLineBytes)+" bytes") {
		t.Errorf("the usage does not give the line limit, %d bytes:\n%s", audit.MaxLineBytes, out.String())
	}
}

// FuzzParseScriptedRecord: whatever a line holds, append either refuses it with an error, or
// makes a record that the log writes and the verifier reads back, or the log refuses.
func FuzzParseScriptedRecord(f *testing.F) {
	f.Add([]byte(scripted(1)))
	f.Add([]byte(`{"actor":"a","action":"x","subject":{"kind":"K","name":"n","generation":-3},"id":"mine","time":"0001-01-01T00:00:00.5+01:00"}`))
	f.Add([]byte(`{"actor":"\u0000","action":"\ud800","subject":{"kind":"K","name":"n"},"details":[{}]}`))
	signer, err := audit.LoadSigner(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := parseScriptedRecord(line, now)
		if err != nil {
			return
		}
		if r.ID == "" || r.Actor == "" || r.Action == "" || r.Subject.Kind == "" || r.Subject.Name == "" {
			t.Fatalf("accepted a record without a required member: %+v", r)
		}
		var buf bytes.Buffer
		l := audit.NewLog(audit.NewWriterSink(&buf), signer, audit.ChainState{}, audit.LogOptions{})
		_, appendErr := l.Append(context.Background(), r)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		report, err := audit.Verify(audit.VerifyOptions{PublicKeys: []ed25519.PublicKey{signer.PublicKey()}}, audit.Input{Name: "fuzz", Reader: &buf})
		if err != nil {
			t.Fatal(err)
		}
		if appendErr == nil && (!report.OK || report.Records != 1) {
			t.Fatalf("%q: appended, and the verifier says %v", line, report.Problems)
		}
	})
}

// Records without an id that differ in anything (here the actor, the reason, the message, the
// details, with no time given, so both happen "now") are two records, never one dropped as
// "already in the trail"; appending the same input again, with its times, writes nothing.
func TestAppendKeepsDistinctRecordsWithoutAnID(t *testing.T) {
	priv, pub := keys(t)
	trail := filepath.Join(t.TempDir(), "trail")
	note := func(actor, extra string) string {
		return `{"actor":"` + actor + `","action":"Note","subject":{"kind":"Node","name":"edge-1"}` + extra + `}`
	}
	distinct := []string{
		note("alice", `,"message":"first"`),
		note("bob", `,"message":"second"`),
		note("alice", `,"message":"first","reason":"Maintenance"`),
		note("alice", `,"message":"first","details":[{"name":"ticket","value":"OPS-1"}]`),
		note("alice", `,"message":"first","details":[{"name":"ticket","value":"OPS-2"}]`),
	}
	var out, errOut bytes.Buffer
	withStdin(strings.Join(distinct, "\n")+"\n", func() {
		if code := run([]string{"append", "--dir", trail, "--private-key", priv}, &out, &errOut); code != exitOK {
			t.Fatalf("append: exit %d\n%s%s", code, out.String(), errOut.String())
		}
	})
	if n := strings.Count(out.String(), ": appended: "); n != len(distinct) || strings.Contains(out.String(), "already") {
		t.Fatalf("%d distinct records, and append printed\n%s", len(distinct), out.String())
	}
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, trail}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "(5 records, 1 checkpoints)") {
		t.Fatalf("verify: exit %d\n%s", code, out.String())
	}

	// With their times, as a script that saves its input would send them again.
	timed := filepath.Join(t.TempDir(), "timed.jsonl")
	var lines []string
	for i, l := range distinct {
		lines = append(lines, strings.Replace(l, `{`, fmt.Sprintf(`{"time":"2026-11-21T10:00:0%dZ",`, i%2), 1))
	}
	writeFile(t, timed, strings.Join(lines, "\n")+"\n")
	out.Reset()
	if code := run([]string{"append", "--dir", trail, "--private-key", priv, timed}, &out, &errOut); code != exitOK {
		t.Fatalf("append with times: exit %d\n%s", code, errOut.String())
	}
	files, _ := audit.ChainFiles(trail)
	before, _ := os.ReadFile(files[len(files)-1])
	out.Reset()
	if code := run([]string{"append", "--dir", trail, "--private-key", priv, timed}, &out, &errOut); code != exitOK ||
		strings.Count(out.String(), ": already in the trail: ") != len(distinct) || strings.Contains(out.String(), "appended") {
		t.Fatalf("appending the same input again: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if after, _ := os.ReadFile(files[len(files)-1]); !bytes.Equal(after, before) {
		t.Fatalf("appending the same input again changed the trail")
	}
}

// Two lines of one call with one ID are refused, naming both lines, unless they are the same
// record; the same record twice is one record.
func TestAppendRefusesTwoRecordsWithOneID(t *testing.T) {
	priv, pub := keys(t)
	tmp := t.TempDir()
	trail := filepath.Join(tmp, "trail")
	var out, errOut bytes.Buffer
	for _, c := range []struct {
		name, first, second string
	}{
		{"the same explicit id", `{"id":"op-1","actor":"alice","action":"Note","subject":{"kind":"Node","name":"edge-1"},"message":"first"}`,
			`{"id":"op-1","actor":"bob","action":"Note","subject":{"kind":"Node","name":"edge-1"},"message":"second"}`},
		{"an explicit id that is another line's", scripted(1),
			`{"id":"` + contentID(t, scripted(1)) + `","actor":"bob","action":"Note","subject":{"kind":"Node","name":"edge-1"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			input := writeFile(t, filepath.Join(t.TempDir(), "input.jsonl"), scripted(0)+"\n"+c.first+"\n"+c.second+"\n")
			errOut.Reset()
			code := run([]string{"append", "--dir", trail, "--private-key", priv, input}, &out, &errOut)
			if code != exitBadInput || !strings.Contains(errOut.String(), input+":2") || !strings.Contains(errOut.String(), input+":3") {
				t.Errorf("exit %d, stderr %q, want %d naming %s:2 and %s:3", code, errOut.String(), exitBadInput, input, input)
			}
			if files, _ := audit.ChainFiles(trail); len(files) > 0 {
				t.Errorf("the trail was written: %v", files)
			}
		})
	}

	input := writeFile(t, filepath.Join(tmp, "twice.jsonl"), scripted(0)+"\n"+scripted(0)+"\n")
	out.Reset()
	if code := run([]string{"append", "--dir", trail, "--private-key", priv, input}, &out, &errOut); code != exitOK ||
		!strings.HasPrefix(out.String(), "seq 0: appended: ") || !strings.Contains(out.String(), "seq 0: already in the trail: ") {
		t.Fatalf("the same record twice: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run([]string{"verify", "--public-key", pub, trail}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "(1 records, 1 checkpoints)") {
		t.Fatalf("verify: exit %d\n%s", code, out.String())
	}
}

// contentID is the ID append gives a line without one.
func contentID(t *testing.T, line string) string {
	t.Helper()
	r, err := parseScriptedRecord([]byte(line), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}
