package kubelite

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/spectrocloud/nodewright/internal/text"
)

// StatusError is an answer of the API server that is not a success: its HTTP status and
// the Status object it sent (metav1.Status), whose message is the error's text, as
// client-go's.
type StatusError struct {
	// Code is the HTTP status code (or, in a watch's ERROR event, the Status's code).
	Code int
	// Reason is the Status's reason (NotFound, Conflict, AlreadyExists, Expired...); empty
	// when the answer was not a Status.
	Reason string
	// Message is the Status's message, or what the server sent instead of a Status.
	Message string
}

func (e *StatusError) Error() string { return e.Message }

// status is the part of metav1.Status an error needs.
type status struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
}

// statusError reads the error of an answer that is not a success.
func statusError(resp *http.Response, body []byte) *StatusError {
	e := &StatusError{Code: resp.StatusCode}
	var s status
	if json.Unmarshal(body, &s) == nil && s.Kind == "Status" {
		e.Reason, e.Message = s.Reason, s.Message
	}
	if e.Message == "" {
		e.Message = fmt.Sprintf("the server answered %s to %s %s", resp.Status, resp.Request.Method, resp.Request.URL.Path)
		if b := strings.TrimSpace(string(body)); b != "" {
			e.Message += ": " + text.Shorten(b, 512)
		}
	}
	return e
}

// The reasons of metav1.StatusReason the helpers tell apart.
const (
	reasonNotFound      = "NotFound"
	reasonAlreadyExists = "AlreadyExists"
	reasonConflict      = "Conflict"
	reasonGone          = "Gone"
	reasonExpired       = "Expired"
	reasonForbidden     = "Forbidden"
	reasonUnauthorized  = "Unauthorized"
)

func is(err error, code int, reasons ...string) bool {
	var e *StatusError
	if !errors.As(err, &e) {
		return false
	}
	for _, r := range reasons {
		if e.Reason == r {
			return true
		}
	}
	return code != 0 && e.Reason == "" && e.Code == code
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return is(err, http.StatusNotFound, reasonNotFound) }

// IsAlreadyExists reports whether err says an object of the name exists already.
func IsAlreadyExists(err error) bool { return is(err, 0, reasonAlreadyExists) }

// IsConflict reports whether err says the object changed since the resourceVersion the
// write was based on.
func IsConflict(err error) bool { return is(err, http.StatusConflict, reasonConflict) }

// IsGone reports whether err says a resourceVersion is too old for the server to list or
// watch from (410 Gone, or Expired): the client lists again.
func IsGone(err error) bool { return is(err, http.StatusGone, reasonGone, reasonExpired) }

// IsForbidden reports whether err says the client may not do what it asked.
func IsForbidden(err error) bool { return is(err, http.StatusForbidden, reasonForbidden) }

// IsUnauthorized reports whether err says the server did not accept the client's
// credentials.
func IsUnauthorized(err error) bool { return is(err, http.StatusUnauthorized, reasonUnauthorized) }

// IgnoreNotFound is err, or nil when err says the object does not exist.
func IgnoreNotFound(err error) error {
	if IsNotFound(err) {
		return nil
	}
	return err
}
