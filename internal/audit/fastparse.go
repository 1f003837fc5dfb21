package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"k8s.io/apimachinery/pkg/types"
)

// parseCanonical reads a line that is exactly in the canonical encoding, without reflection:
// on the verifier's hot path encoding/json costs several times the hashing. It is strict: it
// accepts only the bytes appendBody and appendHash would write for what it read (FuzzParseLine
// holds it to that), and reports false on anything else; ParseLine then diagnoses the line
// with encoding/json. Strings are views of line, so line must not change afterwards.
// A record entry is read into *into, so that a caller parsing many lines can allocate their
// records together.
func parseCanonical(line []byte, into *Record) (Entry, bool) {
	c := cursor{b: line, ok: true}
	var e Entry
	c.lit(`{"v":1,"seq":`)
	e.Seq = c.uint()
	c.lit(`,"prev":`)
	e.Prev = c.hash()
	if c.peek(`,"record":`) {
		c.lit(`,"record":`)
		c.record(into)
		e.Record = into
	} else {
		c.lit(`,"checkpoint":`)
		e.Checkpoint = c.checkpoint()
	}
	c.lit(`,"hash":`)
	e.Hash = c.hash()
	c.lit(`}`)
	return e, c.ok && c.i == len(line)
}

// cursor reads forward through a line; after the first mismatch ok is false and every read
// returns a zero value, so the callers need not check after each step.
type cursor struct {
	b  []byte
	i  int
	ok bool
}

func (c *cursor) peek(s string) bool {
	return c.ok && bytes.HasPrefix(c.b[c.i:], []byte(s))
}

func (c *cursor) lit(s string) {
	if c.peek(s) {
		c.i += len(s)
		return
	}
	c.ok = false
}

func (c *cursor) uint() uint64 {
	var n uint64
	start := c.i
	for c.ok && c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9' {
		d := uint64(c.b[c.i] - '0')
		if n > (1<<64-1-d)/10 {
			c.ok = false
			return 0
		}
		n = n*10 + d
		c.i++
	}
	// One number has one spelling: no leading zeros.
	if c.i == start || (c.b[start] == '0' && c.i-start > 1) {
		c.ok = false
	}
	return n
}

func (c *cursor) int() int64 {
	neg := c.peek("-")
	if neg {
		c.i++
	}
	n := c.uint()
	if n > 1<<63 || (n == 1<<63 && !neg) || (neg && n == 0) {
		c.ok = false
		return 0
	}
	if neg {
		return -int64(n-1) - 1 // no overflow at the minimum
	}
	return int64(n)
}

func (c *cursor) hash() Hash {
	var h Hash
	if !c.ok || len(c.b)-c.i < 2*len(h)+2 || c.b[c.i] != '"' || c.b[c.i+2*len(h)+1] != '"' {
		c.ok = false
		return h
	}
	digits := c.b[c.i+1 : c.i+1+2*len(h)]
	if _, err := hex.Decode(h[:], digits); err != nil || bytes.ContainsAny(digits, "ABCDEF") {
		c.ok = false
	}
	c.i += 2*len(h) + 2
	return h
}

// str reads a string as appendString writes it: literal UTF-8 but for '"', '\\' and the
// control characters, escaped the one way appendString does. Without escapes the result is a
// view of the line; with them, a copy.
func (c *cursor) str() string {
	c.lit(`"`)
	start := c.i
	for c.ok && c.i < len(c.b) {
		switch ch := c.b[c.i]; {
		case ch == '"':
			s := c.b[start:c.i]
			c.i++
			if !utf8.Valid(s) {
				c.ok = false
			}
			return unsafe.String(unsafe.SliceData(s), len(s))
		case ch == '\\':
			return c.escapedStr(start)
		case ch < 0x20:
			c.ok = false
		default:
			c.i++
		}
	}
	c.ok = false
	return ""
}

