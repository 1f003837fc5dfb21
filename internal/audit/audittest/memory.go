// Package audittest is an audit.Appender for tests of the controllers that write the trail: it
// keeps the records in memory, taking a record again by its ID as a duplicate, as the trail
// does.
package audittest

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// Memory keeps the records appended to it. The zero value is ready.
type Memory struct {
	mu      sync.Mutex
	records []audit.Record
}

// Append keeps each record unless one with its ID is kept already.
func (m *Memory) Append(_ context.Context, records ...audit.Record) ([]audit.Appended, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]audit.Appended, len(records))
	for i, r := range records {
		dup := slices.ContainsFunc(m.records, func(x audit.Record) bool { return x.ID == r.ID })
		if !dup {
			m.records = append(m.records, r)
		}
		out[i] = audit.Appended{Seq: uint64(len(m.records)), Duplicate: dup}
	}
	return out, nil
}

// Find is the first record of subject's transition to a state that starts with to, nil when
// there is none.
func (m *Memory) Find(subject, to string) *audit.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.records {
		if r.Subject.Name == subject && strings.HasPrefix(r.To, to) {
			return &r
		}
	}
	return nil
}

// Transitions lists subject's records as "from->to", in order.
func (m *Memory) Transitions(subject string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, r := range m.records {
		if r.Subject.Name == subject {
			out = append(out, r.From+"->"+r.To)
		}
	}
	return out
}
