package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultCheckpointEvery is how many entries a log writes between two checkpoints by default.
const DefaultCheckpointEvery = 1000

// maxBatch bounds one group commit, so one sink write stays a bounded size.
const maxBatch = 8192

// ErrClosed is returned by a log after Close.
var ErrClosed = errors.New("audit log closed")

// LogOptions tune a Log; zero values take the defaults.
type LogOptions struct {
	// CheckpointEvery writes a checkpoint after this many entries (default DefaultCheckpointEvery).
	CheckpointEvery uint64
	// CheckpointInterval also writes one when this much time passed with entries unsigned
	// (0: no timer), bounding the unsigned window in time as well as in entries.
	CheckpointInterval time.Duration
	// Now is the clock of checkpoint times (default time.Now).
	Now func() time.Time
	// OnCheckpoint, when set, is called with each checkpoint's line (its canonical encoding,
	// without the newline) once the checkpoint is durable, so that it can be published outside
	// the trail too. It runs on the log's committer and must not block.
	OnCheckpoint func(line []byte)
}

// RecordError is why Append refused a call: one of its records, Index (from 0) of Of, cannot
// be written. Nothing of the call was.
type RecordError struct {
	Index, Of int
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %d of %d: %v", e.Index+1, e.Of, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// Appended is the outcome of appending one record.
type Appended struct {
	Seq uint64
	// Duplicate is true when a record with the same ID was already in the chain, at Seq; the
	// record was not appended again.
	Duplicate bool
}

type request struct {
	records    []Record
	checkpoint bool
	result     []Appended
	cp         *Checkpoint
	err        error
	done       chan struct{}
}

// Log appends records to a chain and stores them in a sink. Appends from many goroutines are
// committed together: while the sink makes one batch durable, the next gathers, so throughput
// grows with concurrency while each Append still returns only once its records are durable.
type Log struct {
	sink    Sink
	signer  *Signer
	opts    LogOptions
	chain   *chain // owned by the committer goroutine
	reqs    chan *request
	closing chan struct{}
	done    chan struct{}
	failed  error // the sink error that stopped the log; set by the committer

	closeOnce sync.Once
	closeErr  error
}

// NewLog continues the chain from state (a FileSink's State(), or the zero value for a new
// chain), signing checkpoints with signer.
func NewLog(sink Sink, signer *Signer, state ChainState, opts LogOptions) *Log {
	if opts.CheckpointEvery == 0 {
		opts.CheckpointEvery = DefaultCheckpointEvery
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Log{sink: sink, signer: signer, opts: opts, chain: newChain(state),
		reqs: make(chan *request), closing: make(chan struct{}), done: make(chan struct{})}
	go l.commit()
	return l
}

// Append adds records and returns once they are durable in the sink. A record whose ID is
// already in the chain is not added again (Duplicate), so re-sending after a crash or a timeout
// is safe: that is also the answer to ctx ending while the records are in flight, when Append
// cannot tell whether they were written.
func (l *Log) Append(ctx context.Context, records ...Record) ([]Appended, error) {
	for i := range records {
		if err := checkRecord(&records[i]); err != nil {
			return nil, &RecordError{Index: i, Of: len(records), Err: err}
		}
	}
	req := &request{records: records, done: make(chan struct{})}
	if err := l.do(ctx, req); err != nil {
		return nil, err
	}
	return req.result, nil
}

// Checkpoint signs the chain as it stands now, writes the checkpoint and returns it.
func (l *Log) Checkpoint(ctx context.Context) (Checkpoint, error) {
	req := &request{checkpoint: true, done: make(chan struct{})}
	if err := l.do(ctx, req); err != nil {
		return Checkpoint{}, err
	}
	return *req.cp, nil
}

func (l *Log) do(ctx context.Context, req *request) error {
	select {
	case l.reqs <- req:
	case <-l.done:
		return l.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req.done:
		return req.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Log) closedErr() error {
	if l.failed != nil {
		return fmt.Errorf("%w after a sink failure: %w", ErrClosed, l.failed)
	}
	return ErrClosed
}

// Close writes a final checkpoint, so that a cleanly stopped log leaves no unsigned entries,
// and closes the sink.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		close(l.closing)
		<-l.done
		l.closeErr = l.failed
		if err := l.sink.Close(); err != nil && l.closeErr == nil {
			l.closeErr = err
		}
	})
	return l.closeErr
}

