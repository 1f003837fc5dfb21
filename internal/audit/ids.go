package audit

import "maps"

// idSet maps the record IDs of a chain to their sequence numbers, for idempotent append and for
// the verifier's duplicate check. IDs made by Transition are 32 lowercase hex digits; those are
// kept as 16 bytes in a map without pointers, which the garbage collector does not scan: with a
// million records, scanning a map of strings was most of verification's collection work.
type idSet struct {
	hex   map[[16]byte]uint64
	other map[string]uint64 // IDs of any other form
}

func newIDSet() *idSet {
	return &idSet{hex: map[[16]byte]uint64{}, other: map[string]uint64{}}
}

func (s *idSet) get(id string) (uint64, bool) {
	if k, ok := hexID(id); ok {
		seq, found := s.hex[k]
		return seq, found
	}
	seq, found := s.other[id]
	return seq, found
}

func (s *idSet) put(id string, seq uint64) {
	if k, ok := hexID(id); ok {
		s.hex[k] = seq
		return
	}
	s.other[string([]byte(id))] = seq // a copy: id may be a view of a line
}

func (s *idSet) remove(id string) {
	if k, ok := hexID(id); ok {
		delete(s.hex, k)
		return
	}
	delete(s.other, id)
}

func (s *idSet) len() int { return len(s.hex) + len(s.other) }

func (s *idSet) clone() *idSet {
	return &idSet{hex: maps.Clone(s.hex), other: maps.Clone(s.other)}
}

// hexID packs an ID of exactly 32 lowercase hex digits. Only lowercase: "AB" and "ab" are two
// different IDs and must not share a key.
func hexID(id string) ([16]byte, bool) {
	var k [16]byte
	if len(id) != 32 {
		return k, false
	}
	for i := range 32 {
		var v byte
		switch c := id[i]; {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return k, false
		}
		k[i/2] = k[i/2]<<4 | v
	}
	return k, true
}