// escapedStr finishes a string that holds an escape, from its first byte at start.
func (c *cursor) escapedStr(start int) string {
	out := make([]byte, 0, 64)
	out = append(out, c.b[start:c.i]...)
	for c.ok && c.i < len(c.b) {
		ch := c.b[c.i]
		switch {
		case ch == '"':
			c.i++
			if !utf8.Valid(out) {
				c.ok = false
			}
			return string(out)
		case ch < 0x20:
			c.ok = false
		case ch != '\\':
			out = append(out, ch)
			c.i++
		case c.i+1 >= len(c.b):
			c.ok = false
		default:
			c.i += 2
			switch esc := c.b[c.i-1]; esc {
			case '"', '\\':
				out = append(out, esc)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				// Only control characters without a short form are written as \u00xx.
				var v [1]byte
				if c.i+4 > len(c.b) || c.b[c.i] != '0' || c.b[c.i+1] != '0' || bytes.ContainsAny(c.b[c.i+2:c.i+4], "ABCDEF") {
					c.ok = false
					return ""
				}
				if _, err := hex.Decode(v[:], c.b[c.i+2:c.i+4]); err != nil || v[0] >= 0x20 || strings.IndexByte("\b\f\n\r\t", v[0]) >= 0 {
					c.ok = false
					return ""
				}
				out = append(out, v[0])
				c.i += 4
			default:
				c.ok = false
			}
		}
	}
	c.ok = false
	return ""
}

func (c *cursor) time() time.Time {
	s := c.str()
	if !c.ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	// One instant has one spelling: UTC, no trailing zeros in the fraction.
	var buf [40]byte
	if err != nil || string(t.UTC().AppendFormat(buf[:0], time.RFC3339Nano)) != s {
		c.ok = false
	}
	return t.UTC()
}

func (c *cursor) record(r *Record) {
	c.lit(`{"id":`)
	r.ID = c.str()
	c.lit(`,"time":`)
	r.Time = c.time()
	c.lit(`,"actor":`)
	r.Actor = c.str()
	c.lit(`,"subject":{"apiVersion":`)
	r.Subject.APIVersion = c.str()
	c.lit(`,"kind":`)
	r.Subject.Kind = c.str()
	c.lit(`,"namespace":`)
	r.Subject.Namespace = c.str()
	c.lit(`,"name":`)
	r.Subject.Name = c.str()
	c.lit(`,"uid":`)
	r.Subject.UID = types.UID(c.str())
	c.lit(`,"generation":`)
	r.Subject.Generation = c.int()
	c.lit(`},"action":`)
	r.Action = c.str()
	c.lit(`,"from":`)
	r.From = c.str()
	c.lit(`,"to":`)
	r.To = c.str()
	c.lit(`,"reason":`)
	r.Reason = c.str()
	c.lit(`,"message":`)
	r.Message = c.str()
	c.lit(`,"details":[`)
	for c.ok && !c.peek("]") {
		if len(r.Details) > 0 {
			c.lit(",")
		}
		var d Detail
		c.lit(`{"name":`)
		d.Name = c.str()
		c.lit(`,"value":`)
		d.Value = c.str()
		c.lit(`}`)
		r.Details = append(r.Details, d)
	}
	c.lit(`]}`)
}

func (c *cursor) checkpoint() *Checkpoint {
	cp := &Checkpoint{}
	c.lit(`{"size":`)
	cp.Size = c.uint()
	c.lit(`,"head":`)
	cp.Head = c.hash()
	c.lit(`,"time":`)
	cp.Time = c.time()
	c.lit(`,"keyId":`)
	cp.KeyID = c.str()
	c.lit(`,"sig":`)
	text := c.str()
	sig, err := base64.StdEncoding.DecodeString(text)
	// The decoder forgives newlines and stray padding bits; the canonical form has neither.
	if err != nil || base64.StdEncoding.EncodeToString(sig) != text {
		c.ok = false
	}
	cp.Signature = sig
	c.lit(`}`)
	return cp
}