// commit is the one goroutine that touches the chain and the sink.
func (l *Log) commit() {
	defer close(l.done)
	var tick <-chan time.Time
	if l.opts.CheckpointInterval > 0 {
		t := time.NewTicker(l.opts.CheckpointInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case req := <-l.reqs:
			if !l.flush(l.gather(req), false) {
				return
			}
		case <-tick:
			if l.chain.state.SinceCheckpoint > 0 && !l.flush(nil, true) {
				return
			}
		case <-l.closing:
			// Requests already waiting are served before the final checkpoint.
			for {
				select {
				case req := <-l.reqs:
					if !l.flush(l.gather(req), false) {
						return
					}
					continue
				default:
				}
				break
			}
			if l.chain.state.SinceCheckpoint > 0 {
				l.flush(nil, true)
			}
			return
		}
	}
}

// gather takes req and whatever other requests are already waiting, up to maxBatch records.
func (l *Log) gather(req *request) []*request {
	batch := []*request{req}
	n := len(req.records)
	for n < maxBatch {
		select {
		case more := <-l.reqs:
			batch = append(batch, more)
			n += len(more.records)
			continue
		default:
		}
		break
	}
	return batch
}

// flush chains the batch's records (and a checkpoint when one is due or asked for), writes them
// in one sink append and answers every request. It reports false when the sink failed: the
// chain in memory is then ahead of what the sink holds, so the log stops.
func (l *Log) flush(batch []*request, forceCheckpoint bool) bool {
	var entries []Entry
	checkpoint := func() *Checkpoint {
		e := l.chain.addCheckpoint(l.signer, l.opts.Now())
		entries = append(entries, e)
		return e.Checkpoint
	}
	for _, req := range batch {
		if req.checkpoint {
			req.cp = checkpoint()
			continue
		}
		// One call's records are added whole or not at all.
		mark, from := l.chain.mark(), len(entries)
		req.result = make([]Appended, len(req.records))
		for i, r := range req.records {
			e, dupOf, dup, err := l.chain.addRecord(r)
			if err != nil {
				l.chain.rollback(mark)
				entries = entries[:from]
				req.result, req.err = nil, &RecordError{Index: i, Of: len(req.records), Err: err}
				break
			}
			if dup {
				req.result[i] = Appended{Seq: dupOf, Duplicate: true}
				continue
			}
			entries = append(entries, e)
			req.result[i] = Appended{Seq: e.Seq}
			if l.chain.state.SinceCheckpoint >= l.opts.CheckpointEvery {
				checkpoint()
			}
		}
	}
	if forceCheckpoint {
		checkpoint()
	}
	var err error
	if len(entries) > 0 {
		// Not any caller's context: the batch serves many callers, and one giving up must not
		// cut the others' write short.
		err = l.sink.Append(context.Background(), entries)
	}
	if err != nil {
		l.failed = fmt.Errorf("storing %d audit entries from seq %d: %w", len(entries), entries[0].Seq, err)
	}
	if err == nil && l.opts.OnCheckpoint != nil {
		for i := range entries {
			if entries[i].Checkpoint != nil {
				l.opts.OnCheckpoint(append([]byte(nil), entries[i].line...))
			}
		}
	}
	for _, req := range batch {
		if err != nil {
			req.err = l.failed
		}
		close(req.done)
	}
	return err == nil
}

// Appender is what records transitions: a Log, or a stand-in for one.
type Appender interface {
	Append(ctx context.Context, records ...Record) ([]Appended, error)
}
