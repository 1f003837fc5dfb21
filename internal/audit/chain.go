package audit

import (
	"errors"
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

// addRecord chains r, or reports the sequence number of the record with the same ID already in
// the chain (a re-sent record is one record, not two).
// The caller has checked that r has an ID.
func (c *chain) addRecord(r Record) (e Entry, duplicateOf uint64, duplicate bool) {
	if seq, ok := c.state.ids.get(r.ID); ok {
		return Entry{}, seq, true
	}
	e = c.add(&r, nil)
	c.state.ids.put(r.ID, e.Seq)
	return e, 0, false
}

// addCheckpoint signs the chain as it stands and chains the checkpoint.
func (c *chain) addCheckpoint(s *Signer, at time.Time) Entry {
	cp := &Checkpoint{Size: c.state.Next, Head: c.state.Head, Time: at.UTC()}
	s.sign(cp)
	e := c.add(nil, cp)
	c.state.SinceCheckpoint = 0 // the checkpoint covers everything up to and excluding itself
	return e
}

func (c *chain) add(r *Record, cp *Checkpoint) Entry {
	e := newEntry(c.state.Next, c.state.Head, r, cp)
	c.state.Next++
	c.state.Head = e.Hash
	c.state.SinceCheckpoint++
	return e
}
