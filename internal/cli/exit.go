package cli

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// The exit codes scripts can rely on; rootHelp and docs/cli.md document them.
const (
	// ExitOK: done.
	ExitOK = 0
	// ExitFailed: the operation failed or was refused, a check found a problem, or a workflow
	// waited on (a migration, a flip) ended Failed or RolledBack.
	ExitFailed = 1
	// ExitUsage: the command line is wrong (unknown command or flag, wrong arguments, a bad
	// value, an unreadable input file).
	ExitUsage = 2
	// ExitNotFinished: a wait ended before the workflow reached a final phase.
	ExitNotFinished = 3
)

// ExitError is an error with the exit code it ends the program with. Silent ones have already
// been reported (a verification report, a migration's final phase) and print nothing more.
type ExitError struct {
	Code   int
	Err    error
	Silent bool
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit code %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// UsageError is a mistake in how a command was called; it exits with ExitUsage.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageError(err error) error { return &UsageError{Err: err} }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// failure marks err as the operation failing (ExitFailed).
type failure struct{ err error }

func (e *failure) Error() string { return e.err.Error() }
func (e *failure) Unwrap() error { return e.err }

// asFailure marks an error from a command's work as ExitFailed unless it carries its own code.
func asFailure(err error) error {
	if err == nil {
		return nil
	}
	var exit *ExitError
	var usage *UsageError
	var f *failure
	if errors.As(err, &exit) || errors.As(err, &usage) || errors.As(err, &f) {
		return err
	}
	return &failure{err: err}
}

// ExitCode is the exit code for an error Execute got: ExitOK for nil, the code of an
// *ExitError, ExitUsage for a UsageError or an error cobra raised itself (flags, arguments,
// unknown commands), ExitFailed for an error a command returned.
func ExitCode(err error) int {
	var exit *ExitError
	var usage *UsageError
	var f *failure
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &exit):
		return exit.Code
	case errors.As(err, &usage):
		return ExitUsage
	case errors.As(err, &f):
		return ExitFailed
	}
	return ExitUsage
}

// deniedMarker is what the API server puts between the webhook's name and its reason.
const deniedMarker = "denied the request: "

// rulesNotChecked is the API server's note that a schema error kept CEL rules from running.
const rulesNotChecked = "some validation rules were not checked"

// apiError says what the API server refused, as the refusing party wrote it: an admission
// webhook's reason (after "denied the request: "), or the schema's field errors, prefixed by
// the object (kind/name). Other errors are returned as they are.
func apiError(err error, kind, name string) error {
	if err == nil {
		return nil
	}
	object := kind
	if name != "" {
		object += "/" + name
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err
	}
	s := status.Status()
	msg := s.Message
	if _, reason, ok := strings.Cut(msg, deniedMarker); ok {
		return errors.New(object + ": " + reason)
	}
	if apierrors.IsInvalid(err) && s.Details != nil && len(s.Details.Causes) > 0 {
		var parts []string
		for _, c := range s.Details.Causes {
			if strings.Contains(c.Message, rulesNotChecked) && len(s.Details.Causes) > 1 {
				continue // says only that the other causes stopped the CEL rules
			}
			if c.Field != "" && c.Field != "<nil>" {
				parts = append(parts, c.Field+": "+c.Message)
			} else {
				parts = append(parts, c.Message)
			}
		}
		return errors.New(object + ": " + strings.Join(parts, "; "))
	}
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s not found", object)
	}
	return errors.New(object + ": " + msg)
}
