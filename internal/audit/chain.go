package audit

import (
	"errors"
	"fmt"
	"time"
)

// ChainState is where a chain stands: what the next entry continues from. A log resumes from
// the state its sink recovered, so that a restart continues the sequence instead of forking it.
type ChainState struct {
	Next uint64 // the next sequence number, i.e. the number of entries so far
	Head Hash   // hash of entry Next-1; zero for an empty chain
	// SinceCheckpoint counts the entries after the last checkpoint.
	SinceCheckpoint uint64
	// ids holds every record ID in the chain, for idempotent append; nil for an empty chain.
	ids *idSet
	// lastCheckpoint is the line of the chain's newest checkpoint entry, as a FileSink
	// recovered it; nil when there is none. A witness countersigns it again on opening.
	lastCheckpoint []byte
}

// Records is how many distinct record IDs the chain holds.
func (s ChainState) Records() int {
	if s.ids == nil {
		return 0
	}
	return s.ids.len()
}

// chain builds entries in order. It is not safe for concurrent use: the log's committer owns it.
type chain struct {
	state ChainState
	added []string // IDs of the records added since the last mark
}

// chainMark is where the chain stood before a request, so that a request refused halfway
// leaves no trace in it.
type chainMark struct {
	next, sinceCheckpoint uint64
	head                  Hash
}

func (c *chain) mark() chainMark {
	c.added = c.added[:0]
	return chainMark{next: c.state.Next, sinceCheckpoint: c.state.SinceCheckpoint, head: c.state.Head}
}

// rollback forgets every entry added since m.
func (c *chain) rollback(m chainMark) {
	for _, id := range c.added {
		c.state.ids.remove(id)
	}
	c.added = c.added[:0]
	c.state.Next, c.state.SinceCheckpoint, c.state.Head = m.next, m.sinceCheckpoint, m.head
}

func newChain(state ChainState) *chain {
	if state.ids == nil {
		state.ids = newIDSet()
	} else {
		state.ids = state.ids.clone() // the caller's state stays as it was
	}
	return &chain{state: state}
}

var errNoID = errors.New("audit record has no ID: build it with audit.Transition")

// checkRecord refuses, before it reaches the chain, a record the verifier would not read back.
// Its length is checked when it is chained, where its seq is known.
func checkRecord(r *Record) error {
	if r.ID == "" {
		return errNoID
	}
	// RFC 3339 has four-digit years; Go writes other years, but no reader takes them back.
	if y := r.Time.UTC().Year(); y < 0 || y > 9999 {
		return fmt.Errorf("audit record %s: time %s: the trail holds years 0000 to 9999", r.ID, r.Time.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// ErrLineTooLong refuses a record whose line would be longer than MaxLineBytes, which the
// verifier reports as malformed: a log never writes a trail its verifier rejects.
var ErrLineTooLong = errors.New("audit record too long for one line of the trail")

// addRecord chains r, or reports the sequence number of the record with the same ID already in
// the chain (a re-sent record is one record, not two). A record too long for one line is
// refused and leaves the chain as it was.
// The caller has checked that r has an ID.
func (c *chain) addRecord(r Record) (e Entry, duplicateOf uint64, duplicate bool, err error) {
	if seq, ok := c.state.ids.get(r.ID); ok {
		return Entry{}, seq, true, nil
	}
	e = newEntry(c.state.Next, c.state.Head, &r, nil)
	if len(e.line) > MaxLineBytes {
		return Entry{}, 0, false, fmt.Errorf("%w: record %s would be a line of %d bytes, over the limit of %d bytes (MaxLineBytes)",
			ErrLineTooLong, r.ID, len(e.line), MaxLineBytes)
	}
	c.push(e)
	c.state.ids.put(r.ID, e.Seq)
	c.added = append(c.added, r.ID)
	return e, 0, false, nil
}

// addCheckpoint signs the chain as it stands and chains the checkpoint.
func (c *chain) addCheckpoint(s *Signer, at time.Time) Entry {
	cp := &Checkpoint{Size: c.state.Next, Head: c.state.Head, Time: at.UTC()}
	s.sign(cp)
	e := newEntry(c.state.Next, c.state.Head, nil, cp)
	c.push(e)
	c.state.SinceCheckpoint = 0 // the checkpoint covers everything up to and excluding itself
	return e
}

// push makes e, built on the chain as it stands, its newest entry.
func (c *chain) push(e Entry) {
	c.state.Next++
	c.state.Head = e.Hash
	c.state.SinceCheckpoint++
}
