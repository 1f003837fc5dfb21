package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"time"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// scriptedRecord is one line of append's input: the members of a record as the trail holds
// them (docs/audit.md), id and time optional.
type scriptedRecord struct {
	ID      string         `json:"id"`
	Time    *string        `json:"time"`
	Actor   string         `json:"actor"`
	Subject audit.Subject  `json:"subject"`
	Action  string         `json:"action"`
	From    string         `json:"from"`
	To      string         `json:"to"`
	Reason  string         `json:"reason"`
	Message string         `json:"message"`
	Details []audit.Detail `json:"details"`
}

// sourced is a record and where in the input it came from, for the errors.
type sourced struct {
	record audit.Record
	where  string
}

// appendRecords appends scripted records to a trail folder with the log, the FileSink and the
// key handling the operator uses, so that verify accepts the result. Every input is read and
// checked before the trail is opened, and the records go in one Append, which takes them all
// or none.
func appendRecords(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nodewright-audit append", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the trail's folder, created if missing; never one a running operator writes (required)")
	keyFile := fs.String("private-key", "", "the checkpoint signing key, PKCS #8 PEM as keygen writes it (required)")
	maxFileBytes := fs.Int64("max-file-bytes", audit.DefaultMaxFileBytes, "size at which the trail starts a new file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *keyFile == "" {
		return errors.New("append: --dir DIR and --private-key FILE are required")
	}
	now := time.Now()
	var records []sourced
	inputs := fs.Args()
	if len(inputs) == 0 {
		inputs = []string{"-"}
	}
	for _, name := range inputs {
		read, err := readInput(name, stdin, now)
		if err != nil {
			return fmt.Errorf("append: %w", err)
		}
		records = append(records, read...)
	}
	if len(records) == 0 {
		return errors.New("append: no records in the input")
	}
	if err := oneRecordPerID(records); err != nil {
		return fmt.Errorf("append: %w; nothing was appended", err)
	}
	pem, err := os.ReadFile(*keyFile)
	if err != nil {
		return fmt.Errorf("append: --private-key: %w", err)
	}
	signer, err := audit.LoadSigner(pem)
	if err != nil {
		return fmt.Errorf("append: --private-key %s: %w", *keyFile, err)
	}
	sink, err := audit.OpenFileSink(*dir, audit.FileSinkOptions{MaxFileBytes: *maxFileBytes})
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	log := audit.NewLog(sink, signer, sink.State(), audit.LogOptions{})
	plain := make([]audit.Record, len(records))
	for i, r := range records {
		plain[i] = r.record
	}
	results, appendErr := log.Append(ctx, plain...)
	if err := log.Close(); err != nil && appendErr == nil {
		return fmt.Errorf("append: closing the trail: %w", err)
	}
	if appendErr != nil {
		if re := (*audit.RecordError)(nil); errors.As(appendErr, &re) {
			return fmt.Errorf("append: %s: %w; nothing was appended", records[re.Index].where, re.Err)
		}
		return fmt.Errorf("append: %w", appendErr)
	}
	for i, res := range results {
		what := "appended"
		if res.Duplicate {
			what = "already in the trail"
		}
		fmt.Fprintf(stdout, "seq %d: %s: record %s (%s)\n", res.Seq, what, plain[i].ID, records[i].where)
	}
	return nil
}

// readInput reads one input's records, JSON Lines ("-" is standard input); blank lines are
// skipped.
func readInput(name string, stdin io.Reader, now time.Time) ([]sourced, error) {
	in := stdin
	label := "standard input"
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }()
		in, label = f, name
	}
	var out []sourced
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), audit.MaxLineBytes+1)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", label, n)
		r, err := parseScriptedRecord(line, now)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, sourced{record: r, where: where})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: a line over %d bytes cannot hold a record the trail can keep", label, audit.MaxLineBytes)
		}
		return nil, fmt.Errorf("reading %s: %w", label, err)
	}
	return out, nil
}

// parseScriptedRecord reads one record. Without an id, it gets audit.ContentID: a digest of
// everything it says, its time included, so that the same input appended again (with its
// times) is recognised and not appended twice, while two records that differ in anything are
// two records.
func parseScriptedRecord(line []byte, now time.Time) (audit.Record, error) {
	var in scriptedRecord
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		if ute := (*json.UnmarshalTypeError)(nil); errors.As(err, &ute) {
			field := "the line"
			if ute.Field != "" {
				field = strconv.Quote(ute.Field)
			}
			return audit.Record{}, fmt.Errorf("%s: a JSON %s, where %s is wanted", field, ute.Value, jsonKind(ute.Type))
		}
		return audit.Record{}, fmt.Errorf("not a record: %w", err)
	}
	if dec.More() {
		return audit.Record{}, errors.New("not a record: more than one JSON value on the line")
	}
	for _, required := range []struct{ name, value string }{
		{"actor", in.Actor}, {"action", in.Action}, {"subject.kind", in.Subject.Kind}, {"subject.name", in.Subject.Name},
	} {
		if required.value == "" {
			return audit.Record{}, fmt.Errorf("%q is required", required.name)
		}
	}
	at := now
	if in.Time != nil {
		t, err := time.Parse(time.RFC3339Nano, *in.Time)
		if err != nil {
			return audit.Record{}, fmt.Errorf(`"time": %q is not an RFC 3339 time with a four-digit year`, *in.Time)
		}
		at = t
	}
	r := audit.Record{ID: in.ID, Time: at.UTC(), Actor: in.Actor, Subject: in.Subject, Action: in.Action,
		From: in.From, To: in.To, Reason: in.Reason, Message: in.Message, Details: in.Details}
	if r.ID == "" {
		r.ID = audit.ContentID(r)
	}
	return r, nil
}

// oneRecordPerID refuses two lines that the trail would keep as one record, since they have
// one ID, while they say different things: the log would keep the first and report the second
// as already there. The same record twice is one record, and fine.
func oneRecordPerID(records []sourced) error {
	first := make(map[string]int, len(records))
	for i, r := range records {
		j, seen := first[r.record.ID]
		if !seen {
			first[r.record.ID] = i
			continue
		}
		if audit.ContentID(records[j].record) != audit.ContentID(r.record) {
			return fmt.Errorf("%s and %s are two different records with one ID, %q: the trail keeps one record per ID", records[j].where, r.where, r.record.ID)
		}
	}
	return nil
}

// jsonKind names what a Go type is in JSON, for an error about the input.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "a " + t.Kind().String()
	}
}
