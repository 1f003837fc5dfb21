package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// FormatVersion is the version of the canonical encoding every line carries as "v". A reader
// that meets another version says so instead of guessing, so a future format can be introduced
// without old verifiers silently misreading it. docs/audit.md specifies version 1 byte by byte.
const FormatVersion = 1

// Hash is the SHA-256 of an entry's canonical encoding.
type Hash [sha256.Size]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Entry is one line of the audit stream: either a record or a signed checkpoint, chained to the
// entry before it.
type Entry struct {
	Seq        uint64
	Prev       Hash
	Record     *Record     // set on a record entry
	Checkpoint *Checkpoint // set on a checkpoint entry
	Hash       Hash
	line       []byte // the canonical line, without the newline
}

// Line is the entry's canonical encoding, as written to a sink (without the newline).
func (e Entry) Line() []byte { return e.line }

// newEntry encodes and hashes an entry; exactly one of r and c is set.
func newEntry(seq uint64, prev Hash, r *Record, c *Checkpoint) Entry {
	e := Entry{Seq: seq, Prev: prev, Record: r, Checkpoint: c}
	body := appendBody(make([]byte, 0, 512), &e)
	e.Hash = sha256.Sum256(body)
	e.line = appendHash(body[:len(body)-1], e.Hash)
	return e
}

// appendBody appends the canonical encoding of e without its hash:
// {"v":1,"seq":N,"prev":"hex","record":{...}} or the same with "checkpoint".
func appendBody(dst []byte, e *Entry) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, FormatVersion, 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, e.Seq, 10)
	dst = append(dst, `,"prev":"`...)
	dst = hex.AppendEncode(dst, e.Prev[:])
	if e.Record != nil {
		dst = append(dst, `","record":`...)
		dst = appendRecord(dst, e.Record)
	} else {
		dst = append(dst, `","checkpoint":`...)
		dst = appendCheckpoint(dst, e.Checkpoint, true)
	}
	return append(dst, '}')
}

// appendHash closes a body whose final '}' was cut off with its hash: ,"hash":"hex"}.
func appendHash(dst []byte, h Hash) []byte {
	dst = append(dst, `,"hash":"`...)
	dst = hex.AppendEncode(dst, h[:])
	return append(dst, `"}`...)
}

