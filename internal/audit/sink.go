package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Sink stores entries in order. Append returns once the entries are as durable as the sink can
// make them; the log calls it from one goroutine only, with whole batches, so a sink can make a
// batch durable at once (one fsync, one HTTP request, one queue write).
//
// An error leaves the sink in an unknown state (part of the batch may be stored): the log stops
// using it, and a restart recovers from what the sink really holds.
type Sink interface {
	Append(ctx context.Context, entries []Entry) error
	Close() error
}

// WriterSink writes JSON Lines to a stream such as stdout, for a log collector to pick up. It
// cannot make anything durable and cannot tell a restarted log where the chain stands, so it
// is a copy for collection, beside a FileSink that holds the chain.
type WriterSink struct {
	w   io.Writer
	buf []byte
}

// NewWriterSink writes to w; Close does not close w.
func NewWriterSink(w io.Writer) *WriterSink { return &WriterSink{w: w} }

// Append writes the batch in one Write, so that lines of concurrent writers to the same stream
// interleave at batch boundaries at worst.
func (s *WriterSink) Append(ctx context.Context, entries []Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.buf = appendLines(s.buf[:0], entries)
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("writing %d audit entries: %w", len(entries), err)
	}
	return nil
}

// Close does nothing: the stream belongs to the caller.
func (s *WriterSink) Close() error { return nil }

func appendLines(dst []byte, entries []Entry) []byte {
	for i := range entries {
		dst = append(dst, entries[i].line...)
		dst = append(dst, '\n')
	}
	return dst
}

// Tee appends every batch to primary, the sink that holds the chain, and then to each copy
// (a WriterSink on standard output, for a log collector). A copy that fails is reported to
// onError and skipped: a collector's stream that is down never blocks or fails an append,
// and the primary keeps the record.
func Tee(primary Sink, onError func(error), copies ...Sink) Sink {
	return &tee{primary: primary, copies: copies, onError: onError}
}

type tee struct {
	primary Sink
	copies  []Sink
	onError func(error)
}

func (t *tee) Append(ctx context.Context, entries []Entry) error {
	if err := t.primary.Append(ctx, entries); err != nil {
		return err
	}
	for _, c := range t.copies {
		if err := c.Append(ctx, entries); err != nil && t.onError != nil {
			t.onError(err)
		}
	}
	return nil
}

func (t *tee) Close() error {
	errs := []error{t.primary.Close()}
	for _, c := range t.copies {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
