package linstor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
)

// The kinds of failure a caller decides on, with errors.Is.
var (
	// ErrNotFound: LINSTOR has no such object (it answered 404, a not-found code, or lists
	// none by that name).
	ErrNotFound = errors.New("not found")
	// ErrExists: LINSTOR refused to create what it already has.
	ErrExists = errors.New("already exists")
	// ErrInUse: LINSTOR refused because the object is in use (a resource open on its node, or
	// the last diskful replica that diskless ones still use).
	ErrInUse = errors.New("in use")
	// ErrNoAnswer: LINSTOR did not answer within the request's time. What it did with the
	// request is unknown: read the state again before deciding (linstor-server#253).
	ErrNoAnswer = errors.New("no answer")
	// ErrRefused: this client refused the call before asking LINSTOR, to keep a replica the
	// caller must not lose (RefusedError says why).
	ErrRefused = errors.New("refused")
)

// Message is one entry of LINSTOR's answer (its ApiCallRc).
type Message struct {
	// Code is LINSTOR's return code: severity, operation and object masks and a number.
	Code       int64
	Text       string
	Cause      string
	Details    string
	Correction string
	ReportIDs  []string
}

// IsError reports whether the message is an error (as opposed to a warning or information).
func (m Message) IsError() bool { return uint64(m.Code)&maskError == maskError }

func (m Message) String() string {
	parts := []string{strings.Join(strings.Fields(m.Text), " ")}
	for _, part := range []struct{ label, text string }{{"cause", m.Cause}, {"details", m.Details}, {"correction", m.Correction}} {
		if t := strings.Join(strings.Fields(part.text), " "); t != "" {
			parts = append(parts, part.label+": "+t)
		}
	}
	if len(m.ReportIDs) > 0 {
		parts = append(parts, "error reports: "+strings.Join(m.ReportIDs, ", "))
	}
	if len(parts) == 1 {
		return parts[0]
	}
	for i := range parts[:len(parts)-1] {
		parts[i] = strings.TrimSuffix(parts[i], ".")
	}
	return strings.Join(parts, "; ")
}

// The masks of LINSTOR's return codes (linstor-common's ApiConsts).
const (
	maskError    = 0xC000000000000000
	maskBitsCode = 0x7FFF
	codeInUse    = 997
)

// Error is a call LINSTOR did not carry out: what was asked (Op: `place a replica of
// "pvc-1" on node "n2"`), the HTTP status LINSTOR answered (0 when none came) and its
// messages, or the failure that kept the answer from coming.
type Error struct {
	Op       string
	Status   int
	Messages []Message
	// Reason says what this client found wrong when LINSTOR's answer itself does not.
	Reason string
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "LINSTOR: %s: ", e.Op)
	switch {
	case e.Status != 0:
		fmt.Fprintf(&b, "answered %d %s", e.Status, http.StatusText(e.Status))
		var texts []string
		for _, m := range e.Messages {
			texts = append(texts, m.String())
		}
		if len(texts) > 0 {
			b.WriteString(": " + strings.Join(texts, " | "))
		}
		if e.Reason != "" {
			b.WriteString(" (" + e.Reason + ")")
		}
	case e.Reason != "":
		b.WriteString(e.Reason)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches ErrNotFound, ErrExists and ErrInUse by LINSTOR's return codes (and a 404), so that
// a caller need not know them.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound || e.hasCode(300, 399)
	case ErrExists:
		return e.hasCode(500, 520) || e.hasCode(522, 599)
	case ErrInUse:
		return e.hasCode(codeInUse, codeInUse)
	}
	return false
}

// hasCode reports whether an error message's code (without the masks) is within lo..hi. 300
// to 399 are LINSTOR's "not found" codes, 500 to 599 its "exists" ones (but 521, a storage pool
// lost).
func (e *Error) hasCode(lo, hi int64) bool {
	for _, m := range e.Messages {
		if code := m.Code & maskBitsCode; m.IsError() && code >= lo && code <= hi {
			return true
		}
	}
	return false
}

// RefusedError is a call this client refused without asking LINSTOR.
type RefusedError struct {
	Op     string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("LINSTOR: %s: refused: %s", e.Op, e.Reason)
}

func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// newError builds the error of a failed call from what the transport recorded of LINSTOR's
// answer and the error golinstor returned.
func newError(op string, ans *answer, timeout time.Duration, err error) error {
	e := &Error{Op: op, Err: err}
	if ans != nil && ans.status != 0 {
		e.Status, e.Messages = ans.status, ans.messages
		if len(e.Messages) == 0 && ans.body != "" {
			e.Reason = "the answer is not LINSTOR's: " + ans.body
		}
		return e
	}
	var calls lapi.ApiCallError
	if errors.As(err, &calls) {
		e.Messages = messages(calls)
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) {
		e.Err = fmt.Errorf("%w: %w", ErrNoAnswer, err)
		e.Reason = fmt.Sprintf("no answer within %s; what LINSTOR did with the request is unknown, read its state again", timeout)
	}
	return e
}

func messages(rcs []lapi.ApiCallRc) []Message {
	out := make([]Message, 0, len(rcs))
	for _, rc := range rcs {
		out = append(out, Message{
			Code: rc.RetCode, Text: rc.Message, Cause: rc.Cause, Details: rc.Details,
			Correction: rc.Correction, ReportIDs: rc.ErrorReportIds,
		})
	}
	return out
}