// appendRecord writes every field, empty or not, in a fixed order, so that one record has one
// encoding.
func appendRecord(dst []byte, r *Record) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, r.ID)
	dst = append(dst, `,"time":`...)
	dst = appendTime(dst, r.Time)
	dst = append(dst, `,"actor":`...)
	dst = appendString(dst, r.Actor)
	dst = append(dst, `,"subject":{"apiVersion":`...)
	dst = appendString(dst, r.Subject.APIVersion)
	dst = append(dst, `,"kind":`...)
	dst = appendString(dst, r.Subject.Kind)
	dst = append(dst, `,"namespace":`...)
	dst = appendString(dst, r.Subject.Namespace)
	dst = append(dst, `,"name":`...)
	dst = appendString(dst, r.Subject.Name)
	dst = append(dst, `,"uid":`...)
	dst = appendString(dst, string(r.Subject.UID))
	dst = append(dst, `,"generation":`...)
	dst = strconv.AppendInt(dst, r.Subject.Generation, 10)
	dst = append(dst, `},"action":`...)
	dst = appendString(dst, r.Action)
	dst = append(dst, `,"from":`...)
	dst = appendString(dst, r.From)
	dst = append(dst, `,"to":`...)
	dst = appendString(dst, r.To)
	dst = append(dst, `,"reason":`...)
	dst = appendString(dst, r.Reason)
	dst = append(dst, `,"message":`...)
	dst = appendString(dst, r.Message)
	dst = append(dst, `,"details":[`...)
	for i, d := range r.Details {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = appendString(dst, d.Name)
		dst = append(dst, `,"value":`...)
		dst = appendString(dst, d.Value)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// appendCheckpoint writes {"size":N,"head":"hex","time":T,"keyId":S} and, in the stream,
// the signature as "sig". Without it, prefixed by "v", it is what the key signs.
func appendCheckpoint(dst []byte, c *Checkpoint, withSig bool) []byte {
	dst = append(dst, `{"size":`...)
	dst = strconv.AppendUint(dst, c.Size, 10)
	dst = append(dst, `,"head":"`...)
	dst = hex.AppendEncode(dst, c.Head[:])
	dst = append(dst, `","time":`...)
	dst = appendTime(dst, c.Time)
	dst = append(dst, `,"keyId":`...)
	dst = appendString(dst, c.KeyID)
	if withSig {
		dst = append(dst, `,"sig":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, c.Signature)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

// appendTime writes the instant in UTC, RFC 3339 with as many fractional digits as needed and
// no more, so that the same instant always has the same text whatever zone it was taken in.
func appendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.UTC().AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

// appendString writes s as a JSON string the way RFC 8785 (JCS) does: only '"', '\\' and the
// control characters are escaped, the five with a short form by it, the others as \u00xx;
// everything else is literal UTF-8. Invalid UTF-8 becomes U+FFFD, so the output is always
// valid UTF-8.
func appendString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, `\b`...)
		case '\f':
			dst = append(dst, `\f`...)
		case '\n':
			dst = append(dst, `\n`...)
		case '\r':
			dst = append(dst, `\r`...)
		case '\t':
			dst = append(dst, `\t`...)
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// LineErrorKind says why a line is not a valid entry.
type LineErrorKind string

const (
	LineMalformed      LineErrorKind = "malformed"       // not a JSON object of the entry's shape
	LineUnknownVersion LineErrorKind = "unknown-version" // a format version this reader does not know
	LineHashMismatch   LineErrorKind = "hash-mismatch"   // the content does not hash to the stored hash
	LineNonCanonical   LineErrorKind = "non-canonical"   // valid, but not the one canonical encoding
)

// LineError is why a line failed to parse. Seq is set (HasSeq) when the line was readable
// enough to tell which entry it claims to be.
type LineError struct {
	Kind   LineErrorKind
	Seq    uint64
	HasSeq bool
	Detail string
}

func (e *LineError) Error() string {
	if e.HasSeq {
		return fmt.Sprintf("%s at seq %d: %s", e.Kind, e.Seq, e.Detail)
	}
	return fmt.Sprintf("%s: %s", e.Kind, e.Detail)
}

// wireEntry is the decoding shape of a line; encoding never goes through it.
type wireEntry struct {
	V          *int            `json:"v"`
	Seq        *uint64         `json:"seq"`
	Prev       string          `json:"prev"`
	Record     *Record         `json:"record"`
	Checkpoint *wireCheckpoint `json:"checkpoint"`
	Hash       string          `json:"hash"`
}

type wireCheckpoint struct {
	Size  uint64    `json:"size"`
	Head  string    `json:"head"`
	Time  time.Time `json:"time"`
	KeyID string    `json:"keyId"`
	Sig   string    `json:"sig"`
}

// hashSuffixLen is the length of `,"hash":"<64 hex>"}` that ends every line.
const hashSuffixLen = len(`,"hash":"`) + 2*sha256.Size + len(`"}`)

// ParseLine reads one line (without its newline) and checks it on its own: version, hash and
// canonical form. Whether it fits the chain is the verifier's business. Errors are *LineError;
// with LineHashMismatch and LineNonCanonical the entry as read is returned too.
func ParseLine(line []byte) (Entry, error) {
	return parseLine(bytes.Clone(line), new(Record))
}

// parseLine is ParseLine on a line the caller will not change again: the entry's strings and
// line may be views of it.
// A record entry is read into *into.
func parseLine(line []byte, into *Record) (Entry, error) {
	if e, ok := parseCanonical(line, into); ok {
		var stack [1024]byte // room for a typical line, so hashing allocates nothing
		body := append(append(stack[:0], line[:len(line)-hashSuffixLen]...), '}')
		if sum := sha256.Sum256(body); sum != e.Hash {
			return e, &LineError{Kind: LineHashMismatch, Seq: e.Seq, HasSeq: true, Detail: fmt.Sprintf("content hashes to %s, the line says %s", Hash(sum), e.Hash)}
		}
		e.line = line
		return e, nil
	}
	return parseSlow(line)
}

// parseSlow reads any line with encoding/json, to say precisely what is wrong with it.
func parseSlow(line []byte) (Entry, error) {
	var w wireEntry
	if err := json.Unmarshal(line, &w); err != nil {
		var version struct {
			V *int `json:"v"`
		}
		// A line of another version may have any shape; say it is a version problem if its "v"
		// can be read at all.
		if json.Unmarshal(line, &version) == nil && version.V != nil && *version.V != FormatVersion {
			return Entry{}, &LineError{Kind: LineUnknownVersion, Detail: fmt.Sprintf("format version %d, this reader knows %d", *version.V, FormatVersion)}
		}
		return Entry{}, &LineError{Kind: LineMalformed, Detail: err.Error()}
	}
	if w.V == nil {
		return Entry{}, &LineError{Kind: LineMalformed, Detail: `no format version "v"`}
	}
	if *w.V != FormatVersion {
		return Entry{}, &LineError{Kind: LineUnknownVersion, Detail: fmt.Sprintf("format version %d, this reader knows %d", *w.V, FormatVersion)}
	}
	if w.Seq == nil {
		return Entry{}, &LineError{Kind: LineMalformed, Detail: `no sequence number "seq"`}
	}
	e := Entry{Seq: *w.Seq, Record: w.Record}
	fail := func(kind LineErrorKind, format string, args ...any) (Entry, error) {
		return Entry{}, &LineError{Kind: kind, Seq: e.Seq, HasSeq: true, Detail: fmt.Sprintf(format, args...)}
	}
	if (w.Record == nil) == (w.Checkpoint == nil) {
		return fail(LineMalformed, `an entry has exactly one of "record" and "checkpoint"`)
	}
	if err := decodeHash(w.Prev, &e.Prev); err != nil {
		return fail(LineMalformed, "prev: %v", err)
	}
	if err := decodeHash(w.Hash, &e.Hash); err != nil {
		return fail(LineMalformed, "hash: %v", err)
	}
	if w.Checkpoint != nil {
		c := &Checkpoint{Size: w.Checkpoint.Size, Time: w.Checkpoint.Time, KeyID: w.Checkpoint.KeyID}
		if err := decodeHash(w.Checkpoint.Head, &c.Head); err != nil {
			return fail(LineMalformed, "checkpoint head: %v", err)
		}
		sig, err := base64.StdEncoding.DecodeString(w.Checkpoint.Sig)
		if err != nil {
			return fail(LineMalformed, "checkpoint signature: %v", err)
		}
		c.Signature = sig
		e.Checkpoint = c
	}
	// The hash covers the line up to its "hash" member, closed: the stored bytes themselves,
	// so that the check does not depend on this reader's decoding.
	if len(line) < hashSuffixLen || !bytes.HasPrefix(line[len(line)-hashSuffixLen:], []byte(`,"hash":"`)) {
		return fail(LineNonCanonical, `"hash" is not the last member`)
	}
	h := sha256.New()
	h.Write(line[:len(line)-hashSuffixLen])
	h.Write([]byte{'}'})
	var sum Hash
	h.Sum(sum[:0])
	// On these two failures the entry is returned as read, so that the verifier can still link
	// the chain through it and report one problem, not a cascade.
	if sum != e.Hash {
		return e, &LineError{Kind: LineHashMismatch, Seq: e.Seq, HasSeq: true, Detail: fmt.Sprintf("content hashes to %s, the line says %s", sum, e.Hash)}
	}
	canonical := newEntry(e.Seq, e.Prev, e.Record, e.Checkpoint)
	if !bytes.Equal(canonical.line, line) {
		return e, &LineError{Kind: LineNonCanonical, Seq: e.Seq, HasSeq: true, Detail: fmt.Sprintf("differs from the canonical encoding at byte %d", firstDifference(canonical.line, line))}
	}
	return canonical, nil
}

func decodeHash(s string, h *Hash) error {
	if len(s) != 2*len(h) {
		return fmt.Errorf("%d hex digits, want %d", len(s), 2*len(h))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return fmt.Errorf("not hex: %w", err)
	}
	return nil
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
