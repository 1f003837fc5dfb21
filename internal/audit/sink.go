package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
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

// Tee appends every batch to primary, the sink that holds the chain, and hands a copy to
// each of copies (a WriterSink on standard output, for a log collector), which write it in
// the background. A copy never blocks or fails an append: when one falls behind by more than
// a bounded queue of batches (its reader stalled, say), the batches it cannot take are
// dropped and reported to onError, and the primary keeps every record.
func Tee(primary Sink, onError func(error), copies ...Sink) Sink {
	t := &tee{primary: primary, onError: onError}
	for _, c := range copies {
		q := &teeCopy{sink: c, batches: make(chan []Entry, teeQueue), done: make(chan struct{})}
		go q.run(onError)
		t.copies = append(t.copies, q)
	}
	return t
}

// teeQueue is how many batches a copy may fall behind before batches are dropped.
const teeQueue = 1024

type tee struct {
	primary Sink
	copies  []*teeCopy
	onError func(error)
}

type teeCopy struct {
	sink    Sink
	batches chan []Entry
	done    chan struct{}
	dropped int
}

func (q *teeCopy) run(onError func(error)) {
	defer close(q.done)
	for batch := range q.batches {
		if err := q.sink.Append(context.Background(), batch); err != nil && onError != nil {
			onError(err)
		}
	}
}

func (t *tee) Append(ctx context.Context, entries []Entry) error {
	if err := t.primary.Append(ctx, entries); err != nil {
		return err
	}
	for _, q := range t.copies {
		// The log may reuse the lines' memory once Append returns: the copy gets its own.
		batch := make([]Entry, len(entries))
		for i, e := range entries {
			batch[i] = e
			batch[i].line = append([]byte(nil), e.line...)
		}
		select {
		case q.batches <- batch:
		default:
			q.dropped += len(batch)
			if t.onError != nil {
				t.onError(fmt.Errorf("the copy fell %d batches behind: %d entries not copied so far (the trail keeps them)", teeQueue, q.dropped))
			}
		}
	}
	return nil
}

// teeCloseWait bounds how long Close waits for a copy to write what it was handed.
var teeCloseWait = 5 * time.Second

// Close closes the primary, then lets each copy write what it was handed (for a while: a
// stalled reader must not hold up shutdown) and closes it.
func (t *tee) Close() error {
	errs := []error{t.primary.Close()}
	for _, q := range t.copies {
		close(q.batches)
		select {
		case <-q.done:
			errs = append(errs, q.sink.Close())
		case <-time.After(teeCloseWait):
			errs = append(errs, fmt.Errorf("a copy of the trail did not finish writing within %s", teeCloseWait))
		}
	}
	return errors.Join(errs...)
}
