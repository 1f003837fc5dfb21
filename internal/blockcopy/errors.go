//go:build linux

package blockcopy

import (
	"context"
	"errors"
	"fmt"
)

// Failure classes. Every error this package returns wraps exactly one of
// them, so that callers can tell a bad request from a failing disk from a
// copy that was stopped on purpose, and map each to its own exit code.
var (
	ErrMismatch  = errors.New("verification failed")
	ErrBadInput  = errors.New("bad input")
	ErrIO        = errors.New("I/O error")
	ErrCancelled = errors.New("cancelled before completion")
)

// Exit codes of nodewright-copy, documented in docs/nodewright-copy.md.
const (
	ExitOK        = 0
	ExitMismatch  = 1
	ExitBadInput  = 2
	ExitIO        = 3
	ExitCancelled = 4
)

// Status names used in the JSON result, one per exit code.
const (
	StatusOK        = "ok"
	StatusMismatch  = "mismatch"
	StatusBadInput  = "bad-input"
	StatusIOError   = "io-error"
	StatusCancelled = "cancelled"
)

// Classify returns the exit code and status name for err. Cancellation wins
// over everything else because a stopped copy often surfaces secondary
// errors (a read interrupted half-way) that are not the real reason.
// Unclassified errors count as I/O errors: they come from the system.
func Classify(err error) (exitCode int, status string) {
	switch {
	case err == nil:
		return ExitOK, StatusOK
	case errors.Is(err, ErrCancelled):
		return ExitCancelled, StatusCancelled
	case errors.Is(err, ErrMismatch):
		return ExitMismatch, StatusMismatch
	case errors.Is(err, ErrBadInput):
		return ExitBadInput, StatusBadInput
	default:
		return ExitIO, StatusIOError
	}
}

func badInput(flag, path, reason string) error {
	return fmt.Errorf("%w: %s %s: %s", ErrBadInput, flag, path, reason)
}

// cancelledOr turns a context error into ErrCancelled and leaves any other
// error alone.
func cancelledOr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrCancelled, err)
	}
	return err
}
